//! One status view of the fleet on the hub: a `MemberStatus` object (`fleetnet.azure.com/v1alpha1`,
//! named `fleetnet-hub`) in each member's hub namespace, written by the member's owner
//! ([`publish`]) and read by `fleetnet-hub status` ([`cli`]) and `kubectl get memberstatuses -A`.
//!
//! An object of our own rather than a condition on a hub object: fleet's objects
//! (InternalMemberCluster, MemberCluster) belong to fleet's controllers, whose agents rewrite
//! their status wholesale, and a member registered by Secret or kubeconfig file may have none.
//!
//! Below `fleet`: it knows nothing of the fleet's state, only the [`Status`] it is given.

pub mod cli;
mod object;
mod publish;

pub use object::{
    GROUP, JobState, KIND, LEASE_OWNER, MANAGED_BY, MANAGED_BY_LABEL, MAX_ERROR, MEMBER_LABEL,
    NAME, NO_ELECTION_OWNER, PLURAL, Status, VERSION, clip, decide, resource,
};
pub use publish::{DEBOUNCE, publish, remove};

#[cfg(test)]
mod tests;
