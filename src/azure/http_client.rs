//! azure_core's `HttpClient` over the tower stacks of [`super::transport`]: what the SDK
//! pipeline (ARM) and the credentials (tokens) send with.

use std::time::Duration;

use azure_core::error::{Error, ErrorKind};
use azure_core::headers::{HeaderName, HeaderValue, Headers};
use azure_core::{Body, HttpClient, Request, Response, StatusCode, Url};
use bytes::Bytes;
use tower::ServiceExt;

use super::transport::{HttpRequest, HttpResponse, HttpService, Payload, SendErrorKind};

/// The final outcome of one ARM request that did not succeed, after retries. Travels inside
/// `azure_core::Error` through the SDK; the lookup downcasts it to classify.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{description} (after {attempts} attempt{})", if *attempts == 1 { "" } else { "s" })]
pub(crate) struct ArmFailure {
    /// HTTP status, if ARM answered.
    pub status: Option<u16>,
    /// ARM's `Retry-After` on the last answer, if any.
    pub retry_after: Option<Duration>,
    pub attempts: u32,
    pub description: String,
}

impl ArmFailure {
    fn into_error(self) -> Error {
        let kind = match self.status.and_then(|s| StatusCode::try_from(s).ok()) {
            Some(status) => ErrorKind::HttpResponse {
                status,
                error_code: None,
            },
            None => ErrorKind::Io,
        };
        Error::new(kind, self)
    }
}

/// The ARM transport of the SDK pipeline. Sends only to the configured ARM origin (the bearer
/// token must go nowhere else, e.g. not to a foreign `nextLink`); answers every non-success
/// status with an [`ArmFailure`] error.
pub(crate) struct ArmHttpClient {
    endpoint: Url,
    service: HttpService,
}

impl ArmHttpClient {
    pub(crate) fn new(endpoint: Url, service: HttpService) -> Self {
        Self { endpoint, service }
    }
}

impl std::fmt::Debug for ArmHttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArmHttpClient")
            .field("endpoint", &self.endpoint.as_str())
            .finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl HttpClient for ArmHttpClient {
    async fn execute_request(&self, request: &Request) -> azure_core::Result<Response> {
        if request.url().origin() != self.endpoint.origin() {
            return Err(Error::with_message(ErrorKind::Other, || {
                format!(
                    "refusing to send an ARM request to {}: not the configured ARM endpoint {}",
                    request.url().origin().ascii_serialization(),
                    self.endpoint.origin().ascii_serialization()
                )
            }));
        }
        let result = self.service.clone().oneshot(to_http(request)?).await;
        let failure = match result {
            Ok(response) if response.status.is_success() => return to_azure(response),
            Ok(response) => {
                let code = response.status.as_u16();
                let request_id = response
                    .headers
                    .get("x-ms-request-id")
                    .and_then(|v| v.to_str().ok());
                ArmFailure {
                    status: Some(code),
                    retry_after: response.retry_after(),
                    attempts: response.attempts,
                    description: describe_status(code, &response.body, request_id),
                }
            }
            Err(error) => {
                let description = match &error.kind {
                    SendErrorKind::Timeout(after) => {
                        format!("ARM request timed out after {after:?}")
                    }
                    SendErrorKind::Transport(source) => {
                        format!("ARM transport error: {}", error_chain(source))
                    }
                    SendErrorKind::Request(_) => {
                        return Err(Error::full(
                            ErrorKind::Other,
                            error,
                            "sending the ARM request",
                        ));
                    }
                };
                ArmFailure {
                    status: None,
                    retry_after: None,
                    attempts: error.attempts,
                    description,
                }
            }
        };
        tracing::debug!(url = %request.url(), error = %failure, "ARM request failed");
        Err(failure.into_error())
    }
}

/// The transport of the credentials (Entra ID token endpoint, IMDS). Answers come back as
/// they are, whatever the status: azure_identity reads error statuses and bodies itself.
pub(crate) struct TokenHttpClient {
    service: HttpService,
}

impl TokenHttpClient {
    pub(crate) fn new(service: HttpService) -> Self {
        Self { service }
    }
}

