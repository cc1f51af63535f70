//! Values read from flags and files, parsed and validated once: the `--member-config` file,
//! durations and rates as clap value parsers (shared by `fleetnet-hub` and `fleetnet-bench`).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

/// Per-member settings (`--member-config`).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MemberSettings {
    pub azure_subscription_id: Option<String>,
    pub azure_resource_group: Option<String>,
    pub trace_sampling_ratio: Option<f64>,
}

/// The `--member-config` file: `members: { <name>: MemberSettings }`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct MemberConfigFile {
    #[serde(default)]
    pub members: BTreeMap<String, MemberSettings>,
}

impl MemberConfigFile {
    /// Reads and parses the file, naming it in errors.
    pub fn load(path: &std::path::Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read member config {}: {e}", path.display()))?;
        serde_saphyr::from_str::<Option<Self>>(&text)
            .map(Option::unwrap_or_default)
            .map_err(|e| format!("invalid member config {}: {e}", path.display()))
    }
}

/// `90s`, `5m`, `1h`, `250ms` or plain seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map_or((s, "s"), |i| s.split_at(i));
    let n: f64 = num.parse().map_err(|_| format!("invalid duration {s:?}"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => {
            return Err(format!(
                "invalid duration unit in {s:?} (use ms, s, m or h)"
            ));
        }
    };
    Duration::try_from_secs_f64(secs).map_err(|e| format!("invalid duration {s:?}: {e}"))
}

/// A rate (requests per second): a finite number above 0.
pub fn positive_rate(s: &str) -> Result<f64, String> {
    let rate: f64 = s.trim().parse().map_err(|e| format!("{s:?}: {e}"))?;
    if rate.is_finite() && rate > 0.0 {
        Ok(rate)
    } else {
        Err(format!("must be a positive number, got {s}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("60s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("5d").is_err());
    }

    #[test]
    fn rates() {
        assert_eq!(positive_rate("2.5"), Ok(2.5));
        for bad in ["0", "-1", "inf", "NaN", "fast"] {
            assert!(positive_rate(bad).is_err(), "{bad}");
        }
    }
}
