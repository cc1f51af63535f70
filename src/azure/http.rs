//! What the SDK pipeline (ARM) and the credentials (tokens) send with: azure_core's
//! `HttpClient` over a tower stack of the client policy ([`crate::policy`]) on one pooled
//! `reqwest::Client`. The innermost service reads the whole body, so an attempt's deadline and
//! slot cover it. The SDK's own retry is switched off: the policy's is the one retry loop.

use std::time::Duration;

use azure_core::error::{Error, ErrorKind};
use azure_core::headers::{HeaderName, HeaderValue, Headers};
use azure_core::{Body, HttpClient, Request, Response, StatusCode, Url};
use bytes::Bytes;
use tower::util::BoxCloneSyncService;
use tower::{BoxError, ServiceExt};

use crate::policy::{Attempts, Policy, Repeat, RequestKind, TimedOut, Turn, retry_after};

tokio::task_local! {
    /// The line in the shared ARM budget of the member whose LIST this task runs
    /// ([`crate::policy::Turn`]). The SDK builds the requests and has no place for
    /// extensions, so the LIST's task carries it and [`StackClient`] puts it on each request.
    pub(crate) static ARM_TURN: Turn;
}

/// A stack: cheap to clone per request (its limits are shared through `Arc`s).
type HttpService = BoxCloneSyncService<http::Request<Bytes>, http::Response<Bytes>, BoxError>;

/// Every request on these stacks is a read (ARM GETs) or a token request: all may be repeated.
pub(crate) fn classify(method: &http::Method, _: &http::Uri) -> RequestKind {
    let verb = if *method == http::Method::GET {
        "get"
    } else {
        "create"
    };
    RequestKind {
        verb,
        resource: "-".into(),
        repeat: Repeat::Always,
    }
}

/// `policy` over `client`.
pub(crate) fn stack(client: reqwest::Client, policy: Policy) -> HttpService {
    let send = tower::service_fn(move |req: http::Request<Bytes>| {
        let client = client.clone();
        async move {
            let mut response = client.execute(reqwest::Request::try_from(req)?).await?;
            let mut answer = http::Response::new(Bytes::new());
            *answer.status_mut() = response.status();
            *answer.headers_mut() = std::mem::take(response.headers_mut());
            *answer.body_mut() = response.bytes().await?;
            Ok::<_, BoxError>(answer)
        }
    });
    BoxCloneSyncService::new(policy.layers().service(send))
}

/// The final outcome of one ARM request that did not succeed, after retries. Travels inside
/// `azure_core::Error` through the SDK; the lookup downcasts it to classify.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{description}{}", attempts.map_or(String::new(), |n| format!(" (after {n} attempt{})", if n == 1 { "" } else { "s" })))]
pub(crate) struct ArmFailure {
    /// HTTP status, if ARM answered.
    pub status: Option<u16>,
    /// ARM's `Retry-After` on the last answer, if any.
    pub retry_after: Option<Duration>,
    pub attempts: Option<u32>,
    pub description: String,
}

/// An azure_core `HttpClient` over a stack. For ARM (`arm` set) it sends only to the configured
/// ARM origin (the bearer token must go nowhere else, e.g. not to a foreign `nextLink`) and
/// answers every non-success status with an [`ArmFailure`]. For tokens (`arm` unset) answers
/// come back whatever the status: azure_identity reads error statuses and bodies itself.
pub(crate) struct StackClient {
    pub arm: Option<Url>,
    pub service: HttpService,
}

impl std::fmt::Debug for StackClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StackClient")
            .field("arm", &self.arm.as_ref().map(Url::as_str))
            .finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl HttpClient for StackClient {
    async fn execute_request(&self, request: &Request) -> azure_core::Result<Response> {
        let origin = request.url().origin();
        let Some(arm) = &self.arm else {
            return match self.service.clone().oneshot(to_http(request)?).await {
                Ok(response) => to_azure(response),
                Err(error) => Err(Error::full(
                    ErrorKind::Io,
                    error,
                    format!("token request to {} failed", origin.ascii_serialization()),
                )),
            };
        };
        if origin != arm.origin() {
            return Err(Error::with_message(ErrorKind::Other, || {
                format!(
                    "refusing to send an ARM request to {}: not the configured ARM endpoint {}",
                    origin.ascii_serialization(),
                    arm.origin().ascii_serialization()
                )
            }));
        }
        let mut http_request = to_http(request)?;
        if let Ok(turn) = ARM_TURN.try_with(Turn::clone) {
            http_request.extensions_mut().insert(turn);
        }
        let failure = match self.service.clone().oneshot(http_request).await {
            Ok(response) if response.status().is_success() => return to_azure(response),
            Ok(response) => failure_of(&response),
            Err(error) => ArmFailure {
                status: None,
                retry_after: None,
                attempts: None,
                description: match error.downcast_ref::<TimedOut>() {
                    Some(t) => format!("ARM request timed out after {:?}", t.after),
                    None => format!("ARM transport error: {}", error_chain(&*error)),
                },
            },
        };
        tracing::debug!(url = %request.url(), error = %failure, "ARM request failed");
        let kind = match failure.status.and_then(|s| StatusCode::try_from(s).ok()) {
            Some(status) => ErrorKind::HttpResponse {
                status,
                error_code: None,
            },
            None => ErrorKind::Io,
        };
        Err(Error::new(kind, failure))
    }
}

