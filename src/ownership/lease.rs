//! One `coordination.k8s.io/v1` Lease as a value, with client-go's semantics: what this replica
//! saw of it and when (its own monotonic clock, never another host's `renewTime`), what to do
//! next ([`step`]), and how long a successful write lets it write ([`hold_after`]). Leader
//! election (one Lease) and sharding (one Lease per shard) both run on it; the I/O is
//! [`write`], one request per step.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use super::fence::Hold;

/// Lease timing, as client-go's defaults.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    pub namespace: String,
    /// The Lease's name (leader election), or the prefix of every lease name (sharding).
    pub name: String,
    /// This replica's identity (pod name + a random suffix).
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

/// The parts of a lease record whose change proves its holder alive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub holder: String,
    pub renew_time: Option<String>,
    pub acquire_time: Option<String>,
    pub transitions: i32,
    pub duration_secs: i32,
}

impl Record {
    pub fn of(spec: &LeaseSpec) -> Self {
        Self {
            holder: spec.holder_identity.clone().unwrap_or_default(),
            renew_time: spec.renew_time.as_ref().map(|t| t.0.to_string()),
            acquire_time: spec.acquire_time.as_ref().map(|t| t.0.to_string()),
            transitions: spec.lease_transitions.unwrap_or(0),
            duration_secs: spec.lease_duration_seconds.unwrap_or(0),
        }
    }
}

/// What this replica saw of a lease and since when (its own monotonic clock).
#[derive(Debug, Clone)]
pub struct Observed {
    pub record: Record,
    pub at: Instant,
}

impl Observed {
    /// `record` seen at `now`: the earlier observation stands while the record is unchanged,
    /// so expiry counts from the first time this replica saw it as it is.
    pub fn update(previous: Option<Observed>, record: Record, now: Instant) -> Observed {
        match previous {
            Some(o) if o.record == record => o,
            _ => Observed { record, at: now },
        }
    }

    /// Nobody has renewed it for a whole lease duration, as seen from here.
    pub fn expired(&self, now: Instant) -> bool {
        let duration = Duration::from_secs(u64::try_from(self.record.duration_secs).unwrap_or(0));
        now >= self.at + duration
    }

    /// When it expires as seen from here, if somebody holds it.
    pub fn expires_at(&self) -> Option<Instant> {
        let duration = Duration::from_secs(u64::try_from(self.record.duration_secs).unwrap_or(0));
        (!self.record.holder.is_empty()).then_some(self.at + duration)
    }

    /// Unchanged, as seen from here, for its own duration (at least `grace`) plus `grace`:
    /// nobody has renewed it for long after it ran out, so its writer is gone.
    pub fn abandoned(&self, now: Instant, grace: Duration) -> bool {
        let duration = Duration::from_secs(u64::try_from(self.record.duration_secs).unwrap_or(0));
        now >= self.at + duration.max(grace) + grace
    }

    /// Held by somebody who renewed it within its duration, as seen from here.
    pub fn live_holder(&self, now: Instant) -> Option<&str> {
        let holder = self.record.holder.as_str();
        (!holder.is_empty() && !self.expired(now)).then_some(holder)
    }
}

/// The next write of a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Take it: it does not exist, nobody holds it, or its holder let it expire.
    Acquire,
    /// Renew it: it is ours and we want it.
    Renew,
    /// Give it up: it is ours and we do not want it.
    Release,
    /// Leave it alone.
    Wait,
}

/// What `me` does next with a lease (`None`: it does not exist) it does or does not `want`.
pub fn step(observed: Option<&Observed>, me: &str, want: bool, now: Instant) -> Step {
    let Some(o) = observed else {
        return if want { Step::Acquire } else { Step::Wait };
    };
    let mine = o.record.holder == me;
    match (want, mine) {
        (true, true) => Step::Renew,
        (true, false) if o.live_holder(now).is_none() => Step::Acquire,
        (false, true) => Step::Release,
        _ => Step::Wait,
    }
}

/// The hold a write started at `started` gives once it succeeds: until the renew deadline,
/// which is shorter than the lease duration, so the fence closes by the clock before anyone
/// else may take the lease.
pub fn hold_after(started: Instant, cfg: &LeaseConfig) -> Hold {
    Hold::Until(started + cfg.renew_deadline)
}

/// How long a write may take: what is left of the current hold, or a whole renew deadline
/// for a lease not held.
pub fn attempt_budget(hold: Hold, now: Instant, cfg: &LeaseConfig) -> Duration {
    match hold {
        Hold::Until(t) if t > now => t - now,
        _ => cfg.renew_deadline,
    }
}

