use super::*;

#[test]
fn flags_parse_and_validate() {
    let cli = Cli::try_parse_from([
        "fleetnet-hub",
        "run",
        "--kubeconfig-dir",
        "/tmp",
        "--leader-elect",
        "--kube-api-qps",
        "5",
    ])
    .expect("parses");
    let Command::Run(args) = cli.command else {
        panic!("run")
    };
    let cfg = args.config().expect("valid");
    assert_eq!(cfg.runtime.member_limits.qps, 5.0);
    assert!(cfg.leader_election.is_some());
    let refused = Cli::try_parse_from(["fleetnet-hub", "run", "--kube-api-qps", "0"])
        .err()
        .expect("a rate of 0 is refused");
    assert!(refused.to_string().contains("--kube-api-qps"), "{refused}");
}

#[test]
fn members_allow_remote_is_off_unless_given() {
    let run = |extra: &[&str]| {
        let base = ["fleetnet-hub", "run", "--kubeconfig-dir", "/tmp"];
        let cli = Cli::try_parse_from(base.iter().chain(extra)).expect("parses");
        let Command::Run(args) = cli.command else {
            panic!("run")
        };
        args.validate().expect("valid").members_allow_remote
    };
    assert!(!run(&[]), "loopback only by default");
    assert!(run(&["--members-allow-remote"]));
}

/// Every flag where 0 would mean "never" or "unbounded" refuses it, naming the flag.
#[test]
fn flags_refuse_zero_where_it_means_never() {
    for flag in [
        "--kube-api-burst",
        "--event-burst",
        "--reconcile-concurrency",
        "--hub-api-burst",
        "--azure-arm-burst",
        "--member-sync-timeout",
        "--public-ip-cache-ttl",
        "--shards",
        "--max-exports-per-member",
        "--max-export-bytes",
        "--kube-api-qps",
        "--event-qps",
        "--hub-api-qps",
        "--azure-arm-qps",
    ] {
        let refused = Cli::try_parse_from(["fleetnet-hub", "run", flag, "0"])
            .err()
            .unwrap_or_else(|| panic!("{flag} 0 is refused"));
        assert!(refused.to_string().contains(flag), "{flag}: {refused}");
        // 1 (one unit) is taken.
        let one = if flag.ends_with("timeout") || flag.ends_with("ttl") {
            "1s"
        } else {
            "1"
        };
        assert!(
            Cli::try_parse_from(["fleetnet-hub", "run", flag, one]).is_ok(),
            "{flag} {one}"
        );
    }
}

#[test]
fn quotas_reach_the_runtime_config() {
    let parse = |extra: &[&str]| {
        let args = [&["fleetnet-hub", "run"][..], extra].concat();
        let Command::Run(args) = Cli::try_parse_from(args).expect("parses").command else {
            panic!("run")
        };
        args.config().expect("valid").runtime.quotas
    };
    assert_eq!(parse(&[]), fleetnet_hub::export::Quotas::default());
    let set = parse(&[
        "--max-exports-per-member",
        "2",
        "--max-export-bytes",
        "4096",
    ]);
    assert_eq!((set.max_exports, set.max_export_bytes), (2, 4096));
}

/// The builder's defaults are the flags' defaults: `run` without flags and
/// `Config::builder` without settings configure the same process.
#[test]
fn builder_defaults_are_the_flags_defaults() {
    let cli = Cli::try_parse_from(["fleetnet-hub", "run"]).expect("parses");
    let Command::Run(args) = cli.command else {
        panic!("run")
    };
    let flags = args.config().expect("valid");
    let built = Config::builder(None, "kubeconfigs").build().expect("valid");
    assert_eq!(format!("{flags:?}"), format!("{built:?}"));
}

/// `FLEETNET_TRACE_SAMPLING`'s default ratio holds unless `--trace-sampling-ratio` is given (the
/// flag's default used to override it: 100 % sampling whatever the env said).
#[test]
fn trace_sampling_from_the_env_is_kept_unless_the_flag_is_given() {
    let config = |extra: &[&str]| {
        let args = [&["fleetnet-hub", "run"][..], extra].concat();
        let Command::Run(args) = Cli::try_parse_from(args).expect("parses").command else {
            panic!("run")
        };
        args.config().expect("valid")
    };
    let env: fleetnet_hub::telemetry::SamplingConfig = "0.01,noisy=0".parse().expect("parses");
    let kept = run_sampling(env.clone(), &config(&[]));
    assert_eq!(kept, env);
    let flag = run_sampling(env, &config(&["--trace-sampling-ratio", "0.5"]));
    assert_eq!(flag.default_ratio, 0.5);
    assert_eq!(flag.members.get("noisy"), Some(&0.0));
    assert_eq!(
        run_sampling(Default::default(), &config(&[])).default_ratio,
        1.0,
        "neither given: every reconcile traced"
    );
}
