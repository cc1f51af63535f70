use super::*;
use base64::Engine;
use k8s_openapi::ByteString;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

const PEM: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

fn settings() -> Settings {
    Settings {
        profile_namespace: "fleet-system".into(),
        secret_namespace: "fleetnet-system".into(),
        namespace_prefix: "fleet-member-".into(),
        agents: AgentTypes::default(),
    }
}

fn cluster(name: &str, deleting: bool) -> DynamicObject {
    let mut mc = DynamicObject::new(name, &member_clusters());
    if deleting {
        mc.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
    }
    mc
}

fn profile(name: &str) -> DynamicObject {
    let ca = base64::engine::general_purpose::STANDARD.encode(PEM);
    DynamicObject::new(name, &cluster_profiles())
        .within("fleet-system")
        .data(
            serde_json::json!({"status": {"accessProviders": [{"name": "KubeFleet",
            "cluster": {"server": "https://m.example", "certificate-authority-data": ca}}]}}),
        )
}

fn token(name: &str, token: &str) -> Secret {
    let mut s = Secret::default();
    s.metadata.name = Some(name.into());
    s.metadata.namespace = Some("fleetnet-system".into());
    s.data = Some([("token".to_string(), ByteString(token.into()))].into());
    s
}

/// A view whose three kinds have listed what is given.
fn listed(clusters: &[DynamicObject], profiles: &[DynamicObject], tokens: &[Secret]) -> View {
    let s = settings();
    let mut v = View::default();
    for kind in 0..3 {
        let init = |v: &mut View| match kind {
            0 => v.clusters.apply(watcher::Event::Init, cluster_entry),
            1 => v
                .profiles
                .apply(watcher::Event::Init, |p| profile_of(p, "fleet-system")),
            _ => v.tokens.apply(watcher::Event::Init, token_of),
        };
        init(&mut v);
    }
    for c in clusters {
        let event = watcher::Event::InitApply(c.clone());
        v.clusters.apply(event, cluster_entry);
    }
    for p in profiles {
        let event = watcher::Event::InitApply(p.clone());
        v.profiles.apply(event, |p| profile_of(p, "fleet-system"));
    }
    for t in tokens {
        v.tokens
            .apply(watcher::Event::InitApply(t.clone()), token_of);
    }
    assert!(v.clusters.apply(watcher::Event::InitDone, cluster_entry));
    assert!(v.members().is_none(), "not before every kind listed");
    v.profiles
        .apply(watcher::Event::InitDone, |p| profile_of(p, "fleet-system"));
    v.tokens.apply(watcher::Event::InitDone, token_of);
    v.settle(&s);
    v
}

fn told(v: &View) -> Vec<(String, Result<String, String>)> {
    let members = v.members().expect("listed");
    members
        .into_iter()
        .map(|(n, m)| (n, m.kubeconfig))
        .collect()
}

#[test]
fn a_listed_member_awaits_its_pieces_and_is_served_once_they_are_there() {
    let s = settings();
    let mut v = listed(&[cluster("alpha", false)], &[], &[]);
    let members = told(&v);
    assert_eq!(members.len(), 1);
    assert!(members[0].1.as_ref().is_err_and(|e| {
        e.starts_with("awaiting credentials: no ClusterProfile fleet-system/alpha")
    }));
    assert!(
        v.profiles
            .apply(watcher::Event::Apply(profile("alpha")), |p| profile_of(
                p,
                "fleet-system"
            ))
    );
    assert!(
        v.tokens
            .apply(watcher::Event::Apply(token("alpha", "t")), token_of)
    );
    assert!(
        !v.tokens
            .apply(watcher::Event::Apply(token("alpha", "t")), token_of),
        "the same: no rescan"
    );
    v.settle(&s);
    assert!(told(&v)[0].1.is_ok());
}

