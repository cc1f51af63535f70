//! Values read from flags and files, parsed and validated once: the one [`Config`] of the
//! process and its builder (`value`), durations and rates as clap value parsers (shared by
//! `fleetnet-hub` and `fleetnet-bench`). The `--member-config` file is the fleet's
//! ([`crate::fleet::MemberConfig`]).

use std::time::Duration;

use crate::client::Limits;

mod value;

pub use value::{
    Config, ConfigBuilder, ConfigError, DEFAULT_FLEET_SYSTEM_NAMESPACE,
    DEFAULT_HEALTH_PROBE_BIND_ADDRESS, DEFAULT_HUB_API_BURST, DEFAULT_HUB_API_QPS,
    DEFAULT_LEADER_ELECTION_ID, DEFAULT_MEMBER_SYNC_TIMEOUT, DEFAULT_METRICS_BIND_ADDRESS,
    DEFAULT_SHUTDOWN_TIMEOUT, LeaderElection, MetricsDetail, RESCAN_INTERVAL, instance,
    release_namespace,
};

/// `localhost` or a loopback address (`127.0.0.1`, `[::1]`): the only hosts secrets and spans may
/// reach over plain http.
pub fn is_loopback_host(host: &str) -> bool {
    let ip = host.trim_matches(['[', ']']).parse::<std::net::IpAddr>();
    host.eq_ignore_ascii_case("localhost") || ip.is_ok_and(|ip| ip.is_loopback())
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

/// A count of at least 1 (bursts, concurrency, quotas): for each of them 0 would mean
/// "never" (a burst of 0 lets no request out, a quota of 0 exports nothing) or "unbounded"
/// (a concurrency of 0), never what was meant.
pub fn positive_count<T>(s: &str) -> Result<T, String>
where
    T: std::str::FromStr + Default + PartialEq,
    T::Err: std::fmt::Display,
{
    let n: T = s.trim().parse().map_err(|e| format!("{s:?}: {e}"))?;
    if n == T::default() {
        return Err("must be at least 1 (0 would stop it altogether)".into());
    }
    Ok(n)
}

/// A duration above 0 ([`parse_duration`]): a timeout or TTL of 0 would expire at once.
pub fn positive_duration(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(format!("must be longer than 0, got {s:?}"));
    }
    Ok(d)
}

/// A size in bytes above 0: `1048576`, `512Ki`, `16Mi`, `1Gi` (0 would refuse every answer).
pub fn positive_bytes(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, scale) = match s.find(|c: char| !c.is_ascii_digit()) {
        None => (s, 1u64),
        Some(i) => match &s[i..] {
            "Ki" => (&s[..i], 1 << 10),
            "Mi" => (&s[..i], 1 << 20),
            "Gi" => (&s[..i], 1 << 30),
            _ => return Err(format!("invalid size {s:?} (bytes, or with Ki, Mi or Gi)")),
        },
    };
    let n: u64 = num.parse().map_err(|_| format!("invalid size {s:?}"))?;
    match n.checked_mul(scale) {
        Some(0) => Err("must be at least 1 byte".into()),
        Some(bytes) => Ok(bytes),
        None => Err(format!("size {s:?} too large")),
    }
}

/// The request budgets: the same flags for `fleetnet-hub run` and `fleetnet-bench`.
#[derive(clap::Args, Clone, Debug)]
pub struct Budgets {
    /// Sustained requests per second to each member's API server.
    // 40 / 60: what the reference's two agents per member (member-net- and
    // mcs-controller-manager, controller-runtime's 20 qps / 30 burst each) may send it. A
    // leave needs ~400 member requests (100 exports, 20 MultiClusterServices), so half that
    // could not leave in 15 s.
    #[arg(long, env = "FLEETNET_KUBE_API_QPS", default_value_t = 40.0, value_parser = positive_rate)]
    pub kube_api_qps: f64,
    /// Burst of requests to each member's API server.
    #[arg(long, env = "FLEETNET_KUBE_API_BURST", default_value_t = 60, value_parser = positive_count::<u32>)]
    pub kube_api_burst: u32,
    /// Sustained Events per second to each member: a bucket of their own, apart from exports'.
    #[arg(long, env = "FLEETNET_EVENT_QPS", default_value_t = 10.0, value_parser = positive_rate)]
    pub event_qps: f64,
    /// Burst of Events to each member.
    #[arg(long, env = "FLEETNET_EVENT_BURST", default_value_t = 25, value_parser = positive_count::<u32>)]
    pub event_burst: u32,
    /// Reconciles of one member running at once.
    #[arg(long, env = "FLEETNET_RECONCILE_CONCURRENCY", default_value_t = 16, value_parser = positive_count::<u16>)]
    pub reconcile_concurrency: u16,
    /// Sustained requests per second to the hub, shared by all members.
    #[arg(long, env = "FLEETNET_HUB_API_QPS", default_value_t = DEFAULT_HUB_API_QPS, value_parser = positive_rate)]
    pub hub_api_qps: f64,
    /// Burst of requests to the hub.
    #[arg(long, env = "FLEETNET_HUB_API_BURST", default_value_t = DEFAULT_HUB_API_BURST, value_parser = positive_count::<u32>)]
    pub hub_api_burst: u32,
    /// The most bytes one answer of a member's API server may carry, watches excepted (a LIST
    /// page, a GET, discovery): past it the request fails and the member shows failing.
    /// Bytes, or with a `Ki`, `Mi` or `Gi` suffix.
    #[arg(long, env = "FLEETNET_MEMBER_MAX_RESPONSE_BYTES", default_value_t = crate::client::DEFAULT_MAX_RESPONSE_BYTES, value_parser = positive_bytes)]
    pub member_max_response_bytes: u64,
    /// The most bytes one event of a member's watch may carry: past it the watch ends and the
    /// member shows failing. Bytes, or with a `Ki`, `Mi` or `Gi` suffix.
    #[arg(long, env = "FLEETNET_MEMBER_MAX_EVENT_BYTES", default_value_t = crate::client::DEFAULT_MAX_EVENT_BYTES, value_parser = positive_bytes)]
    pub member_max_event_bytes: u64,
}

