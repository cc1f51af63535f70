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
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false);
    let text = tracing_subscriber::fmt::format().with_ansi(false);
    match format {
        LogFormat::Text => layer.event_format(WithTraceId(text, false)).boxed(),
        LogFormat::Json => (layer.fmt_fields(JsonFields::new()))
            .event_format(WithTraceId(text.json().flatten_event(true), true))
            .boxed(),
    }
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
        let Some(ids) = ids else {
            return self.0.format_event(ctx, writer, event);
        };
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        let body = line.strip_suffix('\n').unwrap_or(&line);
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
