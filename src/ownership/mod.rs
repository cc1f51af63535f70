//! Who may write: the lease state machine (`lease`), leader election (`leader`) and member
//! shards (`shard`) on it, and THE write [`Fence`] every request asks at send time.

pub mod fence;
pub mod leader;
pub mod lease;
pub mod shard;

pub use fence::{Fence, Hold, refused};
