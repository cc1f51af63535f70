//! Credentials out of what Azure answers before it reaches a log line, a span, an error or a
//! Kubernetes object: a token endpoint or ARM (or a proxy in front of them) may echo what it
//! was sent — a bearer token, a client secret, a signed assertion.

use std::sync::LazyLock;

use regex::Regex;

const REDACTED: &str = "<redacted>";

/// `Bearer <token>`, whatever the case.
static BEARER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(bearer)\s+[A-Za-z0-9\-._~+/]+=*").expect("a valid pattern")
});

/// The value of a credential-named field in a form (`client_secret=…`), JSON (`"access_token":
/// "…"`) or prose (`password: …`).
static FIELD: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?i)\b(client_secret|client_assertion|assertion|access_token|refresh_token|id_token|password|secret|token|sig|signature)("?\s*[:=]\s*"?)([^"&\s,;}]+)"#,
    )
    .expect("a valid pattern")
});

/// A JWT (three base64url parts, the first a JSON header: `eyJ…`), wherever it stands.
static JWT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*").expect("a valid pattern")
});

/// `text` with every credential-looking value replaced by `<redacted>`.
pub(crate) fn credentials(text: &str) -> String {
    let text = JWT.replace_all(text, REDACTED);
    let text = BEARER.replace_all(&text, format!("$1 {REDACTED}"));
    FIELD
        .replace_all(&text, format!("$1$2{REDACTED}"))
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::credentials;

    #[test]
    fn echoed_credentials_are_redacted_and_the_rest_kept() {
        let cases = [
            (
                "InvalidAuthenticationToken: The access token is invalid: Bearer fake-access-token-0",
                "InvalidAuthenticationToken: The access token is invalid: Bearer <redacted>",
            ),
            (
                "rejected request client_id=c1&client_secret=s3cret-value&scope=x/.default",
                "rejected request client_id=c1&client_secret=<redacted>&scope=x/.default",
            ),
            (
                r#"{"access_token": "abc.def", "token_type": "Bearer"}"#,
                r#"{"access_token": "<redacted>", "token_type": "Bearer"}"#,
            ),
            (
                "assertion eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl was refused",
                "assertion <redacted> was refused",
            ),
            (
                "authorization: BEARER abc+/def==",
                "authorization: BEARER <redacted>",
            ),
            (
                "https://x.blob/?sv=2024&sig=AbC%2Bd",
                "https://x.blob/?sv=2024&sig=<redacted>",
            ),
            // Nothing credential-like: unchanged.
            (
                "ARM answered HTTP 503 (ServerBusy: try later), x-ms-request-id 42",
                "ARM answered HTTP 503 (ServerBusy: try later), x-ms-request-id 42",
            ),
            (
                "AADSTS7000215: Invalid client secret provided.",
                "AADSTS7000215: Invalid client secret provided.",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(credentials(text), want, "{text}");
        }
    }
}
