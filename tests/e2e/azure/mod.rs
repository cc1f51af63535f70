//! The shared Azure client against a fake ARM + token endpoint on 127.0.0.1. The product
//! path is the real azure_identity / azure_mgmt_network client pointed at the fake.

mod budget;
mod credentials;
mod failures;
mod lookups;
mod scope;

use crate::support::arm;

use std::sync::Arc;
use std::time::{Duration, Instant};

use arm::{FakeArm, FakeIp, Fault, TENANT};
use fleetnet_hub::azure::{AzureConfig, AzureError, AzureFleet, CredentialKind};
use fleetnet_hub::export::{LookupError, PublicIpLookup};

const SUB: &str = "00000000-0000-0000-0000-00000000000a";
const SUB2: &str = "00000000-0000-0000-0000-00000000000b";
const RG: &str = "MC_fleet_member_eastus";

fn config(arm: &FakeArm) -> AzureConfig {
    AzureConfig {
        default_subscription_id: Some(SUB.into()),
        ..arm::client_secret_config(arm)
    }
}

fn ips(prefix: &str, n: usize) -> Vec<FakeIp> {
    (0..n)
        .map(|i| FakeIp::new(&format!("pip-{i}"), &format!("{prefix}.{i}")))
        .collect()
}

fn fleet(config: AzureConfig) -> AzureFleet {
    AzureFleet::new(config).expect("valid config")
}

/// The lookup finds `ip` although one answer on its way takes 2 s: the 300 ms attempt
/// timeout abandoned it and a retry answered, well before the slow answer would have.
async fn found_before_the_slow_answer(lookup: &dyn PublicIpLookup, rg: &str, ip: &str) {
    let started = Instant::now();
    assert!(found(lookup, rg, ip).await);
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
}

/// Whether `lookup` finds `ip` in `rg`; a failed lookup fails the test.
async fn found(lookup: &dyn PublicIpLookup, rg: &str, ip: &str) -> bool {
    match lookup.find_by_address(rg, ip).await {
        Ok(found) => found.is_some(),
        Err(e) => panic!("lookup of {ip} in {rg}: {e}"),
    }
}

fn path(rg: &str) -> String {
    FakeArm::list_path(SUB, rg)
}
