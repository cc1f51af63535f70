//! Credentials: the bearer token ARM requires, workload identity, managed identity, the az CLI.

use super::*;

#[tokio::test]
async fn arm_requires_a_valid_bearer_token() {
    let arm = FakeArm::start().await;
    arm.set_ips(SUB, RG, ips("20.8.0", 1));

    // The fake itself: no Authorization header → 401.
    let url = format!("{}{}?api-version=2024-03-01", arm.base(), path(RG));
    let raw = reqwest::get(&url).await.unwrap();
    assert_eq!(raw.status().as_u16(), 401);
    assert!(raw.text().await.unwrap().contains("AuthenticationFailed"));

    // The product with a token ARM does not accept → Failed with the 401, not retried.
    arm.reject_tokens(true);
    let fleet = fleet(config(&arm));
    let err = fleet
        .for_member(None)
        .unwrap()
        .find_by_address(RG, "20.8.0.0")
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, LookupError::Failed { .. }), "{err:?}");
    assert!(
        text.contains("401") && text.contains("InvalidAuthenticationToken"),
        "{text}"
    );
    assert_eq!(
        arm.requests(&path(RG)),
        2,
        "the raw probe and one product request"
    );
    // The rejected token is dropped: once tokens are good again, the next LIST recovers
    // instead of re-sending the cached bad token until it expires.
    arm.reject_tokens(false);
    arm.set_ips(SUB, "rg-next", ips("20.8.1", 1));
    let lookup = fleet.for_member(None).unwrap();
    assert!(found(&*lookup, "rg-next", "20.8.1.0").await);
    assert_eq!(arm.token_requests(), 2);

    // A wrong client secret: no token, no ARM request.
    let mut cfg = config(&arm);
    cfg.client_secret = Some("wrong".into());
    let err = AzureFleet::new(cfg)
        .unwrap()
        .for_member(None)
        .unwrap()
        .find_by_address("rg-other", "20.8.0.0")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("token"), "{err}");
    assert_eq!(arm.requests(&path("rg-other")), 0);
}

#[tokio::test]
async fn workload_identity_rereads_the_rotated_token_file() {
    let arm = FakeArm::start().await;
    arm.set_ips(SUB, "rg-a", ips("20.14.0", 1));
    arm.set_ips(SUB, "rg-b", ips("20.14.1", 1));
    // Shorter than the 5-minute refresh margin: every ARM request needs a fresh token.
    arm.set_token_lifetime(60);
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("azure-identity-token");
    std::fs::write(&token_file, "projected-sa-token-1\n").unwrap();
    let cfg = AzureConfig {
        credential: CredentialKind::WorkloadIdentity,
        client_secret: None,
        federated_token_file: Some(token_file.clone()),
        ..config(&arm)
    };
    let fleet = fleet(cfg);
    let lookup = fleet.for_member(None).unwrap();
    assert!(found(&*lookup, "rg-a", "20.14.0.0").await);
    std::fs::write(&token_file, "projected-sa-token-2\n").unwrap();
    assert!(found(&*lookup, "rg-b", "20.14.1.0").await);
    let assertions: Vec<String> = arm
        .token_forms()
        .iter()
        .map(|f| f["client_assertion"].clone())
        .collect();
    assert_eq!(assertions, ["projected-sa-token-1", "projected-sa-token-2"]);
}

#[tokio::test]
async fn managed_identity_asks_imds_for_the_user_assigned_identity() {
    let arm = FakeArm::start().await;
    arm.set_ips(SUB, RG, ips("20.15.0", 1));
    let cfg = AzureConfig {
        credential: CredentialKind::ManagedIdentity,
        tenant_id: None,
        client_id: Some("kubelet-identity-client-id".into()),
        client_secret: None,
        managed_identity_endpoint: arm.imds_endpoint(),
        ..config(&arm)
    };
    let fleet = fleet(cfg);
    let lookup = fleet.for_member(None).unwrap();
    assert!(found(&*lookup, RG, "20.15.0.0").await);
    assert!(found(&*lookup, RG, "20.15.0.0").await);
    let queries = arm.imds_queries();
    assert_eq!(queries.len(), 1, "the token is cached");
    assert_eq!(queries[0]["client_id"], "kubelet-identity-client-id");
    assert_eq!(queries[0]["resource"], arm.base());
}

