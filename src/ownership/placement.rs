//! Where members go, as pure functions every replica computes alike: a member's shard by a
//! stable hash of its name ([`shard_of`]), and each shard's replica by rendezvous hashing with
//! loads bounded in members ([`assign`]).

use std::collections::{BTreeMap, BTreeSet};

use sha2::{Digest, Sha256};

fn hash64(parts: &[&str]) -> u64 {
    let digest = Sha256::digest(parts.join("\u{0}").as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// The shard of `member` among `count` (at least 1): stable for a member name, whatever
/// else is in the fleet.
pub fn shard_of(member: &str, count: u16) -> u16 {
    let count = u64::from(count.max(1));
    u16::try_from(hash64(&[member]) % count).unwrap_or(0)
}

/// The owner of every shard that has members (`weights[s]`: members in shard `s`), from who
/// holds what now (`holders[s]`): each live replica keeps what it holds, best-scored first,
/// while its load in members is below its share (ceil(members / replicas)); every other shard,
/// heaviest first, goes to the replica that scores it highest among those it fits (load and
/// shard within the share), or, fitting none, to the least loaded. A replica coming takes only
/// what the others are over their new share by; a replica going leaves only its own shards to
/// move. The answer is carried to the point where applying the rule again changes nothing, so
/// the next round (holders = this answer) moves nothing. Every replica computes the same answer
/// from the same leases and members.
pub fn assign<'a>(
    weights: &[usize],
    replicas: &BTreeSet<&'a str>,
    holders: &[Option<&str>],
) -> Vec<Option<&'a str>> {
    let mut owners = assign_once(weights, replicas, holders);
    for _ in 0..weights.len() {
        let again = assign_once(weights, replicas, &owners);
        if again == owners {
            break;
        }
        owners = again;
    }
    owners
}

fn assign_once<'a>(
    weights: &[usize],
    replicas: &BTreeSet<&'a str>,
    holders: &[Option<&str>],
) -> Vec<Option<&'a str>> {
    let mut owners: Vec<Option<&'a str>> = vec![None; weights.len()];
    if replicas.is_empty() {
        return owners;
    }
    let share = weights.iter().sum::<usize>().div_ceil(replicas.len());
    let score = |shard: usize, replica: &str| hash64(&[&format!("shard-{shard}"), replica]);
    let mut load: BTreeMap<&'a str, usize> = replicas.iter().map(|r| (*r, 0)).collect();
    for replica in replicas {
        let mut kept: Vec<usize> = (0..weights.len())
            .filter(|s| weights[*s] > 0 && holders.get(*s).copied().flatten() == Some(*replica))
            .collect();
        kept.sort_by_key(|s| std::cmp::Reverse((score(*s, replica), *s)));
        for shard in kept {
            let l = load.entry(replica).or_insert(0);
            if *l < share {
                *l += weights[shard];
                owners[shard] = Some(*replica);
            }
        }
    }
    let mut left: Vec<usize> = (0..weights.len())
        .filter(|s| weights[*s] > 0 && owners[*s].is_none())
        .collect();
    left.sort_by_key(|s| (std::cmp::Reverse(weights[*s]), *s));
    for shard in left {
        let load_of = |r: &&str| load.get(r).copied().unwrap_or(0);
        let fits = replicas
            .iter()
            .filter(|r| load_of(r) + weights[shard] <= share)
            .max_by_key(|r| (score(shard, r), **r));
        // Some replica is below its share while members are left to place.
        let owner = fits.or_else(|| {
            replicas
                .iter()
                .min_by_key(|r| (load_of(r), std::cmp::Reverse(score(shard, r))))
        });
        if let Some(owner) = owner {
            *load.entry(owner).or_insert(0) += weights[shard];
            owners[shard] = Some(*owner);
        }
    }
    owners
}

#[cfg(test)]
#[path = "placement/tests.rs"]
pub(super) mod tests;
