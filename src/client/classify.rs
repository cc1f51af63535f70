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

    #[test]
    fn verbs_resources_and_repeats() {
        let cases = "
            GET /api/v1/namespaces/ns/services/web get services Always
            GET /api/v1/services?limit=500 list services Always
            GET /api/v1/services?watch=true&resourceVersion=1 watch services Never
            PATCH /apis/networking.fleet.azure.com/v1beta1/namespaces/ns/serviceexports/web/status patch serviceexports/status Throttled
            POST /apis/networking.fleet.azure.com/v1alpha1/namespaces/m/internalserviceexports create internalserviceexports Throttled
            DELETE /apis/networking.fleet.azure.com/v1alpha1/namespaces/x/internalserviceexports/y delete internalserviceexports Throttled
            PUT /apis/coordination.k8s.io/v1/namespaces/x/leases/l update leases Throttled
            GET /api/v1/namespaces/fleet-member-a get namespaces Always
            GET /api/v1/namespaces list namespaces Always
            GET /readyz get - Always";
        for case in cases.trim().lines() {
            let [method, uri, verb, resource, repeat] =
                case.split_whitespace().collect::<Vec<_>>()[..]
            else {
                panic!("{case}");
            };
            let method = Method::from_bytes(method.as_bytes()).expect("method");
            let kind = classify(&method, &uri.parse().expect("uri"));
            assert_eq!(
                (kind.verb, kind.resource.as_str()),
                (verb, resource),
                "{uri}"
            );
            assert_eq!(format!("{:?}", kind.repeat), repeat, "{uri}");
            assert_eq!(kind.is_write(), !matches!(verb, "get" | "list" | "watch"));
        }
    }
}
