use super::*;
use futures::StreamExt;
use http_body_util::{BodyExt, StreamBody};

const MIB: u64 = 1 << 20;

fn limits() -> BodyLimits {
    BodyLimits {
        max_response_bytes: 16 * MIB,
        max_event_bytes: 4 * MIB,
        response_deadline: Duration::from_secs(30),
        watch_idle: WATCH_IDLE,
        watch_margin: WATCH_MARGIN,
    }
}

fn shape(method: Method, uri: &str, status: u16) -> Shape {
    let status = StatusCode::from_u16(status).expect("status");
    shape_of(&method, &uri.parse().expect("uri"), status, &limits())
}

#[test]
fn watches_stream_and_everything_else_is_read_whole() {
    let whole = Shape::Whole {
        max_bytes: 16 * MIB,
        deadline: Duration::from_secs(30),
    };
    let stream = |secs| Shape::Stream {
        max_line: 4 * MIB,
        idle: WATCH_IDLE,
        lifetime: Duration::from_secs(secs),
    };
    let w = "/api/v1/services?&watch=true&timeoutSeconds=290&allowWatchBookmarks=true";
    assert_eq!(shape(Method::GET, w, 200), stream(350));
    assert_eq!(
        shape(Method::GET, "/api/v1/services?watch=1", 200),
        stream(350)
    );
    assert_eq!(
        shape(Method::GET, "/api/v1/watch/services", 200),
        stream(350)
    );
    let long = "/api/v1/services?watch=true&timeoutSeconds=18446744073709551615";
    let Shape::Stream { lifetime, .. } = shape(Method::GET, long, 200) else {
        panic!("a watch");
    };
    assert_eq!(lifetime, Duration::MAX, "saturates");
    assert_eq!(
        shape(Method::GET, w, 410),
        whole,
        "a refused watch is one Status"
    );
    assert_eq!(shape(Method::GET, "/api/v1/services?limit=500", 200), whole);
    assert_eq!(
        shape(Method::GET, "/api/v1/services?watch=false", 200),
        whole
    );
    assert_eq!(shape(Method::GET, "/apis", 200), whole);
    assert_eq!(shape(Method::PATCH, w, 200), whole);
}

#[test]
fn requests_are_named_by_verb_and_resource_only() {
    let label = |m: Method, u: &str| request_label(&m, &u.parse().expect("uri"));
    assert_eq!(
        label(Method::GET, "/api/v1/services?limit=500"),
        "LIST services"
    );
    assert_eq!(
        label(
            Method::GET,
            "https://h/apis/networking.fleet.azure.com/v1beta1/serviceexports?watch=true&token=s3cret"
        ),
        "WATCH serviceexports"
    );
    assert_eq!(label(Method::GET, "/version"), "GET -");
}

#[test]
fn sizes_are_told_as_set() {
    let told = |e: Exceeded| e.to_string();
    assert_eq!(
        told(Exceeded::ResponseBytes(16 * MIB)),
        "response over 16 MiB"
    );
    assert_eq!(told(Exceeded::EventBytes(512 << 10)), "event over 512 KiB");
    assert_eq!(
        told(Exceeded::ResponseBytes(1000)),
        "response over 1000 bytes"
    );
    assert_eq!(
        told(Exceeded::Idle(Duration::from_secs(300))),
        "sent nothing for 300s"
    );
}

type Chunks = Vec<Result<Frame<Bytes>, BoxError>>;

/// An in-memory body of `chunks`, then (when `open`) never another frame.
fn body(
    chunks: Vec<&'static [u8]>,
    open: bool,
) -> impl Body<Data = Bytes, Error = BoxError> + Unpin {
    let frames: Chunks = chunks
        .into_iter()
        .map(|c| Ok(Frame::data(Bytes::from_static(c))))
        .collect();
    let rest = if open {
        futures::stream::pending().boxed()
    } else {
        futures::stream::empty().boxed()
    };
    StreamBody::new(futures::stream::iter(frames).chain(rest))
}

fn bounded<B>(body: B, shape: Shape) -> Bounded<B> {
    Bounded::new(
        body,
        "m".into(),
        "LIST services".into(),
        shape,
        Instant::now(),
    )
}

fn whole(max_bytes: u64) -> Shape {
    Shape::Whole {
        max_bytes,
        deadline: Duration::from_secs(30),
    }
}

fn stream(max_line: u64) -> Shape {
    Shape::Stream {
        max_line,
        idle: Duration::from_secs(300),
        lifetime: Duration::from_secs(350),
    }
}

/// The error a body ended with, as its caller sees it.
fn exceeded(e: &BoxError) -> Exceeded {
    e.downcast_ref::<LimitExceeded>()
        .map(|e| e.exceeded)
        .unwrap_or_else(|| panic!("not a LimitExceeded: {e}"))
}

#[tokio::test]
async fn a_body_within_its_cap_is_read_whole() {
    let b = bounded(body(vec![b"0123", b"4567"], false), whole(8));
    let bytes = b.collect().await.expect("within the cap").to_bytes();
    assert_eq!(&bytes[..], b"01234567");
}