/// The spec `step` writes over `current`.
fn spec_for(
    step: Step,
    current: Option<&LeaseSpec>,
    cfg: &LeaseConfig,
    now: Timestamp,
) -> LeaseSpec {
    // Created: no transition yet (as client-go counts them).
    let taken_over = current.is_some();
    let current = current.cloned().unwrap_or_default();
    let mine = current.holder_identity.as_deref() == Some(cfg.identity.as_str());
    match step {
        Step::Release => LeaseSpec {
            holder_identity: None,
            lease_duration_seconds: Some(1),
            ..current
        },
        _ => LeaseSpec {
            holder_identity: Some(cfg.identity.clone()),
            lease_duration_seconds: Some(
                i32::try_from(cfg.lease_duration.as_secs()).unwrap_or(i32::MAX),
            ),
            acquire_time: match mine {
                true => current.acquire_time.clone().or(Some(MicroTime(now))),
                false => Some(MicroTime(now)),
            },
            renew_time: Some(MicroTime(now)),
            // Saturating: the count is outside data (anyone may write the Lease), and an
            // overflow must not panic the lease loop or wrap to a negative count.
            lease_transitions: Some(
                current
                    .lease_transitions
                    .unwrap_or(0)
                    .saturating_add(i32::from(taken_over && !mine && step == Step::Acquire)),
            ),
            ..current
        },
    }
}

/// The answer to a [`write`].
#[derive(Debug)]
pub enum Written {
    /// The server took it: the lease as it is now.
    Done(Box<Lease>),
    /// Somebody wrote it first (409): observe it again before the next step.
    Lost,
    /// Nothing to write.
    Nothing,
}

/// Performs `step` on lease `name`, whose last known object is `current` (`None`: it does not
/// exist): one create or one replace carrying `current`'s resourceVersion, so two replicas
/// can never both win. `labels` are set on a lease it creates.
pub async fn write(
    api: &Api<Lease>,
    cfg: &LeaseConfig,
    name: &str,
    labels: &BTreeMap<String, String>,
    step: Step,
    current: Option<&Lease>,
) -> Result<Written, kube::Error> {
    if step == Step::Wait || (step == Step::Release && current.is_none()) {
        return Ok(Written::Nothing);
    }
    let spec = spec_for(
        step,
        current.and_then(|l| l.spec.as_ref()),
        cfg,
        Timestamp::now(),
    );
    let result = match current {
        Some(lease) => {
            let mut lease = lease.clone();
            lease.spec = Some(spec);
            api.replace(name, &PostParams::default(), &lease).await
        }
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name.to_string()),
                    namespace: Some(cfg.namespace.clone()),
                    labels: (!labels.is_empty()).then(|| labels.clone()),
                    ..Default::default()
                },
                spec: Some(spec),
            };
            api.create(&PostParams::default(), &lease).await
        }
    };
    match result {
        Ok(lease) => Ok(Written::Done(Box::new(lease))),
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => Ok(Written::Lost),
        Err(e) => Err(e),
    }
}

/// A lease name part from any string: lower-case alphanumerics and '-', at most 40 characters,
/// plus a hash of the whole so two identities never collide.
pub fn name_part(s: &str) -> String {
    let clean: String = s
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(40)
        .collect();
    let digest = Sha256::digest(s.as_bytes());
    let short: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    format!("{}-{short}", clean.trim_matches('-'))
}

