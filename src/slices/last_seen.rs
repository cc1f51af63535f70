//! The `last-seen-generation` / `last-seen-timestamp` pair fleet-networking's member
//! EndpointSlice controller stamps on every slice it exports: when this generation of the slice
//! was first seen. It is the `exportedSince` of the slice's export, the start of the
//! export → import duration the import side reports, so it survives restarts on the slice
//! itself. Pure: no I/O.

use jiff::Timestamp;

use super::model::ExportView;
use super::model::SliceView;

/// The pair as it is to be written on the slice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastSeen {
    /// The slice's generation when it was seen.
    pub generation: i64,
    /// RFC 3339, whole seconds, UTC (Go's `time.RFC3339` of a UTC clock).
    pub timestamp: String,
}

/// Since when the slice's current generation is exported, and the pair to stamp if the slice
/// does not already carry it.
///
/// As the reference: the pair on the slice is kept while it names the current generation and a
/// time not after `now`; anything else (absent, unparsable, another generation, the future) is
/// replaced by `now`. One addition: a slice without a usable pair whose export already says
/// since when this generation is exported (written before the pair existed here) keeps that
/// time, so adopting it rewrites only the slice.
pub fn since(
    slice: &SliceView,
    existing: Option<&ExportView>,
    now: Timestamp,
) -> (Timestamp, Option<LastSeen>) {
    let generation = slice.metadata.generation.unwrap_or_default();
    let now = whole_seconds(now);
    if let Some(seen) = kept(slice, generation, now) {
        return (seen, None);
    }
    let since = existing
        .filter(|e| e.generation == generation)
        .and_then(|e| e.exported_since.as_ref())
        .map(|t| whole_seconds(t.0))
        .filter(|t| *t <= now)
        .unwrap_or(now);
    let stamp = LastSeen {
        generation,
        timestamp: since.to_string(),
    };
    (since, Some(stamp))
}

/// The slice's own pair, when it is usable.
fn kept(slice: &SliceView, generation: i64, now: Timestamp) -> Option<Timestamp> {
    let seen_generation: i64 = slice.last_seen_generation.as_deref()?.parse().ok()?;
    let seen: Timestamp = slice.last_seen_timestamp.as_deref()?.parse().ok()?;
    (seen_generation == generation && seen <= now).then_some(seen)
}

/// `t` without its fraction of a second: what RFC 3339 without fractions keeps of it.
fn whole_seconds(t: Timestamp) -> Timestamp {
    Timestamp::from_second(t.as_second()).unwrap_or(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    const NOW: &str = "2026-12-05T10:00:00.750Z";

    fn now() -> Timestamp {
        NOW.parse().expect("timestamp")
    }

    fn slice(generation: i64, pair: Option<(&str, &str)>) -> SliceView {
        let mut s = SliceView::default();
        s.metadata.generation = Some(generation);
        if let Some((g, t)) = pair {
            s.last_seen_generation = Some(g.into());
            s.last_seen_timestamp = Some(t.into());
        }
        s
    }

    #[test]
    fn a_pair_of_the_current_generation_is_kept() {
        let s = slice(3, Some(("3", "2026-12-05T09:00:00Z")));
        let (at, stamp) = since(&s, None, now());
        assert_eq!(at.to_string(), "2026-12-05T09:00:00Z");
        assert_eq!(stamp, None);
        // Any RFC 3339 offset reads as the same instant.
        let s = slice(3, Some(("3", "2026-12-05T11:00:00+02:00")));
        assert_eq!(since(&s, None, now()).1, None);
    }

    #[test]
    fn a_missing_stale_unparsable_or_future_pair_is_replaced_by_now_in_whole_seconds() {
        for (what, s) in [
            ("absent", slice(3, None)),
            (
                "other generation",
                slice(3, Some(("2", "2026-12-05T09:00:00Z"))),
            ),
            (
                "bad generation",
                slice(3, Some(("three", "2026-12-05T09:00:00Z"))),
            ),
            ("bad timestamp", slice(3, Some(("3", "yesterday")))),
            ("future", slice(3, Some(("3", "2026-12-05T10:00:01Z")))),
        ] {
            let (at, stamp) = since(&s, None, now());
            assert_eq!(at.to_string(), "2026-12-05T10:00:00Z", "{what}");
            assert_eq!(
                stamp,
                Some(LastSeen {
                    generation: 3,
                    timestamp: "2026-12-05T10:00:00Z".into()
                }),
                "{what}"
            );
        }
    }

    #[test]
    fn an_export_of_this_generation_lends_its_time_to_a_slice_without_a_pair() {
        let export = |generation, at: &str| ExportView {
            generation,
            exported_since: Some(Time(at.parse().expect("t"))),
            ..Default::default()
        };
        let s = slice(3, None);
        let (at, stamp) = since(&s, Some(&export(3, "2026-12-01T00:00:00Z")), now());
        assert_eq!(at.to_string(), "2026-12-01T00:00:00Z");
        assert_eq!(
            stamp.map(|p| p.timestamp).as_deref(),
            Some("2026-12-01T00:00:00Z")
        );
        // Another generation's, or a time in the future: now.
        for e in [
            export(2, "2026-12-01T00:00:00Z"),
            export(3, "2026-12-06T00:00:00Z"),
        ] {
            assert_eq!(
                since(&s, Some(&e), now()).0.to_string(),
                "2026-12-05T10:00:00Z"
            );
        }
    }
}
