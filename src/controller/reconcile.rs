//! What every job's reconcile shares: how one is reported (span, log, observer) and how a
//! failed one is requeued (backoff per object, never sooner than a server asked, a fenced
//! write retried soon and not counted).

use std::future::Future;
use std::hash::Hash;
use std::time::{Duration, Instant};

use tracing::Instrument;

use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};

use super::failure::Failure;
use super::observer::{ReconcileObserver, Reconciled};
use super::runner::Action;
use super::streaks::Streaks;

/// How a job's reconcile ended well, as the kit reports it.
pub(crate) trait Outcome: Copy {
    /// Its label, as metrics and spans carry it.
    fn reconciled(self) -> Reconciled;
}

/// The root span of one reconcile (a trace of its own) of the job's object `$object` (its
/// field `$($key).+`, e.g. `fleet.serviceexport.name`) in `$namespace` of `$member`, with the
/// fields [`reported`] records: `outcome`, any of the job's `$extra` ones (`requeue`), and
/// `otel.status_code`. Written as `tracing`'s fields are: `%` for a value's `Display`.
macro_rules! reconcile_span {
    ($name:literal, %$member:expr, %$namespace:expr, $($key:ident).+ = %$object:expr $(, $extra:ident)* $(,)?) => {
        tracing::info_span!(
            parent: None,
            $name,
            fleet.member = %$member,
            k8s.namespace.name = %$namespace,
            $($key).+ = %$object,
            outcome = tracing::field::Empty,
            $($extra = tracing::field::Empty,)*
            otel.status_code = tracing::field::Empty,
        )
    };
}
pub(crate) use reconcile_span;

/// Runs one reconcile of `member` (`work`, of the object `key`) inside its root `span`, and
/// reports it ([`report`]); a success ends the object's streak of `failures`. The span's
/// `requeue` field, where it has one, tells what the reconcile asked for.
pub(crate) async fn reported<O: Outcome, E: Failure, K: Hash + Eq>(
    span: tracing::Span,
    observer: &dyn ReconcileObserver,
    member: &str,
    failures: &Streaks<K>,
    key: &K,
    work: impl Future<Output = Result<(O, Action), E>>,
) -> Result<Action, E> {
    let started = Instant::now();
    observer.reconcile_started(member);
    let result = work.instrument(span.clone()).await;
    let reconciled = match &result {
        Ok((outcome, action)) => {
            if span.has_field("requeue") {
                span.record("requeue", format!("{action:?}").as_str());
            }
            failures.clear(key);
            outcome.reconciled()
        }
        Err(e) => Reconciled::Failed(e.category()),
    };
    report(
        &span,
        observer,
        member,
        reconciled,
        result.as_ref().err(),
        started,
    );
    result.map(|(_, action)| action)
}

/// Ends the root span of one reconcile (of any job) and reports it: the outcome on the span, a
/// fenced refusal at debug level (the member is no longer ours: it moved, or the hold lapsed;
/// its engagement is stopping, and a line per queued write would only hide that), any other
/// error as the span's ERROR status and a warning; the duration is observed inside the span,
/// so its sample can carry the trace id as an exemplar.
fn report<E: std::error::Error + 'static>(
    span: &tracing::Span,
    observer: &dyn ReconcileObserver,
    member: &str,
    reconciled: Reconciled,
    error: Option<&E>,
    started: Instant,
) {
    span.record("outcome", reconciled.label().as_str());
    match error {
        None => {}
        Some(e) if crate::ownership::refused(e) => {
            span.in_scope(|| tracing::debug!(error = %e, "reconcile fenced"));
        }
        Some(e) => {
            span.record("otel.status_code", "ERROR");
            span.in_scope(|| tracing::warn!(error = %e, "reconcile failed"));
        }
    }
    span.in_scope(|| observer.reconciled(member, reconciled, started.elapsed()));
}

/// When the object `key` is reconciled again after its reconcile failed with `error`: after
/// the backoff of its `failures` in a row (1 s doubling to 5 min, jittered; reset by a
/// success), never sooner than a server asked; a write refused by the fence soon, uncounted.
pub(crate) fn failed<E: Failure, K: Hash + Eq>(error: &E, failures: &Streaks<K>, key: K) -> Action {
    if crate::ownership::refused(error) {
        // Not a failure of the object: this replica's hold lapsed for a moment (a renew came
        // late) or the member is moving away, which stops this engagement. Counting it would
        // leave a member that stays here backing off for minutes once its hold is back.
        return Action::requeue(FENCED_RETRY);
    }
    let failures = failures.bump(key);
    Action::requeue(requeue_delay(
        failures,
        rand::random::<f64>(),
        error.retry_after(),
    ))
}

/// The backoff, but never sooner than a server asked (`Retry-After`), capped at 5 minutes.
fn requeue_delay(failures: u32, jitter: f64, retry_after: Option<Duration>) -> Duration {
    let asked = retry_after.unwrap_or_default().min(MAX_BACKOFF);
    backoff(failures, jitter).max(asked)
}

/// How often one reconcile reads its objects again after a write found its view behind (a
/// 409: a stale view, a concurrent writer) before it fails and is requeued.
pub(crate) const REREADS: u32 = 2;

/// A delete of exactly the object with `uid`: a name since taken by another object is refused
/// with a 409.
pub(crate) fn only_uid(uid: Option<String>) -> DeleteParams {
    let resource_version = None;
    DeleteParams::default().preconditions(Preconditions {
        uid,
        resource_version,
    })
}