#[tokio::test]
async fn a_body_over_its_cap_ends_with_an_error_naming_member_request_and_cap() {
    let b = bounded(body(vec![b"0123", b"4567", b"8"], false), whole(8));
    let e = b.collect().await.expect_err("over the cap");
    assert_eq!(exceeded(&e), Exceeded::ResponseBytes(8));
    assert_eq!(
        e.to_string(),
        "member m: LIST services response over 8 bytes"
    );
    assert!(!e.to_string().contains("0123"), "never the content");
}

#[tokio::test]
async fn a_body_whose_length_is_over_the_cap_is_not_read() {
    let b = bounded(
        http_body_util::Full::new(Bytes::from_static(b"0123456789")),
        whole(8),
    );
    let e = b.collect().await.expect_err("over the cap");
    assert_eq!(exceeded(&e), Exceeded::ResponseBytes(8));
}

#[tokio::test]
async fn an_endless_body_is_cut_at_its_cap() {
    let endless = StreamBody::new(futures::stream::repeat_with(|| {
        Ok::<_, BoxError>(Frame::data(Bytes::from_static(b"x")))
    }));
    let e = bounded(endless, whole(1000))
        .collect()
        .await
        .expect_err("cut");
    assert_eq!(exceeded(&e), Exceeded::ResponseBytes(1000));
}

#[tokio::test(start_paused = true)]
async fn a_body_that_never_ends_meets_its_deadline() {
    let e = bounded(body(vec![b"{"], true), whole(1000))
        .collect()
        .await
        .expect_err("deadline");
    assert_eq!(exceeded(&e), Exceeded::Deadline(Duration::from_secs(30)));
}

/// A byte a second stays under the cap for ever and never goes idle: the deadline
/// still ends it.
#[tokio::test(start_paused = true)]
async fn a_trickle_meets_the_deadline_of_the_whole_body() {
    let trickle = StreamBody::new(
        futures::stream::unfold((), |()| async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Some((Ok::<_, BoxError>(Frame::data(Bytes::from_static(b"x"))), ()))
        })
        .boxed(),
    );
    let e = bounded(trickle, whole(1000))
        .collect()
        .await
        .expect_err("deadline");
    assert_eq!(exceeded(&e), Exceeded::Deadline(Duration::from_secs(30)));
}

#[tokio::test]
async fn watch_lines_are_capped_one_by_one_not_in_total() {
    // Lines of 4 bytes across chunk boundaries, 12 in total: fine under a 4-byte line cap.
    let ok = bounded(body(vec![b"abcd\nef", b"gh\nijkl\n"], false), stream(4));
    let bytes = ok
        .collect()
        .await
        .expect("each line within the cap")
        .to_bytes();
    assert_eq!(bytes.len(), 15);
    // A line continued over two chunks past the cap.
    let long = bounded(body(vec![b"ab\ncde", b"fg"], false), stream(4));
    let e = long.collect().await.expect_err("line over the cap");
    assert_eq!(exceeded(&e), Exceeded::EventBytes(4));
    // A long line in the middle of one chunk.
    let mid = bounded(body(vec![b"ab\nabcdefgh\ncd"], false), stream(4));
    let e = mid.collect().await.expect_err("line over the cap");
    assert_eq!(exceeded(&e), Exceeded::EventBytes(4));
}

#[tokio::test(start_paused = true)]
async fn a_silent_watch_meets_its_idle_deadline() {
    let mut b = bounded(body(vec![b"{}\n"], true), stream(100));
    let first = b.frame().await.expect("a frame").expect("data");
    assert!(first.is_data());
    let e = b.frame().await.expect("an end").expect_err("idle");
    assert_eq!(exceeded(&e), Exceeded::Idle(Duration::from_secs(300)));
    assert!(b.frame().await.is_none(), "ended for good");
}

/// A byte every 100 s keeps the watch from going idle; the lifetime ends it.
#[tokio::test(start_paused = true)]
async fn a_watch_kept_open_by_a_trickle_meets_its_lifetime() {
    let trickle = StreamBody::new(
        futures::stream::unfold((), |()| async {
            tokio::time::sleep(Duration::from_secs(100)).await;
            Some((Ok::<_, BoxError>(Frame::data(Bytes::from_static(b"x"))), ()))
        })
        .boxed(),
    );
    let started = Instant::now();
    let e = bounded(trickle, stream(100))
        .collect()
        .await
        .expect_err("lifetime");
    assert_eq!(exceeded(&e), Exceeded::Lifetime(Duration::from_secs(350)));
    assert_eq!(started.elapsed(), Duration::from_secs(350));
}

#[tokio::test]
async fn the_inner_error_passes_through() {
    let failing = StreamBody::new(futures::stream::iter(vec![Err::<Frame<Bytes>, BoxError>(
        "connection reset".into(),
    )]));
    let e = bounded(failing, whole(10))
        .collect()
        .await
        .expect_err("error");
    assert_eq!(e.to_string(), "connection reset");
}
