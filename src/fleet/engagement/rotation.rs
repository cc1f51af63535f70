//! A running member's new kubeconfig taken in place when only its credentials changed (issue
//! #42: a rotation drops no watch and lists nothing again), vetted exactly as at engagement; a
//! refused one leaves the member on the credentials it has, the refusal shown.

use std::sync::Arc;

use super::super::vet;
use super::{Engagement, Shared, registry};
use crate::client::credentials::{self, Change, Credentials};

/// The credential cell of a member engaged from `kubeconfig` (from `origin`): `None` when it
/// authenticates otherwise (an exec plugin, basic auth) or does not pass vetting (the member's
/// task refuses it and shows why).
pub(super) fn cell(shared: &Shared, kubeconfig: &str, origin: &str) -> Option<Arc<Credentials>> {
    let vetted = vet::vet(kubeconfig, origin, shared.config.trust).ok()?;
    Credentials::of(&vetted.kubeconfig).ok().flatten()
}

/// Whether `source`, the new content of running member `name`'s kubeconfig, was taken without
/// engaging the member again: its credentials rotated (the next request and TLS handshake use
/// them), nothing the connection uses changed, or it was refused (the member keeps what it
/// has). `false`: engage it again.
pub(super) fn taken_in_place(
    shared: &Shared,
    name: &str,
    engagement: &mut Engagement,
    source: &registry::MemberSource,
) -> bool {
    let (Some(cell), Some(old), Ok(new), Some(_)) = (
        engagement.credentials.as_ref(),
        engagement.kubeconfig.as_ref(),
        source.kubeconfig.as_ref(),
        engagement.task.as_ref(),
    ) else {
        return false;
    };
    let origin = source.place.to_string();
    let trust = shared.config.trust;
    let outcome = match (vet::vet(old, &origin, trust), vet::vet(new, &origin, trust)) {
        (Ok(old), Ok(new)) => match credentials::change(&old.kubeconfig, &new.kubeconfig) {
            Change::Reconnect => return false,
            Change::Same => Ok(false),
            Change::Rotation => cell
                .replace(&new.kubeconfig)
                .map(|()| true)
                .map_err(|e| format!("kubeconfig refused ({origin}): {e}")),
        },
        (Err(_), _) => return false,
        (Ok(_), Err(refusal)) => Err(refusal),
    };
    engagement.hash = source.hash.clone();
    match outcome {
        Ok(rotated) => {
            if rotated {
                tracing::info!(member = %name, "member credentials rotated in place: its watches go on");
            }
            engagement.kubeconfig = Some(new.as_str().into());
            shared.state.rotated(name, Ok(&source.hash[..12]));
        }
        Err(refusal) => {
            tracing::error!(member = %name, error = %refusal, "new member kubeconfig refused; the member keeps the credentials it has");
            shared.state.rotated(name, Err(refusal));
        }
    }
    true
}