impl std::fmt::Debug for TokenHttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenHttpClient").finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl HttpClient for TokenHttpClient {
    async fn execute_request(&self, request: &Request) -> azure_core::Result<Response> {
        let origin = request.url().origin().ascii_serialization();
        match self.service.clone().oneshot(to_http(request)?).await {
            Ok(response) => to_azure(response),
            Err(error) => {
                let kind = if error.is_retryable() {
                    ErrorKind::Io
                } else {
                    ErrorKind::Other
                };
                let message = format!(
                    "token request to {origin} failed after {} attempt{}",
                    error.attempts,
                    if error.attempts == 1 { "" } else { "s" }
                );
                Err(Error::full(kind, error, message))
            }
        }
    }
}

fn to_http(request: &Request) -> azure_core::Result<HttpRequest> {
    let method = http::Method::from_bytes(request.method().as_ref().as_bytes()).map_err(|e| {
        Error::full(
            ErrorKind::DataConversion,
            e,
            format!("unsupported HTTP method {}", request.method()),
        )
    })?;
    let mut headers = http::HeaderMap::new();
    for (name, value) in request.headers().iter() {
        let name = http::HeaderName::from_bytes(name.as_str().as_bytes()).map_err(|e| {
            Error::full(
                ErrorKind::DataConversion,
                e,
                format!("invalid request header name {:?}", name.as_str()),
            )
        })?;
        // The value is not quoted in the error: it may be a credential.
        let mut value = http::HeaderValue::from_str(value.as_str()).map_err(|e| {
            Error::full(
                ErrorKind::DataConversion,
                e,
                format!("invalid value of request header {name}"),
            )
        })?;
        if name == http::header::AUTHORIZATION {
            value.set_sensitive(true);
        }
        headers.insert(name, value);
    }
    let body = match request.body() {
        Body::Bytes(bytes) => Payload::Bytes(bytes.clone()),
        Body::SeekableStream(stream) => Payload::Stream(stream.clone()),
    };
    Ok(HttpRequest {
        method,
        url: request.url().clone(),
        headers,
        body,
        attempt: 1,
    })
}

fn to_azure(response: HttpResponse) -> azure_core::Result<Response> {
    let code = response.status.as_u16();
    let status = StatusCode::try_from(code).map_err(|_| {
        Error::with_message(ErrorKind::DataConversion, || {
            format!("unsupported HTTP status {code}")
        })
    })?;
    let mut headers = Headers::new();
    for (name, value) in &response.headers {
        // azure_core's headers are text; a binary value is of no use to the SDK.
        if let Ok(value) = value.to_str() {
            headers.insert(
                HeaderName::from(name.as_str().to_owned()),
                HeaderValue::from(value.to_owned()),
            );
        }
    }
    let body = futures::stream::once(std::future::ready(Ok::<Bytes, Error>(response.body)));
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
            match (code, message) {
                (None, None) => None,
                (c, m) => Some(format!(
                    "{}: {}",
                    c.unwrap_or("<no code>"),
                    truncate(m.unwrap_or(""), 300)
                )),
            }
        });
    let mut text = match detail {
        Some(detail) => format!("ARM answered HTTP {code} ({detail})"),
        None => format!("ARM answered HTTP {code}"),
    };
    if let Some(id) = request_id {
        text.push_str(", x-ms-request-id ");
        text.push_str(truncate(id, 64));
    }
    text
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// `error` and its sources, joined: azure_core's Display shows only the outermost message.
pub(crate) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        let s = inner.to_string();
        if !text.contains(&s) {
            text.push_str(": ");
            text.push_str(&s);
        }
        source = inner.source();
    }
    text
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
        assert_eq!(http.method, http::Method::POST);
        assert_eq!(http.url, url);
        assert_eq!(http.headers["x-ms-client-request-id"], "abc");
        assert!(http.headers["authorization"].is_sensitive());
        assert!(!format!("{http:?}").contains("secret-token"));
        assert!(matches!(&http.body, Payload::Bytes(b) if b.as_ref() == b"form"));
        assert_eq!(http.attempt, 1);

        let mut headers = http::HeaderMap::new();
        headers.insert("x-ms-request-id", http::HeaderValue::from_static("r-1"));
        let response = to_azure(HttpResponse {
            status: http::StatusCode::ACCEPTED,
            headers,
            body: Bytes::from_static(b"{}"),
            attempts: 2,
        })
        .expect("converts");
        assert_eq!(response.status(), StatusCode::Accepted);
        assert_eq!(
            response
                .headers()
                .get_optional_str(&HeaderName::from_static("x-ms-request-id")),
            Some("r-1")
        );
    }
}
