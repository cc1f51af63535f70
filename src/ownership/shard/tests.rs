//! Unit tests of one round's plan and of the leases it collects.
use super::*;
use crate::ownership::placement::tests::{owners, weights};

#[test]
fn shard_leases_are_named_under_the_prefix() {
    assert_eq!(shard_lease("fleetnet-hub", 3), "fleetnet-hub-shard-3");
}

/// Prefix `p`, client-go's timing, `identity`.
fn cfg_of(identity: &str) -> LeaseConfig {
    LeaseConfig {
        namespace: "ns".into(),
        name: "p".into(),
        identity: identity.into(),
        lease_duration: std::time::Duration::from_secs(15),
        renew_deadline: std::time::Duration::from_secs(10),
        retry_period: std::time::Duration::from_secs(2),
    }
}

fn listed(name: &str, holder: &str, replica_of: Option<&str>) -> Lease {
    Lease {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            labels: replica_of.map(|p| [(REPLICA_LABEL.to_string(), p.to_string())].into()),
            ..Default::default()
        },
        spec: Some(k8s_openapi::api::coordination::v1::LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(15),
            ..Default::default()
        }),
    }
}

#[test]
fn a_round_plans_this_replicas_share_and_takes_back_what_it_still_holds() {
    let shards = Shards::new(cfg_of("me"), 8);
    let members: Vec<String> = (0..40).map(|i| format!("m{i}")).collect();
    shards.set_wanted(members.clone());
    let announcements = vec![
        listed("p-replica-me", "me", Some("p")),
        listed("p-replica-other", "other", Some("p")),
    ];
    let steps = plan(&shards, announcements.clone()).steps;
    let w = weights(&members, 8);
    let owners = owners(&w, &["me", "other"], &[None; 8]);
    for (s, step) in steps {
        let expected = match owners[s] {
            Some("me") => Step::Acquire,
            _ => Step::Wait,
        };
        assert_eq!(step, expected, "shard {s}");
    }
    // A shard listed as ours whose fence is closed (an answer lost): renewed, not left.
    let mine = owners
        .iter()
        .position(|o| *o == Some("me"))
        .expect("a shard of mine");
    let mut list = announcements;
    list.push(listed(
        &shard_lease("p", u16::try_from(mine).expect("shard")),
        "me",
        None,
    ));
    let steps: BTreeMap<usize, Step> = plan(&shards, list).steps.into_iter().collect();
    assert_eq!(steps[&mine], Step::Renew);
    assert!(
        !shards.lock().shards[mine].claimed(),
        "not written yet: still fenced"
    );
}

#[tokio::test(start_paused = true)]
async fn leases_nobody_renews_are_collected_and_live_or_own_ones_are_not() {
    let shards = Shards::new(cfg_of("me"), 8);
    shards.set_wanted((0..10).map(|i| format!("m{i}")));
    let with_rv = |mut l: Lease, rv: &str| {
        l.metadata.resource_version = Some(rv.into());
        l
    };
    let own = shards.announcement_name();
    let list = |live_rv: &str| {
        vec![
            with_rv(listed(&own, "me", Some("p")), "1"),
            with_rv(listed("p-replica-live", "live", Some("p")), live_rv),
            with_rv(listed("p-replica-crashed", "crashed", Some("p")), "3"),
            // Shard 20 of an earlier --shards=24; shard 5 is within today's 8.
            with_rv(listed("p-shard-20", "crashed", None), "4"),
            with_rv(listed("p-shard-5", "crashed", None), "5"),
            // Another prefix's lease is not this sharding's to collect.
            with_rv(listed("q-replica-x", "x", Some("q")), "6"),
        ]
    };
    assert!(plan(&shards, list("2")).abandoned.is_empty());
    // Expired (15 s) but not yet past the grace (another 15 s).
    tokio::time::advance(std::time::Duration::from_secs(20)).await;
    let live_rv = |renewal: u32| {
        // The live replica renews: its record changes every time.
        let mut l = listed("p-replica-live", "live", Some("p"));
        l.metadata.resource_version = Some(format!("2{renewal}"));
        if let Some(spec) = l.spec.as_mut() {
            spec.renew_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
                jiff::Timestamp::from_second(i64::from(renewal)).expect("time"),
            ));
        }
        l
    };
    let mut listed_now = list("2");
    listed_now[1] = live_rv(1);
    assert!(plan(&shards, listed_now).abandoned.is_empty());
    tokio::time::advance(std::time::Duration::from_secs(11)).await;
    let mut listed_now = list("2");
    listed_now[1] = live_rv(2);
    let abandoned: BTreeSet<(String, String)> =
        plan(&shards, listed_now).abandoned.into_iter().collect();
    let expected: BTreeSet<(String, String)> = [
        ("p-replica-crashed".to_string(), "3".to_string()),
        ("p-shard-20".to_string(), "4".to_string()),
    ]
    .into();
    assert_eq!(abandoned, expected);
}