impl Budgets {
    /// The hub client's limits (one budget for all members).
    pub fn hub(&self) -> Limits {
        Limits {
            qps: self.hub_api_qps,
            burst: self.hub_api_burst,
            ..Limits::default()
        }
    }

    /// Each member client's limits, its Events' and its reconcile concurrency.
    pub fn member(&self) -> Limits {
        Limits {
            qps: self.kube_api_qps,
            burst: self.kube_api_burst,
            event_qps: self.event_qps,
            event_burst: self.event_burst,
            reconcile_concurrency: self.reconcile_concurrency,
            max_response_bytes: self.member_max_response_bytes,
            max_event_bytes: self.member_max_event_bytes,
            ..Limits::default()
        }
    }

    /// The flags that reproduce these budgets (for a child process).
    pub fn to_args(&self) -> Vec<String> {
        [
            ("--kube-api-qps", self.kube_api_qps.to_string()),
            ("--kube-api-burst", self.kube_api_burst.to_string()),
            ("--event-qps", self.event_qps.to_string()),
            ("--event-burst", self.event_burst.to_string()),
            (
                "--reconcile-concurrency",
                self.reconcile_concurrency.to_string(),
            ),
            ("--hub-api-qps", self.hub_api_qps.to_string()),
            ("--hub-api-burst", self.hub_api_burst.to_string()),
            (
                "--member-max-response-bytes",
                self.member_max_response_bytes.to_string(),
            ),
            (
                "--member-max-event-bytes",
                self.member_max_event_bytes.to_string(),
            ),
        ]
        .into_iter()
        .flat_map(|(flag, value)| [flag.to_string(), value])
        .collect()
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
    fn loopback_hosts() {
        for host in [
            "localhost",
            "LOCALHOST",
            "127.0.0.1",
            "127.8.9.10",
            "[::1]",
            "::1",
        ] {
            assert!(is_loopback_host(host), "{host}");
        }
        for host in [
            "",
            "10.0.0.1",
            "[::2]",
            "localhost.example.com",
            "collector",
        ] {
            assert!(!is_loopback_host(host), "{host}");
        }
    }

    #[test]
    fn counts_and_durations_refuse_zero() {
        assert_eq!(positive_count::<u32>("3"), Ok(3));
        assert_eq!(positive_count::<u16>(" 16 "), Ok(16));
        for bad in ["0", "-1", "x", ""] {
            assert!(positive_count::<u32>(bad).is_err(), "{bad}");
        }
        let zero = positive_count::<u16>("0").expect_err("0 refused");
        assert!(zero.contains("at least 1"), "{zero}");
        assert_eq!(positive_duration("250ms"), Ok(Duration::from_millis(250)));
        for bad in ["0", "0s", "0ms", "0.0m", "soon"] {
            assert!(positive_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(positive_bytes("1048576"), Ok(1 << 20));
        assert_eq!(positive_bytes("16Mi"), Ok(16 << 20));
        assert_eq!(positive_bytes(" 512Ki "), Ok(512 << 10));
        assert_eq!(positive_bytes("1Gi"), Ok(1 << 30));
        for bad in ["0", "0Mi", "", "-1", "16MB", "1.5Mi", "99999999999999Gi"] {
            assert!(positive_bytes(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rates() {
        assert_eq!(positive_rate("2.5"), Ok(2.5));
        for bad in ["0", "-1", "inf", "NaN", "fast"] {
            assert!(positive_rate(bad).is_err(), "{bad}");
        }
    }
}
