use std::io;
use std::time::Duration;

use kube::core::Status;

use super::*;

fn api(code: u16, message: &str) -> kube::Error {
    kube::Error::Api(Status::failure(message, "").with_code(code).boxed())
}

/// An error as the client stack returns a transport failure: kube's service error around
/// the connector's `io::Error`.
fn transport(io: io::Error) -> kube::Error {
    kube::Error::Service(Box::new(io))
}

fn tls(certificate: rustls::CertificateError) -> kube::Error {
    let rustls = rustls::Error::InvalidCertificate(certificate);
    transport(io::Error::new(io::ErrorKind::InvalidData, rustls))
}

fn category(e: &kube::Error) -> Category {
    classify("list things", e).category
}

#[test]
fn answers_401_403_404_are_authentication_rbac_crd_missing() {
    assert_eq!(
        category(&api(401, "Unauthorized")),
        Category::Authentication
    );
    let denied = classify("list x", &api(403, "User \"u\" cannot list x"));
    assert_eq!(denied.category, Category::Rbac);
    assert!(denied.detail.contains("cannot list x"), "{denied:?}");
    assert_eq!(category(&api(404, "not found")), Category::CrdMissing);
    assert_eq!(category(&api(500, "boom")), Category::Other);
    assert_eq!(api_status(&api(403, "")), Some(403));
    assert_eq!(
        api_status(&transport(io::ErrorKind::ConnectionRefused.into())),
        None
    );
}

#[test]
fn certificate_problems_are_tls_and_say_which() {
    use rustls::CertificateError as C;
    let unknown = classify("get", &tls(C::UnknownIssuer));
    assert_eq!(unknown.category, Category::Tls);
    assert!(unknown.detail.contains("unknown CA"), "{unknown:?}");
    let name = classify("get", &tls(C::NotValidForName));
    assert!(
        name.detail.contains("not valid for the server's name"),
        "{name:?}"
    );
    let expired = classify("get", &tls(C::Expired));
    assert!(expired.detail.contains("expired"), "{expired:?}");
    let alert = rustls::Error::AlertReceived(rustls::AlertDescription::HandshakeFailure);
    let alert = transport(io::Error::new(io::ErrorKind::InvalidData, alert));
    assert_eq!(category(&alert), Category::Tls);
}

#[test]
fn connection_failures_are_unreachable() {
    for kind in [
        io::ErrorKind::ConnectionRefused,
        io::ErrorKind::TimedOut,
        io::ErrorKind::ConnectionReset,
        io::ErrorKind::HostUnreachable,
    ] {
        assert_eq!(
            category(&transport(kind.into())),
            Category::Unreachable,
            "{kind:?}"
        );
    }
    let deadline = TimedOut {
        verb: "list",
        resource: "services".into(),
        after: Duration::from_secs(30),
    };
    let late = classify("list services", &kube::Error::Service(Box::new(deadline)));
    assert_eq!(late.category, Category::Unreachable);
    assert!(late.detail.contains("30s"), "{late:?}");
}

#[test]
fn the_outermost_typed_cause_wins_and_the_rest_is_other() {
    // A 401 answer is authentication even if something below says more.
    assert_eq!(category(&api(401, "")), Category::Authentication);
    let odd = transport(io::Error::other("something odd"));
    let problem = classify("get x", &odd);
    assert_eq!(problem.category, Category::Other);
    assert!(problem.detail.starts_with("get x failed"), "{problem:?}");
    assert_eq!(Category::CrdMissing.as_str(), "crd_missing");
    assert_eq!(
        serde_json::to_string(&Category::CrdMissing).expect("json"),
        "\"crd_missing\""
    );
}