#[test]
fn a_hub_without_the_profile_crd_shows_why_and_still_serves_the_others() {
    let s = settings();
    let mut v = View::default();
    let missing = watcher::Error::InitialListFailed(kube::Error::Api(
        kube::core::Status::failure("not found", "NotFound")
            .with_code(404)
            .boxed(),
    ));
    assert!(failed(&mut v, "ClusterProfiles", &s, &missing));
    assert!(
        !failed(&mut v, "ClusterProfiles", &s, &missing),
        "told once"
    );
    v.clusters.apply(watcher::Event::Init, cluster_entry);
    v.clusters.apply(
        watcher::Event::InitApply(cluster("alpha", false)),
        cluster_entry,
    );
    v.clusters.apply(watcher::Event::InitDone, cluster_entry);
    v.tokens.apply(watcher::Event::Init, token_of);
    v.tokens.apply(watcher::Event::InitDone, token_of);
    v.settle(&s);
    let e = told(&v)[0].1.clone().expect_err("awaiting");
    assert!(
        e.contains("the hub does not serve ClusterProfiles (its CRD is not installed)"),
        "{e}"
    );
}

#[test]
fn a_deleted_member_stays_as_served_until_its_leave_is_done() {
    let s = settings();
    let mut v = listed(
        &[cluster("alpha", false), cluster("beta", false)],
        &[profile("alpha")],
        &[token("alpha", "t")],
    );
    let served = told(&v)[0].1.clone().expect("alpha served");
    // Deleting: fleet deletes its profile and the token may go too; the member stays as it was.
    v.clusters
        .apply(watcher::Event::Apply(cluster("alpha", true)), cluster_entry);
    v.profiles
        .apply(watcher::Event::Delete(profile("alpha")), |p| {
            profile_of(p, "fleet-system")
        });
    v.tokens
        .apply(watcher::Event::Delete(token("alpha", "t")), token_of);
    // beta never had credentials: nothing to leave, gone at once.
    v.clusters.apply(
        watcher::Event::Delete(cluster("beta", false)),
        cluster_entry,
    );
    v.settle(&s);
    assert_eq!(told(&v), vec![("alpha".to_string(), Ok(served))]);
    assert!(v.left("alpha"));
    v.settle(&s);
    assert!(
        told(&v).is_empty(),
        "left; its MemberCluster (finalizers pending) not served again"
    );
    v.clusters.apply(
        watcher::Event::Delete(cluster("alpha", true)),
        cluster_entry,
    );
    v.settle(&s);
    assert!(v.left.is_empty());
    // Registered again: served again.
    v.clusters.apply(
        watcher::Event::Apply(cluster("alpha", false)),
        cluster_entry,
    );
    v.settle(&s);
    assert_eq!(told(&v).len(), 1);
}

#[test]
fn a_member_whose_leave_started_while_no_replica_ran_leaves_on_what_its_member_cluster_reports() {
    let ca = base64::engine::general_purpose::STANDARD.encode(PEM);
    let reporting = |server: &str| {
        let mut mc = cluster("alpha", true);
        mc.data = serde_json::json!({"status": {"properties": {
            credentials::ENTRYPOINT_PROPERTY: {"value": server},
            credentials::CA_PROPERTY: {"value": ca},
        }}});
        mc
    };
    // A cold start: alpha deleting, its profile already deleted by fleet, its token there.
    let v = listed(
        &[reporting("https://alpha.example")],
        &[],
        &[token("alpha", "t")],
    );
    let members = told(&v);
    assert_eq!(members.len(), 1);
    let kubeconfig = members[0].1.clone().expect("served to leave");
    assert!(
        kubeconfig.contains("server: \"https://alpha.example\""),
        "{kubeconfig}"
    );
    assert!(v.leaving.contains_key("alpha"));
    // Without a token there is nothing to leave with: gone at once, as before.
    let v = listed(&[reporting("https://alpha.example")], &[], &[]);
    assert!(told(&v).is_empty());
    // What a MemberCluster that is not being deleted reports is not read.
    assert_eq!(
        cluster_entry(&cluster("beta", false)),
        ClusterEntry {
            deleting: false,
            reported: None
        }
    );
    let refused = reported_connection(&cluster("gamma", true)).expect_err("no properties");
    assert!(
        matches!(&refused, credentials::Missing::Awaiting(m) if m.contains(credentials::ENTRYPOINT_PROPERTY)),
        "{refused:?}"
    );
}
