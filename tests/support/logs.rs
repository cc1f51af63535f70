//! The test process's one tracing subscriber. The tests of this binary share one process, and a
//! process has one global subscriber, so the kit installs it, with two layers: the code under
//! test's logs for failed tests (level from RUST_LOG, default warn), and a capture at debug that
//! records while some test holds a [`LogCapture`] (the security tests read every line the
//! process logs, looking for secrets).

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, Once};

use tracing::level_filters::LevelFilter;
use tracing::subscriber::Interest;
use tracing::{Level, Metadata};
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::{Context, Filter, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;

/// The capture's buffer: every line logged at debug while a [`LogCapture`] was held.
static CAPTURED: Mutex<Vec<u8>> = Mutex::new(Vec::new());
/// How many [`LogCapture`]s are held: the capture records while this is not 0.
static HOLDERS: AtomicUsize = AtomicUsize::new(0);

/// Installs the process's subscriber (once; later calls do nothing).
pub fn init_test_logs() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
        let shown = tracing_subscriber::fmt::layer()
            .with_test_writer()
            .with_filter(filter);
        let captured = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(|| Capture)
            .with_filter(WhileHeld);
        // A child test process may have installed its own (telemetry's): that one stays.
        let _ = tracing_subscriber::registry()
            .with(shown)
            .with(captured)
            .try_init();
    });
}

/// While held, everything the process logs at debug is recorded (from every test running in
/// the process, not only the holder's).
pub struct LogCapture(());

/// Starts recording (installing the subscriber first if need be).
pub fn capture_logs() -> LogCapture {
    init_test_logs();
    HOLDERS.fetch_add(1, Ordering::SeqCst);
    LogCapture(())
}

impl LogCapture {
    /// Everything recorded so far (since the first capture of the process), as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&CAPTURED.lock().unwrap_or_else(|p| p.into_inner())).to_string()
    }
}

impl Drop for LogCapture {
    fn drop(&mut self) {
        HOLDERS.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Debug and above, while a [`LogCapture`] is held.
struct WhileHeld;

impl<S> Filter<S> for WhileHeld {
    fn enabled(&self, meta: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        *meta.level() <= Level::DEBUG && HOLDERS.load(Ordering::SeqCst) > 0
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        if *meta.level() <= Level::DEBUG {
            // Asked again at each event: whether a capture is held changes.
            Interest::sometimes()
        } else {
            Interest::never()
        }
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::DEBUG)
    }
}

/// The capture's writer: appends to [`CAPTURED`].
struct Capture;

impl Write for Capture {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        CAPTURED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
