//! Every setting that has both an environment variable and a flag: the variable alone sets
//! it, the flag alone sets it, and with both the flag wins. The settings are found from clap's
//! own description of every subcommand, so a new `env = …` flag without a row here fails.
//!
//! clap reads the variables from the process's environment, which tests running in parallel
//! share: each case runs in a child process (this test binary, this test) with exactly its
//! variables set.

use std::collections::BTreeMap;

use clap::{ArgAction, CommandFactory, parser::ValueSource};

use super::Cli;

/// `(variable, one value, another value)`: valid for the flag, both different from its default.
/// Booleans (`--flag` alone) take `true`/`false` from the variable.
const VALUES: &[(&str, &str, &str)] = &[
    (
        "FLEETNET_KUBECONFIG_DIR",
        "/env/kubeconfigs",
        "/flag/kubeconfigs",
    ),
    (
        "FLEETNET_FLEET_SYSTEM_NAMESPACE",
        "env-system",
        "flag-system",
    ),
    ("FLEETNET_HUB_KUBECONFIG", "/env/hub", "/flag/hub"),
    ("FLEETNET_HUB_NAMESPACE_PREFIX", "env-", "flag-"),
    ("FLEETNET_LEADER_ELECT", "true", "true"),
    ("FLEETNET_SHARD_MEMBERS", "true", "true"),
    ("FLEETNET_LEADER_ELECTION_NAMESPACE", "env-ns", "flag-ns"),
    ("FLEETNET_LEADER_ELECTION_ID", "env-id", "flag-id"),
    ("FLEETNET_MEMBER_SECRETS", "false", "true"),
    (
        "FLEETNET_MEMBER_SECRETS_NAMESPACE",
        "env-secrets",
        "flag-secrets",
    ),
    ("FLEETNET_MEMBER_INVENTORY", "true", "true"),
    (
        "FLEETNET_INVENTORY_PROFILE_NAMESPACE",
        "env-profiles",
        "flag-profiles",
    ),
    ("FLEETNET_CLEANUP_ON_REMOVE", "true", "true"),
    ("FLEETNET_SHARDS", "3", "5"),
    (
        "FLEETNET_METRICS_BIND_ADDRESS",
        "127.0.0.1:1001",
        "127.0.0.1:1002",
    ),
    (
        "FLEETNET_HEALTH_PROBE_BIND_ADDRESS",
        "127.0.0.1:1003",
        "127.0.0.1:1004",
    ),
    ("FLEETNET_MEMBER_SYNC_TIMEOUT", "7s", "9s"),
    ("FLEETNET_METRICS_DETAIL", "member", "fleet"),
    ("FLEETNET_SHUTDOWN_TIMEOUT", "7s", "9s"),
    ("FLEETNET_CONTROLLERS", "serviceexport", "endpointslice"),
    (
        "FLEETNET_AGENT_TYPES",
        "MultiClusterServiceAgent",
        "ServiceExportImportAgent",
    ),
    ("FLEETNET_ENABLE_TRAFFIC_MANAGER", "true", "true"),
    (
        "FLEETNET_MEMBER_CONFIG",
        "/env/members.yaml",
        "/flag/members.yaml",
    ),
    ("FLEETNET_TRACE_SAMPLING_RATIO", "0.25", "0.5"),
    ("FLEETNET_LOG_FORMAT", "json", "text"),
    ("FLEETNET_MEMBERS_ALLOW_REMOTE", "true", "true"),
    ("FLEETNET_MAX_EXPORTS_PER_MEMBER", "2", "3"),
    ("FLEETNET_MAX_EXPORT_BYTES", "4096", "8192"),
    ("FLEETNET_KUBE_API_QPS", "3", "4"),
    ("FLEETNET_KUBE_API_BURST", "3", "4"),
    ("FLEETNET_EVENT_QPS", "3", "4"),
    ("FLEETNET_EVENT_BURST", "3", "4"),
    ("FLEETNET_RECONCILE_CONCURRENCY", "3", "4"),
    ("FLEETNET_HUB_API_QPS", "3", "4"),
    ("FLEETNET_HUB_API_BURST", "3", "4"),
    ("FLEETNET_MEMBER_MAX_RESPONSE_BYTES", "1Mi", "2Mi"),
    ("FLEETNET_MEMBER_MAX_EVENT_BYTES", "1Mi", "2Mi"),
    ("FLEETNET_ALLOW_MEMBER_EXEC_PLUGINS", "true", "true"),
    ("FLEETNET_ALLOW_INSECURE_MEMBER_TLS", "true", "true"),
    ("FLEETNET_ALLOW_PLAIN_HTTP_LOOPBACK_MEMBERS", "true", "true"),
    ("FLEETNET_ALLOW_MEMBER_PROXY", "true", "true"),
    (
        "FLEETNET_AZURE_ARM_ENDPOINT",
        "https://env.arm/",
        "https://flag.arm/",
    ),
    (
        "FLEETNET_AZURE_AUTHORITY_HOST",
        "https://env.login/",
        "https://flag.login/",
    ),
    (
        "FLEETNET_AZURE_CREDENTIAL",
        "managed-identity",
        "client-secret",
    ),
    ("AZURE_TENANT_ID", "env-tenant", "flag-tenant"),
    ("AZURE_CLIENT_ID", "env-client", "flag-client"),
    ("FLEETNET_AZURE_SUBSCRIPTION_ID", "env-sub", "flag-sub"),
    ("FLEETNET_AZURE_RESOURCE_GROUP", "env-rg", "flag-rg"),
    ("FLEETNET_AZURE_ARM_QPS", "3", "4"),
    ("FLEETNET_AZURE_ARM_BURST", "3", "4"),
    ("FLEETNET_PUBLIC_IP_CACHE_TTL", "7s", "9s"),
    ("FLEETNET_AZURE_MAX_CACHED_GROUPS", "3", "4"),
    ("FLEETNET_AZURE_MAX_PUBLIC_IPS_PER_GROUP", "3", "4"),
];

