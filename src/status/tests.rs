use super::*;

fn status(phase: &str, since: &str, jobs: &[(&str, &str, Option<&str>)]) -> Status {
    Status {
        member: "m1".into(),
        owner: "replica-a".into(),
        phase: phase.into(),
        since: since.into(),
        jobs: jobs
            .iter()
            .map(|(name, phase, error)| {
                let job = JobState {
                    phase: (*phase).into(),
                    last_error: error.map(str::to_string),
                    since: since.into(),
                };
                (name.to_string(), job)
            })
            .collect(),
        ..Default::default()
    }
}

#[test]
fn nothing_on_the_hub_is_written_with_the_failing_jobs_named() {
    let now = status(
        "ready",
        "t1",
        &[("a", "failing", Some("404")), ("b", "ready", None)],
    );
    let written = decide(now, None, "t2").expect("written");
    assert_eq!(written.failing_jobs, "a");
    assert_eq!(written.observed_at, "t2");
}

#[test]
fn the_same_state_after_a_restart_writes_nothing() {
    let on_hub =
        decide(status("ready", "t1", &[("a", "ready", None)]), None, "t2").expect("first write");
    // Restarted: new `since`s, no error kept in memory, the phases the same.
    let restarted = status("ready", "t9", &[("a", "ready", None)]);
    assert_eq!(decide(restarted, Some(&on_hub), "t10"), None);
}

#[test]
fn an_error_shown_is_kept_until_the_next_and_a_phase_change_is_written() {
    let mut failing = status("failing", "t1", &[("a", "failing", Some("404"))]);
    failing.last_error = Some("a: 404".into());
    let on_hub = decide(failing, None, "t2").expect("first write");
    let recovered = status("ready", "t5", &[("a", "ready", None)]);
    let next = decide(recovered, Some(&on_hub), "t6").expect("a phase change is written");
    assert_eq!(next.since, "t5");
    assert_eq!(next.last_error.as_deref(), Some("a: 404"));
    assert_eq!(next.jobs["a"].last_error.as_deref(), Some("404"));
    assert_eq!(next.failing_jobs, "");
}

#[test]
fn a_new_owner_is_written() {
    let on_hub = decide(status("ready", "t1", &[]), None, "t2").expect("first write");
    let mut moved = status("ready", "t7", &[]);
    moved.owner = "replica-b".into();
    let next = decide(moved, Some(&on_hub), "t8").expect("owner changed");
    assert_eq!(
        (next.owner.as_str(), next.since.as_str()),
        ("replica-b", "t1")
    );
}

#[test]
fn errors_are_clipped_on_a_character_boundary() {
    let long = "é".repeat(MAX_ERROR);
    let clipped = clip(&long);
    assert!(clipped.len() <= MAX_ERROR + "…".len());
    assert_eq!(clip("short"), "short");
}

#[test]
fn the_table_shows_every_member_and_dashes_for_the_unknown() {
    let row = cli::Row {
        member: "m1".into(),
        namespace: "fleet-member-m1".into(),
        owner: "replica-a".into(),
        owner_lease: None,
        phase: "ready".into(),
        since: "t1".into(),
        failing_jobs: vec!["endpointslice".into()],
        exports: Some(3),
        imports: None,
        last_error: Some("EndpointSliceExports watch:\n 404".into()),
        jobs: Default::default(),
        observed_at: "t2".into(),
    };
    let table = cli::table(&[row]);
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("MEMBER"));
    assert!(lines[1].contains("replica-a") && lines[1].contains("endpointslice"));
    assert!(
        lines[1].contains("EndpointSliceExports watch: 404"),
        "{table}"
    );
    assert!(lines[1].contains(" - "), "unknown imports: {table}");
    assert_eq!(lines[2], "1 members");
}

/// The object names the Lease, `status` its holder now: a rollout renames the holder and
/// rewrites no object.
#[test]
fn the_owner_shown_is_the_holder_of_the_published_lease() {
    let holders = std::collections::BTreeMap::from([(
        "fleetnet-system/fleetnet-hub-shard-3".to_string(),
        cli::pod_of("fleetnet-hub-7d9f-x2k4p_0a1b2c3d").to_string(),
    )]);
    assert_eq!(
        cli::owner_now("Lease fleetnet-system/fleetnet-hub-shard-3", &holders),
        "fleetnet-hub-7d9f-x2k4p"
    );
    assert_eq!(
        cli::owner_now("Lease fleetnet-system/fleetnet-hub-shard-4", &holders),
        "none (Lease fleetnet-system/fleetnet-hub-shard-4 not held)"
    );
    assert_eq!(
        cli::owner_now(super::NO_ELECTION_OWNER, &holders),
        super::NO_ELECTION_OWNER
    );
    assert_eq!(
        cli::pod_of("replica_a"),
        "replica_a",
        "not an identity suffix"
    );
}
