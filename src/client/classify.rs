//! Which Kubernetes verb and resource a request is, from its method and path, and so whether
//! it may be sent again: watches never here (the watcher resumes them), reads after a 429, 5xx
//! or no answer, writes after a 429 only (a write may have happened; the reconcile re-reads).

use http::{Method, Uri};

use crate::policy::{Repeat, RequestKind};

/// Classifies `/api/v1/…` and `/apis/<group>/<version>/…` requests; anything else
/// (`/readyz`, `/version`, discovery) is `get` of resource `-`.
pub fn classify(method: &Method, uri: &Uri) -> RequestKind {
    let segments: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
    let rest = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => &[][..],
    };
    // namespaces/<ns>/<resource>/... — but `namespaces` and `namespaces/<name>` are themselves the resource.
    let rest = match rest {
        ["namespaces", _ns, tail @ ..] if !tail.is_empty() => tail,
        other => other,
    };
    let (resource, named) = match rest {
        [] => ("-".to_string(), true),
        [resource] => (resource.to_string(), false),
        [resource, _name] => (resource.to_string(), true),
        [resource, _name, sub, ..] => (format!("{resource}/{sub}"), true),
    };
    let watch = uri
        .query()
        .is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
    let verb = match *method {
        Method::GET if watch => "watch",
        Method::GET if named => "get",
        Method::GET => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if named => "delete",
        Method::DELETE => "deletecollection",
        _ => "other",
    };
    let repeat = match verb {
        "watch" => Repeat::Never,
        "get" | "list" => Repeat::Always,
        _ => Repeat::Throttled,
    };
    RequestKind {
        verb,
        resource,
        repeat,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(method: Method, uri: &str) -> (&'static str, String) {
        let k = classify(&method, &uri.parse().expect("uri"));
        (k.verb, k.resource)
    }

    #[test]
    fn verbs_and_resources() {
        let cases = [
            (
                Method::GET,
                "/api/v1/namespaces/ns/services/web",
                "get",
                "services",
            ),
            (
                Method::GET,
                "/api/v1/services?limit=500",
                "list",
                "services",
            ),
            (
                Method::GET,
                "/api/v1/services?watch=true&resourceVersion=1",
                "watch",
                "services",
            ),
            (
                Method::PATCH,
                "/apis/networking.fleet.azure.com/v1beta1/namespaces/ns/serviceexports/web/status",
                "patch",
                "serviceexports/status",
            ),
            (
                Method::POST,
                "/apis/networking.fleet.azure.com/v1alpha1/namespaces/fleet-member-a/internalserviceexports",
                "create",
                "internalserviceexports",
            ),
            (
                Method::DELETE,
                "/apis/networking.fleet.azure.com/v1alpha1/namespaces/x/internalserviceexports/y",
                "delete",
                "internalserviceexports",
            ),
            (
                Method::PUT,
                "/apis/coordination.k8s.io/v1/namespaces/x/leases/l",
                "update",
                "leases",
            ),
            (
                Method::GET,
                "/api/v1/namespaces/fleet-member-a",
                "get",
                "namespaces",
            ),
            (Method::GET, "/api/v1/namespaces", "list", "namespaces"),
            (Method::GET, "/readyz", "get", "-"),
        ];
        for (m, uri, verb, resource) in cases {
            assert_eq!(kind(m, uri), (verb, resource.to_string()), "{uri}");
        }
    }

    #[test]
    fn writes() {
        assert!(
            classify(
                &Method::PATCH,
                &"/api/v1/namespaces/a/services/b".parse().expect("uri")
            )
            .is_write()
        );
        assert!(
            !classify(
                &Method::GET,
                &"/api/v1/namespaces/a/services/b".parse().expect("uri")
            )
            .is_write()
        );
    }
}