/// Deletes a lease nobody renews any more, on condition that it is still as it was listed
/// (a replica that came back and renewed it in between keeps it). Every replica sees the
/// same abandoned leases; whoever is second gets a 404 or a 409, which is the answer too.
pub async fn delete_abandoned(api: &Api<Lease>, name: String, resource_version: String) {
    let params = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            resource_version: Some(resource_version),
            uid: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(&name, &params).await {
        Ok(_) => {
            tracing::info!(lease = %name, "deleted an abandoned lease (its replica is gone, or its shard is beyond --shards)")
        }
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
        Err(e) => {
            tracing::warn!(lease = %name, error = %e, "deleting an abandoned lease failed; tried again next round")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observed(holder: &str, secs: i32, at: Instant) -> Observed {
        Observed {
            record: Record {
                holder: holder.into(),
                renew_time: Some("2026-12-03T00:00:00Z".into()),
                acquire_time: None,
                transitions: 0,
                duration_secs: secs,
            },
            at,
        }
    }

    fn cfg() -> LeaseConfig {
        LeaseConfig {
            namespace: "ns".into(),
            name: "l".into(),
            identity: "me".into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    #[test]
    fn expiry_is_judged_by_local_observation_time_only() {
        let t0 = Instant::now();
        let o = observed("other", 15, t0);
        let at = |s| t0 + Duration::from_secs(s);
        assert_eq!(
            step(Some(&o), "me", true, t0),
            Step::Wait,
            "fresh record of another"
        );
        assert_eq!(step(Some(&o), "me", true, at(14)), Step::Wait);
        assert_eq!(step(Some(&o), "me", true, at(15)), Step::Acquire);
        // The renewTime in the record plays no part: a skewed holder clock changes nothing.
        let mut skewed = o.clone();
        skewed.record.renew_time = Some("1999-01-01T00:00:00Z".into());
        assert_eq!(step(Some(&skewed), "me", true, at(1)), Step::Wait);
        // An unchanged record keeps its first observation; a changed one starts again.
        let same = Observed::update(Some(o.clone()), o.record.clone(), at(10));
        assert_eq!(same.at, t0);
        let renewed = Observed::update(Some(o), skewed.record.clone(), at(10));
        assert_eq!(renewed.at, at(10));
        assert_eq!(step(Some(&renewed), "me", true, at(20)), Step::Wait);
        assert_eq!(step(Some(&renewed), "me", true, at(25)), Step::Acquire);
    }

    #[test]
    fn every_step_of_the_state_machine() {
        let t0 = Instant::now();
        assert_eq!(
            step(None, "me", true, t0),
            Step::Acquire,
            "absent: create it"
        );
        assert_eq!(step(None, "me", false, t0), Step::Wait);
        let mine = observed("me", 15, t0);
        assert_eq!(step(Some(&mine), "me", true, t0), Step::Renew);
        assert_eq!(step(Some(&mine), "me", false, t0), Step::Release);
        let released = observed("", 1, t0);
        assert_eq!(step(Some(&released), "me", true, t0), Step::Acquire);
        assert_eq!(step(Some(&released), "me", false, t0), Step::Wait);
        let other = observed("other", 15, t0);
        assert_eq!(step(Some(&other), "me", false, t0), Step::Wait);
        assert_eq!(other.live_holder(t0), Some("other"));
        assert_eq!(other.live_holder(t0 + Duration::from_secs(15)), None);
    }

    #[test]
    fn a_hold_ends_at_the_renew_deadline_and_bounds_the_next_attempt() {
        let c = cfg();
        let t0 = Instant::now();
        let hold = hold_after(t0, &c);
        assert_eq!(hold, Hold::Until(t0 + Duration::from_secs(10)));
        assert!(c.renew_deadline < c.lease_duration);
        assert_eq!(
            attempt_budget(hold, t0 + Duration::from_secs(7), &c),
            Duration::from_secs(3)
        );
        assert_eq!(attempt_budget(Hold::Never, t0, &c), c.renew_deadline);
        assert_eq!(
            attempt_budget(hold, t0 + Duration::from_secs(11), &c),
            c.renew_deadline
        );
    }

    #[test]
    fn specs_count_transitions_and_keep_the_acquire_time_of_a_renewal() {
        let c = cfg();
        let now = Timestamp::now();
        let first = spec_for(Step::Acquire, None, &c, now);
        assert_eq!(first.holder_identity.as_deref(), Some("me"));
        assert_eq!(first.lease_transitions, Some(0), "created, not taken over");
        assert_eq!(first.lease_duration_seconds, Some(15));
        let earlier = Timestamp::from_second(1_000).expect("ts");
        let held = LeaseSpec {
            acquire_time: Some(MicroTime(earlier)),
            ..first.clone()
        };
        let renewed = spec_for(Step::Renew, Some(&held), &c, now);
        assert_eq!(renewed.acquire_time, Some(MicroTime(earlier)));
        assert_eq!(
            renewed.lease_transitions,
            Some(0),
            "a renewal is no transition"
        );
        let taken = LeaseSpec {
            holder_identity: Some("other".into()),
            ..held.clone()
        };
        let acquired = spec_for(Step::Acquire, Some(&taken), &c, now);
        assert_eq!(acquired.lease_transitions, Some(1));
        assert_eq!(acquired.acquire_time, Some(MicroTime(now)));
        let released = spec_for(Step::Release, Some(&held), &c, now);
        assert_eq!(released.holder_identity, None);
        assert_eq!(released.lease_duration_seconds, Some(1));
    }

    #[test]
    fn a_transition_count_at_its_maximum_saturates() {
        let c = cfg();
        let now = Timestamp::now();
        let taken = LeaseSpec {
            holder_identity: Some("other".into()),
            lease_transitions: Some(i32::MAX),
            ..spec_for(Step::Acquire, None, &c, now)
        };
        let acquired = spec_for(Step::Acquire, Some(&taken), &c, now);
        assert_eq!(acquired.holder_identity.as_deref(), Some("me"));
        assert_eq!(
            acquired.lease_transitions,
            Some(i32::MAX),
            "no wrap, no panic"
        );
        let one_less = LeaseSpec {
            lease_transitions: Some(i32::MAX - 1),
            ..taken
        };
        let acquired = spec_for(Step::Acquire, Some(&one_less), &c, now);
        assert_eq!(acquired.lease_transitions, Some(i32::MAX));
    }

    #[test]
    fn lease_name_parts_are_valid_and_distinct() {
        let a = name_part("Pod_A.example/1_deadbeef");
        assert!(
            a.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
            "{a}"
        );
        assert_ne!(name_part("a_b"), name_part("a-b"));
        assert!(name_part(&"x".repeat(200)).len() <= 49);
    }
}
