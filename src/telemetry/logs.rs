//! Log lines on stderr that carry the trace and span id of the span they were written in.

use std::cell::Cell;
use std::fmt;

use opentelemetry::trace::{SpanContext, TraceContextExt};
use tracing::{Dispatch, Event, Subscriber, span};
use tracing_subscriber::Layer;
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use super::LogFormat;

/// The log layer: text lines without colours, or JSON objects with the event's fields at the
/// top level (span fields under `span` and `spans`).
pub(super) fn layer<S>(format: LogFormat) -> Box<dyn Layer<S> + Send + Sync>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    layer_to(format, std::io::stderr)
}

/// [`layer`], written to `writer`.
fn layer_to<S, W>(format: LogFormat, writer: W) -> Box<dyn Layer<S> + Send + Sync>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(writer)
        .with_ansi(false);
    let text = tracing_subscriber::fmt::format().with_ansi(false);
    match format {
        LogFormat::Text => layer.event_format(WithTraceId(text, false)).boxed(),
        LogFormat::Json => (layer.fmt_fields(JsonFields::new()))
            .event_format(WithTraceId(text.json().flatten_event(true), true))
            .boxed(),
    }
}

/// Characters that would forge or hide log lines if written as they are: C0 controls (line
/// feed, carriage return, escape …), DEL, C1 controls (a terminal may take U+009B as an escape
/// sequence) and Unicode's line and paragraph separators.
fn forges(c: char) -> bool {
    c.is_control() || c == '\u{2028}' || c == '\u{2029}'
}

/// `s` with every character that could forge a line ([`forges`]) written as an escape (`\n`,
/// `\r`, `\t`, `\x1b`, `\u{9b}`): member and object names, annotation values and errors come
/// from clusters, and one log line stays one line. Borrowed when there is nothing to escape.
pub fn escape_control(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(forges) {
        return s.into();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if forges(c) && (c as u32) < 0x80 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if forges(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out.into()
}

/// A JSON line with what serde_json leaves raw in strings escaped too: it escapes C0
/// controls, but writes DEL, C1 controls and the line separators as they are (valid JSON,
/// and a terminal showing the raw line may act on them). Outside strings a JSON line has
/// none of these, so every one is inside a string and `\u00XX` is its JSON escape.
fn escape_json_line(line: &str) -> std::borrow::Cow<'_, str> {
    if !line.chars().any(forges) {
        return line.into();
    }
    let mut out = String::with_capacity(line.len() + 8);
    for c in line.chars() {
        if forges(c) {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    out.into()
}

thread_local! {
    /// Set while this thread reads a span's OpenTelemetry context: an event emitted from
    /// inside that read must not read it again (the span's data is locked).
    static IN_LOOKUP: Cell<bool> = const { Cell::new(false) };
}

/// The OpenTelemetry span context of `id`, when the OpenTelemetry layer is installed and the
/// span is valid.
fn span_context(id: &span::Id, dispatch: &Dispatch) -> Option<SpanContext> {
    if IN_LOOKUP.with(|l| l.replace(true)) {
        return None;
    }
    let cx = tracing_opentelemetry::get_otel_context(id, dispatch);
    IN_LOOKUP.with(|l| l.set(false));
    Some(cx?.span().span_context().clone()).filter(SpanContext::is_valid)
}

/// The trace id of the current span when its trace is sampled (for exemplars).
pub(crate) fn current_sampled_trace_id() -> Option<String> {
    let id = tracing::Span::current().id()?;
    let span = tracing::dispatcher::get_default(|d| span_context(&id, d))?;
    span.is_sampled().then(|| span.trace_id().to_string())
}

/// Wraps a formatter to add the ids of the event's span: JSON (`.1`) gets `"trace_id"` and
/// `"span_id"` members, text a ` trace_id=…` suffix.
struct WithTraceId<F>(F, bool);

impl<S, N, F> FormatEvent<S, N> for WithTraceId<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let parent = ctx.parent_span().map(|s| s.id());
        let ids = parent.and_then(|id| tracing::dispatcher::get_default(|d| span_context(&id, d)));
        // Formatted whole, then escaped: every field and the message, the spans' fields too.
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        let body = line.strip_suffix('\n').unwrap_or(&line);
        let body = match self.1 {
            true => escape_json_line(body),
            false => escape_control(body),
        };
        let Some(ids) = ids else {
            return writeln!(writer, "{body}");
        };
        let (trace_id, span_id) = (ids.trace_id(), ids.span_id());
        match body.strip_suffix('}').filter(|_| self.1) {
            Some(object) => writeln!(
                writer,
                "{object},\"trace_id\":\"{trace_id}\",\"span_id\":\"{span_id}\"}}"
            ),
            None => writeln!(writer, "{body} trace_id={trace_id}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    /// A writer into a shared buffer.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend_from_slice(data);
            Ok(data.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'w> tracing_subscriber::fmt::MakeWriter<'w> for Buffer {
        type Writer = Buffer;
        fn make_writer(&'w self) -> Self::Writer {
            self.clone()
        }
    }

    const FORGED: &str = "web\nERROR forged line\r\x1b[2K\u{9b}31m\u{2028}end\x7f";

    /// What one event (a span field, a Display field, a Debug-less string and the message, all
    /// holding `FORGED`) writes in `format`.
    fn logged(format: LogFormat) -> String {
        let buffer = Buffer::default();
        let subscriber = tracing_subscriber::registry().with(layer_to(format, buffer.clone()));
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("member", fleet.member = %FORGED);
            let _entered = span.enter();
            tracing::warn!(object = %FORGED, error = FORGED, "reconcile of {FORGED} failed");
        });
        let bytes = buffer.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
        String::from_utf8(bytes).expect("utf-8")
    }

    #[test]
    fn text_lines_escape_every_control_character() {
        let text = logged(LogFormat::Text);
        assert_eq!(text.matches('\n').count(), 1, "one line: {text:?}");
        assert!(text.ends_with('\n'));
        assert!(!text.trim_end_matches('\n').chars().any(forges), "{text:?}");
        let escaped = r"web\nERROR forged line\r\x1b[2K\u{9b}31m\u{2028}end\x7f";
        // The span's field, the Display field and the message (a `&str` field is written as
        // Debug, escaped by Rust).
        assert_eq!(text.matches(escaped).count(), 3, "{text}");
    }

    #[test]
    fn json_lines_escape_every_control_character_and_stay_json() {
        let text = logged(LogFormat::Json);
        assert_eq!(text.matches('\n').count(), 1, "one line: {text:?}");
        assert!(!text.trim_end_matches('\n').chars().any(forges), "{text:?}");
        let object: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        // Escaped for the line, the same text for whoever parses it.
        assert_eq!(object["object"], FORGED, "{text}");
        assert_eq!(object["error"], FORGED, "{text}");
        assert_eq!(object["span"]["fleet.member"], FORGED, "{text}");
    }

    #[test]
    fn escaping_leaves_plain_text_alone() {
        assert!(matches!(
            escape_control("member-1 ns/name: an error, ünïcode"),
            std::borrow::Cow::Borrowed(_)
        ));
        assert_eq!(
            escape_control("a\tb\u{85}c\u{2029}"),
            r"a\tb\u{85}c\u{2029}"
        );
    }
}
