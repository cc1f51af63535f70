use super::*;

fn limits() -> ServerLimits {
    ServerLimits {
        header_read_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(30),
        request_timeout: Duration::from_secs(10),
        max_connections: 4,
    }
}

#[test]
fn an_idle_connection_is_kept_until_its_idle_deadline_then_closed() {
    let t0 = Instant::now();
    let a = Activity::new(t0);
    let until = t0 + Duration::from_secs(30);
    assert_eq!(verdict(&a, t0, &limits()), Verdict::KeepUntil(until));
    let just_before = until - Duration::from_millis(1);
    assert_eq!(
        verdict(&a, just_before, &limits()),
        Verdict::KeepUntil(until)
    );
    assert_eq!(verdict(&a, until, &limits()), Verdict::Idle);
}

#[test]
fn a_request_in_flight_is_under_the_request_deadline_not_the_idle_one() {
    let t0 = Instant::now();
    let mut a = Activity::new(t0);
    let started = t0 + Duration::from_secs(25);
    a.started(started);
    // Past the idle deadline of the accept time, but busy: the request deadline counts.
    let later = t0 + Duration::from_secs(31);
    assert_eq!(
        verdict(&a, later, &limits()),
        Verdict::KeepUntil(started + Duration::from_secs(10))
    );
    assert_eq!(
        verdict(&a, started + Duration::from_secs(10), &limits()),
        Verdict::RequestOverdue
    );
}

#[test]
fn the_idle_deadline_restarts_when_the_last_response_is_flushed_not_when_its_body_ends() {
    let t0 = Instant::now();
    let mut a = Activity::new(t0);
    a.started(t0 + Duration::from_secs(1));
    // A flush before any answer (hyper flushes as it goes) ends nothing.
    a.flushed(t0 + Duration::from_secs(2));
    assert_eq!(a.busy_since, Some(t0 + Duration::from_secs(1)));
    // Answered (body dropped) but not flushed: its bytes may still be queued, still busy.
    a.answered();
    assert_eq!(a.busy_since, Some(t0 + Duration::from_secs(1)));
    assert_eq!(
        verdict(&a, t0 + Duration::from_secs(11), &limits()),
        Verdict::RequestOverdue
    );
    a.flushed(t0 + Duration::from_secs(4));
    assert_eq!((a.in_flight, a.busy_since), (0, None));
    assert_eq!(
        verdict(&a, t0 + Duration::from_secs(20), &limits()),
        Verdict::KeepUntil(t0 + Duration::from_secs(34))
    );
    // Stray answers and flushes do not underflow or end a request not answered yet.
    a.answered();
    a.flushed(t0 + Duration::from_secs(5));
    assert_eq!((a.in_flight, a.answered), (0, 0));
    a.started(t0 + Duration::from_secs(6));
    a.flushed(t0 + Duration::from_secs(7));
    assert_eq!(a.busy_since, Some(t0 + Duration::from_secs(6)));
}

#[test]
fn a_limit_too_large_for_an_instant_never_expires() {
    let t0 = Instant::now();
    let huge = ServerLimits {
        idle_timeout: Duration::MAX,
        request_timeout: Duration::MAX,
        ..limits()
    };
    let mut a = Activity::new(t0);
    assert!(matches!(verdict(&a, t0, &huge), Verdict::KeepUntil(_)));
    a.started(t0);
    assert!(matches!(verdict(&a, t0, &huge), Verdict::KeepUntil(_)));
}