/// Merge-patches the object `name` with `body`: its status subresource when `status`, else
/// the object itself; the API's answer is the object as written.
pub(crate) async fn merge_patch<K>(
    api: &kube::Api<K>,
    name: &str,
    status: bool,
    body: &serde_json::Value,
) -> kube::Result<K>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let (params, patch) = (PatchParams::default(), Patch::Merge(body));
    match status {
        true => api.patch_status(name, &params, &patch).await,
        false => api.patch(name, &params, &patch).await,
    }
}

/// Deletes the object `name` with `params`: `true` when this delete took it, `false` when it
/// was gone already (a 404: what the delete was for).
pub(crate) async fn delete_unless_gone<K>(
    api: &kube::Api<K>,
    name: &str,
    params: &DeleteParams,
) -> kube::Result<bool>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, params).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

/// The longest backoff of an object.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// When a write refused by the fence is tried again: a lease's retry period.
const FENCED_RETRY: Duration = Duration::from_secs(2);

/// Delay after `failures` consecutive failures: 1 s doubling, capped at 5 minutes, jittered.
pub fn backoff(failures: u32, jitter: f64) -> Duration {
    crate::policy::backoff(
        Duration::from_secs(1),
        failures.saturating_sub(1),
        MAX_BACKOFF,
        jitter,
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::controller::{ApiFailure, Step};

    #[test]
    fn backoff_doubles_caps_and_jitters() {
        assert_eq!(backoff(1, 0.5), Duration::from_millis(750));
        assert_eq!(backoff(2, 0.5), Duration::from_millis(1500));
        assert_eq!(backoff(4, 0.5), Duration::from_secs(6));
        assert_eq!(backoff(30, 0.5), Duration::from_secs(225));
        assert_eq!(backoff(1, 0.0), Duration::from_millis(500));
        assert!(backoff(1, 0.999) < Duration::from_secs(1));
    }

    #[test]
    fn requeue_waits_at_least_what_the_server_asked() {
        assert_eq!(requeue_delay(1, 0.5, None), Duration::from_millis(750));
        assert_eq!(
            requeue_delay(1, 0.5, Some(Duration::from_secs(20))),
            Duration::from_secs(20)
        );
        // The backoff wins when it is longer already.
        assert_eq!(
            requeue_delay(6, 0.5, Some(Duration::from_secs(2))),
            Duration::from_secs(24)
        );
        // A bogus Retry-After cannot park an object for longer than the backoff's cap.
        assert_eq!(
            requeue_delay(1, 0.5, Some(Duration::from_secs(86_400))),
            Duration::from_secs(300)
        );
    }

    /// A refusal of the API server (`code`), asking for `retry_after_seconds` (0: nothing).
    pub(crate) fn refusal(code: u16, retry_after_seconds: u32) -> kube::Error {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "code": code,
            "reason": "TooManyRequests",
            "details": {"retryAfterSeconds": retry_after_seconds},
        }))
        .expect("a Status");
        kube::Error::Api(Box::new(status))
    }

    /// What a job's error policy must honour: the first failure of an object whose server asked
    /// for 20 s is tried again after 20 s, not after the 1 s backoff.
    pub(crate) fn honours_retry_after<E: Failure>(error: &E) {
        let failures = Streaks::default();
        assert_eq!(
            failed(error, &failures, "key"),
            Action::requeue(Duration::from_secs(20)),
            "{error}"
        );
    }

    /// A job's error for the API call of `step` on `ns/name` of member `m1`, refused with
    /// `code`.
    pub(crate) fn refused_at<S: Step, E: From<ApiFailure<S>>>(step: S, code: u16) -> E {
        E::from(ApiFailure::of("m1", "ns", "name", step)(refusal(code, 0)))
    }

    /// What every job's error of a failed API call (here of `step`, on the object `ns/name`,
    /// whose kind the error spells as `kind`) holds to: it names the member, the object and the
    /// step, which is also its metric label; and it is requeued no sooner than the server asked.
    pub(crate) fn api_error_of<S: Step, E: Failure + From<ApiFailure<S>>>(step: S, kind: &str) {
        let error: E = refused_at(step, 500);
        let text = error.to_string();
        assert!(text.contains("member m1"), "{text}");
        assert!(text.contains(&format!("{kind}ns/name")), "{text}");
        assert!(text.contains(step.as_str()), "{text}");
        assert_eq!(error.category(), step.as_str());
        honours_retry_after(&E::from(ApiFailure::of("m1", "ns", "name", step)(refusal(
            429, 20,
        ))));
    }

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Write {
        Create,
        Update,
    }

    impl Step for Write {
        fn as_str(self) -> &'static str {
            match self {
                Self::Create => "create",
                Self::Update => "update",
            }
        }
    }

    #[test]
    fn a_conflict_or_a_viewed_object_gone_is_a_stale_view() {
        let stale = |step, code| {
            let failed = ApiFailure::of("m1", "ns", "name", step)(refusal(code, 0));
            failed.stale_view(|step| step == Write::Update)
        };
        assert!(stale(Write::Create, 409));
        assert!(stale(Write::Update, 409));
        assert!(stale(Write::Update, 404));
        assert!(
            !stale(Write::Create, 404),
            "a missing namespace is not a stale view"
        );
        assert!(!stale(Write::Update, 500));
    }

    #[test]
    fn a_servers_retry_after_is_read_from_its_refusal() {
        use crate::controller::failure::retry_after;
        assert_eq!(
            retry_after(&refusal(429, 20)),
            Some(Duration::from_secs(20))
        );
        assert_eq!(retry_after(&refusal(429, 0)), None);
    }
}
