//! What every job's reconcile error shares: the failed API call it carries (the member, the
//! object, the job's step, kube's error), its label, and the wait a server asked for.

use std::fmt;
use std::time::Duration;

/// A step of a job's reconcile: what an API call was for; also the stable `error` metric label.
pub trait Step: Copy + fmt::Debug + Send + Sync + 'static {
    /// Stable snake_case name.
    fn as_str(self) -> &'static str;
}

/// A failed API call of a reconcile of `namespace/name` of `member`, at the job's `step`.
#[derive(Debug)]
pub struct ApiFailure<S> {
    pub member: String,
    pub namespace: String,
    pub name: String,
    pub step: S,
    pub source: Box<kube::Error>,
}

impl<S: Step> ApiFailure<S> {
    /// Maps a failed API call of `step` on `namespace/name` of `member`.
    pub fn of(
        member: &str,
        namespace: &str,
        name: &str,
        step: S,
    ) -> impl FnOnce(kube::Error) -> Self + use<S> {
        let (member, namespace, name) =
            (member.to_string(), namespace.to_string(), name.to_string());
        move |source| Self {
            member,
            namespace,
            name,
            step,
            source: Box::new(source),
        }
    }

    /// The HTTP status the API server refused the call with, if it refused it.
    pub fn refused_with(&self) -> Option<u16> {
        match self.source.as_ref() {
            kube::Error::Api(s) => Some(s.code),
            _ => None,
        }
    }

    /// Whether the refusal shows the reconcile's views behind the API: a 409 (a name taken, an
    /// object changed since it was read), or a 404 of a step that `writes_viewed` (a write to
    /// an object the views still showed; a create into a missing namespace is no such thing).
    pub fn stale_view(&self, writes_viewed: impl FnOnce(S) -> bool) -> bool {
        match self.refused_with() {
            Some(409) => true,
            Some(404) => writes_viewed(self.step),
            _ => false,
        }
    }

    /// The wait the API server asked for in its refusal.
    pub fn retry_after(&self) -> Option<Duration> {
        retry_after(&self.source)
    }
}

/// The step and kube's error; the job's error names the member and the object.
impl<S: Step> fmt::Display for ApiFailure<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.step.as_str(), self.source)
    }
}

impl<S: Step> std::error::Error for ApiFailure<S> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.source.as_ref())
    }
}

/// A job's reconcile error, as the kit reports and requeues it.
pub(crate) trait Failure: std::error::Error + 'static {
    /// What failed, as the job names it: the step of a failed API call ([`ApiFailure::step`]),
    /// or a failure of the job's own (`pending`, `member_unreachable`, …).
    fn what_failed(&self) -> &'static str;

    /// Stable label for metrics (`error:<category>`): `not_leader` for a write the fence
    /// refused (the lease was lost meanwhile; whichever step it was), else what failed.
    fn category(&self) -> &'static str
    where
        Self: Sized,
    {
        if crate::ownership::refused(self) {
            "not_leader"
        } else {
            self.what_failed()
        }
    }

    /// The wait a throttling server asked for, which the requeue must not undercut: by default
    /// the one in the first Kubernetes API error of the error's source chain.
    fn retry_after(&self) -> Option<Duration>
    where
        Self: Sized,
    {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(self);
        while let Some(error) = source {
            if let Some(kube) = error.downcast_ref::<kube::Error>() {
                return retry_after(kube);
            }
            source = error.source();
        }
        None
    }
}

/// Makes a job's error enum that is only ever a failed API call (its one variant
/// `Kube(ApiFailure<Step>)`) a [`Failure`]: what failed is the step.
macro_rules! api_failures_only {
    ($error:ty) => {
        impl $crate::controller::Failure for $error {
            fn what_failed(&self) -> &'static str {
                let Self::Kube(failed) = self;
                $crate::controller::Step::as_str(failed.step)
            }
        }
    };
}
pub(crate) use api_failures_only;

/// The wait a Kubernetes API server asked for in its refusal (`Status.details.retryAfterSeconds`,
/// sent with a 429 and with some 5xx), if any.
pub(super) fn retry_after(error: &kube::Error) -> Option<Duration> {
    match error {
        kube::Error::Api(status) => status
            .details
            .as_ref()
            .map(|d| d.retry_after_seconds)
            .filter(|s| *s > 0)
            .map(|s| Duration::from_secs(s.into())),
        _ => None,
    }
}