fn failure_of(response: &http::Response<Bytes>) -> ArmFailure {
    let code = response.status().as_u16();
    let request_id = response.headers().get("x-ms-request-id");
    ArmFailure {
        status: Some(code),
        retry_after: retry_after(response.headers()),
        attempts: Some(response.extensions().get::<Attempts>().map_or(1, |a| a.0)),
        description: describe_status(
            code,
            response.body(),
            request_id.and_then(|v| v.to_str().ok()),
        ),
    }
}

fn to_http(request: &Request) -> azure_core::Result<http::Request<Bytes>> {
    let convert = |e: &dyn std::fmt::Display| {
        Error::with_message(ErrorKind::DataConversion, || {
            format!("converting the request to {}: {e}", request.url().path())
        })
    };
    let Body::Bytes(body) = request.body() else {
        return Err(convert(&"streamed request bodies are not sent"));
    };
    let mut builder = http::Request::builder()
        .method(request.method().as_ref())
        .uri(request.url().as_str());
    for (name, value) in request.headers().iter() {
        let mut value = http::HeaderValue::from_str(value.as_str())
            // The value is not quoted: it may be a credential.
            .map_err(|_| convert(&format!("invalid value of header {}", name.as_str())))?;
        value.set_sensitive(name.as_str().eq_ignore_ascii_case("authorization"));
        builder = builder.header(name.as_str(), value);
    }
    builder.body(body.clone()).map_err(|e| convert(&e))
}

fn to_azure(response: http::Response<Bytes>) -> azure_core::Result<Response> {
    let code = response.status().as_u16();
    let status = StatusCode::try_from(code).map_err(|_| {
        Error::with_message(ErrorKind::DataConversion, || {
            format!("unsupported HTTP status {code}")
        })
    })?;
    let mut headers = Headers::new();
    for (name, value) in response.headers() {
        // azure_core's headers are text; a binary value is of no use to the SDK.
        if let Ok(value) = value.to_str() {
            headers.insert(
                HeaderName::from(name.as_str().to_owned()),
                HeaderValue::from(value.to_owned()),
            );
        }
    }
    let body = response.into_body();
    let body = futures::stream::once(std::future::ready(Ok::<Bytes, Error>(body)));
    Ok(Response::new(status, headers, Box::pin(body)))
}

/// "HTTP 503 (ServerBusy: message), request id …" from ARM's `{"error":{"code","message"}}`
/// body and `x-ms-request-id`, when present.
fn describe_status(code: u16, body: &[u8], request_id: Option<&str>) -> String {
    let detail = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            let error = v.get("error").unwrap_or(&v);
            let code = error.get("code").and_then(|c| c.as_str());
            let message = error.get("message").and_then(|m| m.as_str());
            (code.is_some() || message.is_some()).then(|| {
                let message = truncate(message.unwrap_or(""), 300);
                format!("{}: {message}", code.unwrap_or("<no code>"))
            })
        });
    let mut text = match detail {
        Some(detail) => format!("ARM answered HTTP {code} ({detail})"),
        None => format!("ARM answered HTTP {code}"),
    };
    if let Some(id) = request_id {
        text.push_str(", x-ms-request-id ");
        text.push_str(truncate(id, 64));
    }
    super::redact::credentials(&text)
}

fn truncate(s: &str, max: usize) -> &str {
    s.char_indices().nth(max).map_or(s, |(i, _)| &s[..i])
}

/// `error` and its sources, joined (azure_core's Display shows only the outermost message),
/// credentials redacted.
pub(crate) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    for inner in std::iter::successors(error.source(), |e| e.source()) {
        let s = inner.to_string();
        if !text.contains(&s) {
            text.push_str(": ");
            text.push_str(&s);
        }
    }
    super::redact::credentials(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_description_uses_arm_error_body() {
        let body = br#"{"error":{"code":"ServerBusy","message":"try later"}}"#;
        assert_eq!(
            describe_status(503, body, None),
            "ARM answered HTTP 503 (ServerBusy: try later)"
        );
        assert_eq!(
            describe_status(500, b"<html>", Some("abc-123")),
            "ARM answered HTTP 500, x-ms-request-id abc-123"
        );
    }

    #[test]
    fn requests_and_answers_convert_both_ways() {
        let url: Url = "https://management.azure.com/x?api-version=1"
            .parse()
            .expect("url");
        let mut request = Request::new(url.clone(), azure_core::Method::Post);
        request.insert_header("authorization", "Bearer secret-token");
        request.insert_header("x-ms-client-request-id", "abc");
        request.set_body(Bytes::from_static(b"form"));
        let http = to_http(&request).expect("converts");
        assert_eq!(http.method(), http::Method::POST);
        assert_eq!(http.uri().to_string(), url.as_str());
        assert_eq!(http.headers()["x-ms-client-request-id"], "abc");
        assert!(http.headers()["authorization"].is_sensitive());
        assert!(!format!("{http:?}").contains("secret-token"));
        assert_eq!(http.body().as_ref(), b"form");

        let response = http::Response::builder()
            .status(202)
            .header("x-ms-request-id", "r-1")
            .body(Bytes::from_static(b"{}"))
            .expect("response");
        let response = to_azure(response).expect("converts");
        assert_eq!(response.status(), StatusCode::Accepted);
        assert_eq!(
            response
                .headers()
                .get_optional_str(&HeaderName::from_static("x-ms-request-id")),
            Some("r-1")
        );
    }
}
