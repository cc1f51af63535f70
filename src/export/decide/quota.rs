//! Per-member quotas on what reaches the hub: how many exports a member may have there, and
//! how large one exported object may be. A member cannot fill the hub's etcd; past a quota its
//! ServiceExport says why and nothing is written.
//!
//! Which exports hold a place is decided from observed values only ([`Standing`]), so every
//! reconcile of every export of a member agrees: an export that is in the hub keeps its place
//! (a quota never withdraws anything), and the free places go to the waiting exports in order
//! of age (creationTimestamp, then namespace and name), so a newer export never takes the
//! place of an older one.

use jiff::Timestamp;

use crate::api::InternalServiceExport;

/// Default of `--max-exports-per-member`: ten times the largest member we know of.
pub const DEFAULT_MAX_EXPORTS: u32 = 1_000;
/// Default of `--max-export-bytes`: an ISE of a Service with 250 named ports is ~12 KiB
/// (600 ports: ~29 KiB), an EndpointSliceExport of a full slice (1,000 endpoints) ~28 KiB.
pub const DEFAULT_MAX_EXPORT_BYTES: u32 = 64 * 1024;

/// The quotas every member is held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quotas {
    /// Exports (InternalServiceExports) one member may have in the hub.
    pub max_exports: u32,
    /// Bytes of one exported object (ISE or EndpointSliceExport) as written (JSON).
    pub max_export_bytes: u32,
}

impl Default for Quotas {
    fn default() -> Self {
        Self {
            max_exports: DEFAULT_MAX_EXPORTS,
            max_export_bytes: DEFAULT_MAX_EXPORT_BYTES,
        }
    }
}

/// Where an export without an ISE of its own stands against its member's export quota, as
/// observed (read only for such an export).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Standing {
    /// The member's objects in the hub (its ISEs), this export's own name aside.
    pub exported: usize,
    /// The member's exports that wait for a place ahead of this one ([`ahead`]).
    pub ahead: usize,
}

impl Standing {
    /// Whether a place is left for this export under a quota of `max` exports.
    pub fn admitted(&self, max: u32) -> bool {
        let max = usize::try_from(max).unwrap_or(usize::MAX);
        self.exported.saturating_add(self.ahead) < max
    }
}

/// An export's place in the line: creationTimestamp (none: last), namespace, name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Age<'a> {
    pub created: Timestamp,
    pub namespace: &'a str,
    pub name: &'a str,
}

impl<'a> Age<'a> {
    /// `created` as the export carries it (`None`, which the API server never leaves, sorts
    /// last).
    pub fn new(created: Option<Timestamp>, namespace: &'a str, name: &'a str) -> Self {
        Self {
            created: created.unwrap_or(Timestamp::MAX),
            namespace,
            name,
        }
    }
}

/// How many of `waiting` (the member's exports that want a place and have none) are ahead of
/// `me`: strictly older, or as old and before it by namespace and name.
pub fn ahead<'a>(me: Age<'_>, waiting: impl IntoIterator<Item = Age<'a>>) -> usize {
    waiting.into_iter().filter(|other| *other < me).count()
}

/// The size of `ise` as it would be written (its JSON), or `usize::MAX` if it cannot be
/// serialised (then it is not written either).
pub fn written_bytes(ise: &InternalServiceExport) -> usize {
    serde_json::to_vec(ise).map_or(usize::MAX, |v| v.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: i64) -> Option<Timestamp> {
        Timestamp::from_second(second).ok()
    }

    #[test]
    fn a_place_is_left_below_the_quota_only() {
        let s = |exported, ahead| Standing { exported, ahead };
        assert!(s(0, 0).admitted(2));
        assert!(s(1, 0).admitted(2));
        assert!(s(0, 1).admitted(2));
        assert!(
            !s(1, 1).admitted(2),
            "exported and waiting ahead share the places"
        );
        assert!(!s(2, 0).admitted(2));
        assert!(!s(5, 0).admitted(2), "a lowered quota admits nothing new");
        assert!(!s(usize::MAX, usize::MAX).admitted(u32::MAX), "no overflow");
    }

    #[test]
    fn older_exports_are_ahead_and_ties_go_by_namespace_then_name() {
        let me = Age::new(at(100), "ns", "m");
        let waiting = [
            Age::new(at(50), "zz", "z"),
            Age::new(at(100), "ns", "a"),
            Age::new(at(100), "a", "z"),
            Age::new(at(100), "ns", "z"),
            Age::new(at(101), "a", "a"),
            Age::new(None, "a", "a"),
        ];
        assert_eq!(ahead(me, waiting), 3);
        assert_eq!(ahead(me, []), 0);
        // Without a creation time an export is last in line.
        assert_eq!(ahead(Age::new(None, "a", "a"), waiting), 5);
    }

    #[test]
    fn a_newer_export_never_takes_an_older_ones_place() {
        // Quota 2, nothing exported: of three waiting exports the two oldest get the places,
        // whatever order they are reconciled in, and a newcomer changes nothing for them.
        let exports = [
            Age::new(at(10), "ns", "a"),
            Age::new(at(20), "ns", "b"),
            Age::new(at(30), "ns", "c"),
        ];
        fn admitted<'a>(all: &[Age<'a>]) -> Vec<&'a str> {
            all.iter()
                .filter(|me| {
                    let others = all.iter().copied().filter(|o| o != *me);
                    Standing {
                        exported: 0,
                        ahead: ahead(**me, others),
                    }
                    .admitted(2)
                })
                .map(|me| me.name)
                .collect()
        }
        assert_eq!(admitted(&exports), ["a", "b"]);
        let newcomer = [
            exports[0],
            exports[1],
            exports[2],
            Age::new(at(40), "a", "a"),
        ];
        assert_eq!(admitted(&newcomer), ["a", "b"]);
    }

    #[test]
    fn an_objects_size_is_its_json() {
        let ise = InternalServiceExport::default();
        let json = serde_json::to_vec(&ise).expect("serialises");
        assert_eq!(written_bytes(&ise), json.len());
    }
}
