//! What a lookup may reach: a configuration checked without network, a next link to another
//! origin refused, a member's lookups in its own subscription and groups.

use super::*;

#[tokio::test]
async fn invalid_config_and_names_are_rejected_without_network() {
    let arm = FakeArm::start().await;
    let mut cfg = config(&arm);
    cfg.client_id = None;
    let err = AzureFleet::new(cfg).unwrap_err();
    assert!(err.to_string().contains("client_id"), "{err}");

    let fleet = fleet(config(&arm));
    let err = fleet
        .for_member(None)
        .unwrap()
        .find_by_address("rg/../../other", "1.2.3.4")
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("not a valid resource group name"),
        "{err}"
    );
    assert!(arm.lists().is_empty());
    assert_eq!(arm.token_requests(), 0);
}

#[tokio::test]
async fn next_link_to_another_origin_is_refused() {
    let arm = FakeArm::start().await;
    let elsewhere = FakeArm::start().await;
    arm.set_page_size(1);
    arm.set_ips(SUB, RG, ips("20.13.0", 2));
    arm.set_next_link_base(elsewhere.base());
    let fleet = fleet(config(&arm));
    let err = fleet
        .for_member(None)
        .unwrap()
        .find_by_address(RG, "20.13.0.1")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("refusing"), "{err}");
    assert!(
        elsewhere.lists().is_empty(),
        "the bearer token went nowhere else"
    );
}

/// A member's lookups stay in its configured subscription and groups: a group outside them is
/// refused without a request; its own are listed in its subscription.
#[tokio::test]
async fn a_member_lookup_stays_in_its_groups() {
    let arm = FakeArm::start().await;
    arm.set_ips(SUB2, "rg-b", vec![FakeIp::new("pip-b", "20.19.0.1")]);
    arm.set_ips(SUB2, "rg-a", vec![FakeIp::new("pip-a", "20.19.0.2")]);
    arm.set_ips(SUB2, "rg-a-extra", vec![]);
    let fleet = fleet(config(&arm));
    let a = fleet
        .member("a", Some(SUB2), "rg-a", &["rg-a-extra".to_string()])
        .unwrap();
    assert_eq!(a.subscription(), SUB2);
    for group in ["rg-b", "RG-B", "rg-a/../rg-b", "rg-a-extra2"] {
        match a.find_by_address(group, "20.19.0.1").await {
            Err(LookupError::NotAllowed {
                member,
                resource_group,
            }) => assert_eq!((member.as_str(), resource_group.as_str()), ("a", group)),
            other => panic!("{group:?}: {other:?}"),
        }
    }
    // A member given no group at all: the missing setting is named.
    let none = fleet.member("none", Some(SUB2), "", &[]).unwrap();
    let err = none.find_by_address("", "20.19.0.1").await.unwrap_err();
    assert!(
        err.to_string()
            .contains("member none has no Azure resource group"),
        "{err}"
    );
    assert!(arm.lists().is_empty(), "{:?}", arm.lists());
    assert!(found(&*a, "RG-A", "20.19.0.2").await);
    assert!(!found(&*a, "rg-a-extra", "20.19.0.2").await);
    assert_eq!(arm.list_operations(SUB2, "rg-a"), 1);
    assert_eq!(arm.list_operations(SUB2, "rg-a-extra"), 1);
    assert_eq!(arm.list_operations(SUB2, "rg-b"), 0);
}
