//! Unit tests of the shard assignment and of one round's plan.
use super::*;

fn weights(members: &[String], count: u16) -> Vec<usize> {
    let mut w = vec![0; usize::from(count)];
    for m in members {
        w[usize::from(shard_of(m, count))] += 1;
    }
    w
}

fn owners<'a>(
    w: &[usize],
    replicas: &[&'a str],
    holders: &[Option<&'a str>],
) -> Vec<Option<&'a str>> {
    assign(w, &replicas.iter().copied().collect(), holders)
}

fn load(w: &[usize], owners: &[Option<&str>], r: &str) -> usize {
    owners
        .iter()
        .zip(w)
        .filter(|(o, _)| **o == Some(r))
        .map(|(_, w)| *w)
        .sum()
}

#[test]
fn loads_are_bounded_and_few_members_move_when_replicas_come_and_go() {
    for (n, count) in [
        (6usize, 16u16),
        (6, 17),
        (20, 16),
        (300, 16),
        (1000, 16),
        (1000, 24),
        (1000, 64),
        (5000, 24),
    ] {
        let members: Vec<String> = (0..n).map(|i| format!("member-{i}")).collect();
        let w = weights(&members, count);
        let heaviest = *w.iter().max().expect("shards");
        for seed in 0..20u32 {
            let ids: Vec<String> = ["a", "b", "c"]
                .iter()
                .map(|p| {
                    format!(
                        "pod-{p}_{:08x}",
                        seed.wrapping_mul(2654435761) ^ u32::from(p.as_bytes()[0])
                    )
                })
                .collect();
            let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
            let none = vec![None; w.len()];
            let two = owners(&w, &ids[..2], &none);
            let three = owners(&w, &ids, &two);
            for (s, o) in three.iter().enumerate() {
                assert_eq!(o.is_some(), w[s] > 0, "shard {s}: owned iff it has members");
            }
            let cap = n.div_ceil(3) + heaviest - 1;
            let floor = n.div_ceil(3).saturating_sub(2 * heaviest);
            for r in &ids {
                let l = load(&w, &three, r);
                assert!(l <= cap, "{r} carries {l} of {n} (cap {cap})");
                assert!(l >= floor, "{r} carries {l} of {n} (floor {floor})");
            }
            let moved: Vec<usize> = (0..w.len()).filter(|s| two[*s] != three[*s]).collect();
            let moved_members: usize = moved.iter().map(|s| w[*s]).sum();
            // The newcomer's share, and at most a shard more that an old replica trimmed
            // to its cap and the other took.
            assert!(
                moved_members <= cap + heaviest,
                "{moved_members} of {n} moved when a third came (cap {cap})"
            );
            // The third goes: only its shards move.
            let back = owners(&w, &ids[..2], &three);
            for s in 0..w.len() {
                if three[s] != Some(ids[2]) {
                    assert_eq!(back[s], three[s], "shard {s} moved needlessly");
                }
            }
            assert_eq!(owners(&w, &ids, &three), three, "stable");
        }
    }
    assert!(
        assign(&[1], &BTreeSet::new(), &[None])
            .iter()
            .all(Option::is_none)
    );
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

#[test]
fn one_member_a_shard_balances_exactly() {
    // m1..m6 fall into six distinct shards of 17 (the sharding tests rely on it).
    let members: Vec<String> = (1..=6).map(|i| format!("m{i}")).collect();
    let w = weights(&members, 17);
    assert_eq!(w.iter().filter(|x| **x == 1).count(), 6);
    let three = owners(&w, &["a", "b", "c"], &vec![None; 17]);
    for r in ["a", "b", "c"] {
        assert_eq!(load(&w, &three, r), 2, "{three:?}");
    }
}

#[test]
fn shards_are_stable_and_lease_name_parts_valid() {
    assert_eq!(shard_of("member-1", 16), shard_of("member-1", 16));
    assert!((0..1000).all(|i| shard_of(&format!("m{i}"), 16) < 16));
    assert_eq!(shard_of("x", 0), 0);
    assert_eq!(shard_lease("fleetnet-hub", 3), "fleetnet-hub-shard-3");
    let a = name_part("Pod_A.example/1_deadbeef");
    assert!(
        a.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
        "{a}"
    );
    assert_ne!(name_part("a_b"), name_part("a-b"));
    assert!(name_part(&"x".repeat(200)).len() <= 49);
}

/// At fleet size the heaviest replica carries little more than its share: that replica's
/// budget is what bounds convergence.
#[test]
fn a_thousand_members_spread_evenly_from_nothing_and_after_a_replica_goes() {
    let members: Vec<String> = (0..1000).map(|i| format!("m{i:04}")).collect();
    let w = weights(&members, DEFAULT_SHARDS);
    let mut worst = 0.0f64;
    for seed in 0..50u32 {
        let ids: Vec<String> = (0..3).map(|r| format!("fleetnet-hub-{seed}-{r}")).collect();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        let three = owners(&w, &ids, &vec![None; w.len()]);
        let two = owners(&w, &ids[..2], &three);
        for (owned, replicas) in [(&three, &ids[..]), (&two, &ids[..2])] {
            let share = 1000usize.div_ceil(replicas.len());
            let heaviest = replicas.iter().map(|r| load(&w, owned, r)).max();
            let over = heaviest.expect("replicas") as f64 / share as f64;
            worst = worst.max(over);
        }
    }
    assert!(
        worst <= 1.06,
        "the heaviest replica carries {worst:.3}× its share"
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