/// Where the parent test put the fake `az` (and its log) for its child.
const AZ_DIR_ENV: &str = "FLEETNET_TEST_AZ_DIR";

/// The real `AzureCliCredential` runs `az` from PATH; here that is a script printing the JSON
/// of `az account get-access-token --output json` with a token the fake ARM accepts. PATH is
/// process-wide and the other tests of this binary run alongside, so the lookup runs in a child
/// process started with the script's directory first on its PATH.
#[cfg(unix)]
#[tokio::test]
async fn azure_cli_credential_runs_az_and_sends_its_token() {
    use std::os::unix::fs::PermissionsExt;

    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("az-invocations.log");
    let script = format!(
        r#"#!/bin/sh
printf '%s\n' "$*" >> '{log}'
cat <<'JSON'
{{"accessToken": "{CLI_TOKEN}", "expiresOn": "2099-01-01 00:00:00.000000", "expires_on": 4070908800, "subscription": "{SUB}", "tenant": "{TENANT}", "tokenType": "Bearer"}}
JSON
"#,
        log = log.display()
    );
    let az = dir.path().join("az");
    std::fs::write(&az, script).unwrap();
    std::fs::set_permissions(&az, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = std::iter::once(dir.path().to_owned())
        .chain(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        ))
        .collect::<Vec<_>>();
    let path = std::env::join_paths(path).unwrap();
    let out = crate::support::child_test(module_path!(), "azure_cli_credential_child")
        .env("PATH", path)
        .env(AZ_DIR_ENV, dir.path())
        .output()
        .await
        .expect("run the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The token `az` hands out in [`azure_cli_credential_runs_az_and_sends_its_token`].
const CLI_TOKEN: &str = "token-from-the-az-script";

/// The child of [`azure_cli_credential_runs_az_and_sends_its_token`]: the fake `az` is first
/// on its PATH.
#[cfg(unix)]
#[tokio::test]
#[ignore = "run as a subprocess by azure_cli_credential_runs_az_and_sends_its_token"]
async fn azure_cli_credential_child() {
    let Some(dir) = std::env::var_os(AZ_DIR_ENV).map(std::path::PathBuf::from) else {
        eprintln!(
            "azure_cli_credential_child is started by azure_cli_credential_runs_az_and_sends_its_token"
        );
        return;
    };
    let log = dir.join("az-invocations.log");
    let arm = FakeArm::start().await;
    arm.set_ips(SUB, "rg-a", ips("20.18.0", 1));
    arm.set_ips(SUB, "rg-b", ips("20.18.1", 1));
    arm.accept_token(CLI_TOKEN);
    let cfg = AzureConfig {
        credential: CredentialKind::AzureCli,
        tenant_id: None,
        client_id: None,
        client_secret: None,
        ..config(&arm)
    };
    let fleet = fleet(cfg);
    let lookup = fleet.for_member(None).unwrap();
    for (rg, ip) in [("rg-a", "20.18.0.0"), ("rg-b", "20.18.1.0")] {
        assert!(
            lookup.find_by_address(rg, ip).await.unwrap().is_some(),
            "{rg}"
        );
    }

    let seen = arm.lists();
    assert_eq!(seen.len(), 2);
    for list in &seen {
        assert_eq!(list.bearer.as_deref(), Some(CLI_TOKEN));
    }
    let calls = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        calls.lines().collect::<Vec<_>>(),
        [format!(
            "account get-access-token --output json --scope {}/.default",
            arm.base()
        )],
        "az ran once; its token was cached"
    );
    assert_eq!(arm.token_requests(), 0, "no HTTP token request");
}