/// Set in a child: which case it runs (`env`, `flag` or `both`).
const CASE: &str = "FLEETNET_ENV_FLAGS_CASE";
/// The line of a child's stdout that carries its observations.
const MARK: &str = "ENV-FLAGS-OBSERVED ";

/// One setting: an argument of a subcommand with an environment variable.
struct Setting {
    subcommand: String,
    id: String,
    long: String,
    env: String,
    /// A `--flag` without a value (`ArgAction::SetTrue`).
    switch: bool,
}

fn settings() -> Vec<Setting> {
    let mut found = vec![];
    for sub in Cli::command().get_subcommands() {
        for arg in sub.get_arguments() {
            let (Some(env), Some(long)) = (arg.get_env(), arg.get_long()) else {
                continue;
            };
            found.push(Setting {
                subcommand: sub.get_name().to_string(),
                id: arg.get_id().to_string(),
                long: long.to_string(),
                env: env.to_string_lossy().into_owned(),
                switch: matches!(arg.get_action(), ArgAction::SetTrue),
            });
        }
    }
    found
}

fn values(env: &str) -> (&'static str, &'static str) {
    VALUES
        .iter()
        .find(|(name, ..)| *name == env)
        .map(|(_, a, b)| (*a, *b))
        .unwrap_or_else(|| panic!("{env}: add a row to VALUES"))
}

/// The arguments a subcommand needs whatever its settings.
fn required(subcommand: &str) -> &'static [&'static str] {
    match subcommand {
        "register" => &["m", "--kubeconfig", "/k"],
        "unregister" => &["m"],
        _ => &[],
    }
}

/// In a child: every subcommand parsed (with every flag when the case says so), each
/// setting's value and where it came from, as `subcommand/id → value source`.
fn observe(with_flags: bool) -> BTreeMap<String, String> {
    let all = settings();
    let mut seen = BTreeMap::new();
    let subcommands: std::collections::BTreeSet<&str> =
        all.iter().map(|s| s.subcommand.as_str()).collect();
    for sub in subcommands {
        let mut args = vec!["fleetnet-hub".to_string(), sub.to_string()];
        args.extend(required(sub).iter().map(|a| a.to_string()));
        let mine: Vec<&Setting> = all.iter().filter(|s| s.subcommand == sub).collect();
        if with_flags {
            for s in &mine {
                args.push(format!("--{}", s.long));
                if !s.switch {
                    args.push(values(&s.env).1.to_string());
                }
            }
        }
        let matches = Cli::command()
            .try_get_matches_from(&args)
            .unwrap_or_else(|e| panic!("{args:?}: {e}"));
        let Some(m) = matches.subcommand_matches(sub) else {
            panic!("{sub} parsed")
        };
        for s in mine {
            let value = match s.switch {
                true => m.get_flag(&s.id).to_string(),
                false => m
                    .get_raw(&s.id)
                    .map(|v| v.map(|v| v.to_string_lossy()).collect::<Vec<_>>().join(","))
                    .unwrap_or_default(),
            };
            let source = match m.value_source(&s.id) {
                Some(ValueSource::EnvVariable) => "env",
                Some(ValueSource::CommandLine) => "flag",
                Some(ValueSource::DefaultValue) => "default",
                _ => "none",
            };
            seen.insert(format!("{sub}/{}", s.id), format!("{value} {source}"));
        }
    }
    seen
}

/// Runs this test in a child for `case`, the variables set to their first value (`both`:
/// booleans to `false`, so that only the flag can make them true).
fn child(case: &str) -> BTreeMap<String, String> {
    let exe = std::env::current_exe().expect("the test binary");
    let mut command = std::process::Command::new(exe);
    command
        .args([
            "cli::env_flags::env_alone_flag_alone_and_both_for_every_setting",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CASE, case);
    for s in settings() {
        command.env_remove(&s.env);
        let (a, _) = values(&s.env);
        match (case, s.switch) {
            ("env", _) => command.env(&s.env, a),
            ("both", true) => command.env(&s.env, "false"),
            ("both", false) => command.env(&s.env, a),
            _ => &mut command,
        };
    }
    let out = command.output().expect("the child runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.split_once(MARK).map(|(_, json)| json))
        .unwrap_or_else(|| {
            panic!(
                "{case}: no observation\n{stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    serde_json::from_str(line).expect("the child's JSON")
}

#[test]
fn env_alone_flag_alone_and_both_for_every_setting() {
    if let Ok(case) = std::env::var(CASE) {
        let seen = observe(case != "env");
        println!("{MARK}{}", serde_json::to_string(&seen).expect("JSON"));
        return;
    }
    let all = settings();
    assert!(
        all.len() >= VALUES.len(),
        "every row is a setting: {}",
        all.len()
    );
    let (env, flag, both) = (child("env"), child("flag"), child("both"));
    let mut wrong = vec![];
    for s in &all {
        let key = format!("{}/{}", s.subcommand, s.id);
        let (a, b) = values(&s.env);
        let (a, b) = if s.switch { ("true", "true") } else { (a, b) };
        for (case, seen, want) in [
            ("env alone", &env, format!("{a} env")),
            ("flag alone", &flag, format!("{b} flag")),
            ("both", &both, format!("{b} flag")),
        ] {
            let got = seen.get(&key).cloned().unwrap_or_default();
            if got != want {
                wrong.push(format!(
                    "{key} ({}, --{}) {case}: {got:?}, want {want:?}",
                    s.env, s.long
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
