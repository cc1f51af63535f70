//! Unit tests of where members go: shards by hash, shards onto replicas.
use super::*;

pub(in crate::ownership) fn weights(members: &[String], count: u16) -> Vec<usize> {
    let mut w = vec![0; usize::from(count)];
    for m in members {
        w[usize::from(shard_of(m, count))] += 1;
    }
    w
}

pub(in crate::ownership) fn owners<'a>(
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
fn shards_are_stable() {
    assert_eq!(shard_of("member-1", 16), shard_of("member-1", 16));
    assert!((0..1000).all(|i| shard_of(&format!("m{i}"), 16) < 16));
    assert_eq!(shard_of("x", 0), 0);
}

/// At fleet size the heaviest replica carries little more than its share: that replica's
/// budget is what bounds convergence.
#[test]
fn a_thousand_members_spread_evenly_from_nothing_and_after_a_replica_goes() {
    let members: Vec<String> = (0..1000).map(|i| format!("m{i:04}")).collect();
    let w = weights(&members, crate::ownership::shard::DEFAULT_SHARDS);
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
