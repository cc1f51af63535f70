//! The controller kit every job plugs into: the runner and its pace, the views and their
//! health, a watch shared by several jobs, own-write memory, failure streaks, Events, the
//! observer, and the behaviour every reconcile shares (how it is reported, how a failure is
//! requeued). A job implements [`Job`] and is listed in the registry (`crate::jobs`); the kit
//! knows no job by name.

pub(crate) mod events;
mod failure;
pub mod feed;
pub mod hub_tap;
mod job;
mod observer;
pub(crate) mod own_writes;
pub(crate) mod pace;
pub(crate) mod projection;
pub(crate) mod queue;
mod reconcile;
pub(crate) mod runner;
pub(crate) mod streaks;
pub mod tap;
pub mod views;
pub mod writers;

pub use failure::{ApiFailure, Step};
pub(crate) use failure::{Failure, api_failures_only};
pub use job::{Job, MemberInputs, Running};
pub use observer::{NoObserver, ReconcileObserver, Reconciled, tell_other_writer};
pub use reconcile::backoff;
pub(crate) use reconcile::{
    MAX_BACKOFF, Outcome, REREADS, delete_unless_gone, failed, merge_patch, only_uid,
    reconcile_span, reported,
};
pub(crate) use runner::leadership_gained;
pub use views::Synced;

#[cfg(test)]
pub(crate) use reconcile::tests as reconcile_tests;
