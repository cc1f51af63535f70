//! The member-scoped ServiceExport reconciler: observe → decide (pure) → act.

pub mod public_ip;

pub use public_ip::{LookupError, PublicIp, PublicIpLookup};
pub mod decide;
