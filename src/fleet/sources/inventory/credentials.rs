//! What fleet's inventory tells of one member, pure: the connection its ClusterProfile gives
//! (server, CA), the token of the Secret named after the profile (the cluster-inventory API's
//! secret-reader convention, read here, never by running a plugin), and the kubeconfig they
//! make, vetted afterwards like every source's. Whatever is missing is told as "awaiting
//! credentials: <what>", never a secret value.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use k8s_openapi::api::core::v1::Secret;
use kube::core::DynamicObject;

use crate::fleet::registry::{MemberSource, Place, source_at, validate_member_name};

/// The data key of the member's token in its credential Secret (the secret-reader plugin's).
pub const TOKEN_KEY: &str = "token";
/// The largest token taken (a service account token is ~1 KiB; an Entra one ~2-3 KiB).
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;
/// The prefix of every refusal that a new object of the inventory can lift.
pub const AWAITING: &str = "awaiting credentials";

/// A ClusterProfile's connection, as far as it goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Connection {
    pub server: String,
    /// `certificate-authority-data` as a kubeconfig holds it: base64 of the PEM.
    pub ca_data: String,
}

/// What one ClusterProfile gives: its connection, or what it lacks / why it is refused.
pub type Profile = Result<Connection, Missing>;
/// What one credential Secret gives: the token, or what it lacks / why it is refused.
pub type Token = Result<String, Missing>;

/// Why a member of the inventory has no kubeconfig: a piece not written yet (lifted by a new
/// object), or one written wrong (refused until it changes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Missing {
    Awaiting(String),
    Refused(String),
}

impl Missing {
    fn told(&self) -> String {
        match self {
            Missing::Awaiting(what) => format!("{AWAITING}: {what}"),
            Missing::Refused(why) => why.clone(),
        }
    }
}

/// The connection a ClusterProfile (`namespace/name`) gives: its first access provider's
/// `cluster` (fleet writes one, `KubeFleet`, once the member agent reported its properties).
pub fn profile_of(profile: &DynamicObject, namespace: &str) -> Profile {
    let name = profile.metadata.name.as_deref().unwrap_or_default();
    let at = format!("ClusterProfile {namespace}/{name}");
    let cluster = profile
        .data
        .pointer("/status/accessProviders")
        .and_then(|p| p.as_array())
        .and_then(|p| p.iter().find_map(|p| p.get("cluster")));
    let Some(cluster) = cluster else {
        return Err(Missing::Awaiting(format!(
            "{at} has no access provider yet"
        )));
    };
    let field = |key: &str| cluster.get(key).and_then(|v| v.as_str());
    connection(
        &at,
        ("server", field("server")),
        (
            "certificate-authority-data",
            field("certificate-authority-data"),
        ),
    )
}

/// fleet's MemberCluster property naming the member's API server (copied into its profile).
pub const ENTRYPOINT_PROPERTY: &str = "k8s.io/cluster-entrypoint";
/// fleet's MemberCluster property holding the member's CA (base64 of PEM; copied into its
/// profile).
pub const CA_PROPERTY: &str = "k8s.io/cluster-certificate-authority-data";

/// The connection a MemberCluster reports itself (`status.properties`, what fleet copies
/// into its ClusterProfile): how a member whose MemberCluster is being deleted is reached once
/// fleet has deleted its profile.
pub fn reported_connection(member_cluster: &DynamicObject) -> Profile {
    let name = member_cluster.metadata.name.as_deref().unwrap_or_default();
    let at = format!("MemberCluster {name}");
    let property = |key: &str| {
        member_cluster
            .data
            .get("status")
            .and_then(|s| s.get("properties"))
            .and_then(|p| p.get(key))
            .and_then(|p| p.get("value"))
            .and_then(|v| v.as_str())
    };
    connection(
        &at,
        (ENTRYPOINT_PROPERTY, property(ENTRYPOINT_PROPERTY)),
        (CA_PROPERTY, property(CA_PROPERTY)),
    )
}

/// A server and a CA as `at` gives them (each with the name it has there): both there, the
/// CA a PEM certificate.
fn connection(
    at: &str,
    (server_key, server): (&str, Option<&str>),
    (ca_key, ca): (&str, Option<&str>),
) -> Profile {
    let server = server
        .filter(|v| !v.is_empty())
        .ok_or_else(|| Missing::Awaiting(format!("{at} has no {server_key} yet")))?;
    let ca = ca
        .filter(|v| !v.is_empty())
        .ok_or_else(|| Missing::Awaiting(format!("{at} has no {ca_key} yet")))?;
    let ca_data = ca_data_of(ca).ok_or_else(|| {
        Missing::Refused(format!(
            "{at}: its {ca_key} is not a PEM certificate: refused"
        ))
    })?;
    Ok(Connection {
        server: server.to_string(),
        ca_data,
    })
}

/// The kubeconfig form (base64 of PEM) of a profile's `certificate-authority-data` as the API
/// returns it (base64 of bytes). fleet stores its property string as those bytes, and that
/// string is itself base64 of the PEM: so the PEM comes after one or two decodings.
fn ca_data_of(field: &str) -> Option<String> {
    let is_pem = |b: &[u8]| b.trim_ascii_start().starts_with(b"-----BEGIN");
    let once = STANDARD.decode(field.trim()).ok()?;
    if is_pem(&once) {
        return Some(field.trim().to_string());
    }
    let inner = std::str::from_utf8(&once).ok()?.trim();
    let twice = STANDARD.decode(inner).ok()?;
    is_pem(&twice).then(|| inner.to_string())
}

/// The token a credential Secret holds (data key [`TOKEN_KEY`], surrounding blanks dropped).
pub fn token_of(secret: &Secret) -> Token {
    let ns = secret.metadata.namespace.as_deref().unwrap_or_default();
    let name = secret.metadata.name.as_deref().unwrap_or_default();
    let at = format!("Secret {ns}/{name}");
    let Some(bytes) = secret.data.as_ref().and_then(|d| d.get(TOKEN_KEY)) else {
        return Err(Missing::Awaiting(format!(
            "{at} has no data key {TOKEN_KEY:?}"
        )));
    };
    if bytes.0.len() > MAX_TOKEN_BYTES {
        return Err(Missing::Refused(format!(
            "{at}: its token is over {MAX_TOKEN_BYTES} bytes: refused"
        )));
    }
    let token = std::str::from_utf8(&bytes.0)
        .map(str::trim)
        .unwrap_or("\u{0}");
    if token.is_empty() || !token.chars().all(|c| c.is_ascii_graphic()) {
        return Err(Missing::Refused(format!(
            "{at}: its token is empty or not printable ASCII: refused"
        )));
    }
    Ok(token.to_string())
}

/// Where the pieces of member `name` are looked for.
pub struct Lookup<'a> {
    pub profile_namespace: &'a str,
    pub secret_namespace: &'a str,
    /// Why no ClusterProfile can be read at all (the hub lacks the CRD, forbids the list).
    pub profiles_unreadable: Option<&'a str>,
}

/// The source of member `name` that fleet lists, from its profile and token when found.
pub fn member_of(
    name: &str,
    profile: Option<&Profile>,
    token: Option<&Token>,
    at: &Lookup<'_>,
) -> MemberSource {
    let place = Place::MemberCluster(name.to_string());
    let kubeconfig = validate_member_name(name)
        .map_err(|e| format!("{place}: {e}"))
        .and_then(|()| {
            let profile = match (profile, at.profiles_unreadable) {
                (Some(p), _) => p.clone(),
                (None, Some(why)) => Err(Missing::Awaiting(why.to_string())),
                (None, None) => Err(Missing::Awaiting(format!(
                    "no ClusterProfile {}/{name}",
                    at.profile_namespace
                ))),
            };
            let token = token.cloned().unwrap_or_else(|| {
                Err(Missing::Awaiting(format!(
                    "no Secret {}/{name}",
                    at.secret_namespace
                )))
            });
            match (profile, token) {
                (Ok(c), Ok(t)) => Ok(kubeconfig(&c, &t)),
                (Err(p), Err(t)) if p == t => Err(p.told()),
                (Err(Missing::Awaiting(p)), Err(Missing::Awaiting(t))) => {
                    Err(format!("{AWAITING}: {p}; {t}"))
                }
                (Err(e @ Missing::Refused(_)), _) | (_, Err(e @ Missing::Refused(_))) => {
                    Err(e.told())
                }
                (Err(e), _) | (_, Err(e)) => Err(e.told()),
            }
        });
    source_at(place, kubeconfig)
}

/// A kubeconfig of one cluster, one token user: the connection and token given, quoted as
/// JSON strings (valid YAML), so that no value can add a field.
fn kubeconfig(c: &Connection, token: &str) -> String {
    let quote = |s: &str| serde_json::Value::from(s).to_string();
    format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: fleet\nclusters:\n- name: fleet\n  cluster:\n    server: {}\n    certificate-authority-data: {}\nusers:\n- name: fleet\n  user:\n    token: {}\ncontexts:\n- name: fleet\n  context:\n    cluster: fleet\n    user: fleet\n",
        quote(&c.server),
        quote(&c.ca_data),
        quote(token)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use std::collections::BTreeMap;

    const PEM: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

    fn profile(cluster: serde_json::Value) -> DynamicObject {
        let mut p: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ClusterProfile",
            "metadata": {"name": "alpha", "namespace": "fleet-system"},
            "status": {"accessProviders": [{"name": "KubeFleet", "cluster": cluster}]}
        }))
        .expect("profile");
        if cluster.is_null() {
            p.data = serde_json::json!({"status": {}});
        }
        p
    }

    fn secret(data: Option<&[u8]>) -> Secret {
        let mut s = Secret::default();
        s.metadata.name = Some("alpha".into());
        s.metadata.namespace = Some("fleetnet-system".into());
        s.data = data.map(|d| BTreeMap::from([(TOKEN_KEY.into(), ByteString(d.to_vec()))]));
        s
    }

    const AT: Lookup<'static> = Lookup {
        profile_namespace: "fleet-system",
        secret_namespace: "fleetnet-system",
        profiles_unreadable: None,
    };

    #[test]
    fn the_ca_is_taken_after_one_or_two_decodings_and_refused_otherwise() {
        let once = STANDARD.encode(PEM);
        let twice = STANDARD.encode(&once);
        let server = "https://alpha.example:443";
        for field in [&twice, &once] {
            let c = profile_of(
                &profile(
                    serde_json::json!({"server": server, "certificate-authority-data": field}),
                ),
                "fleet-system",
            )
            .expect("connection");
            assert_eq!(c.ca_data, once);
            assert_eq!(c.server, server);
        }
        let junk = STANDARD.encode(STANDARD.encode("not a certificate"));
        let refused = profile_of(
            &profile(serde_json::json!({"server": server, "certificate-authority-data": junk})),
            "fleet-system",
        );
        assert!(
            matches!(&refused, Err(Missing::Refused(e)) if e.contains("ClusterProfile fleet-system/alpha: its certificate-authority-data is not a PEM")),
            "{refused:?}"
        );
    }

    #[test]
    fn a_member_without_its_pieces_awaits_them_naming_what_is_missing() {
        let told = |p: Option<&Profile>, t: Option<&Token>, at: &Lookup<'_>| {
            member_of("alpha", p, t, at)
                .kubeconfig
                .expect_err("awaiting")
        };
        assert_eq!(
            told(None, None, &AT),
            "awaiting credentials: no ClusterProfile fleet-system/alpha; no Secret fleetnet-system/alpha"
        );
        let no_crd = Lookup {
            profiles_unreadable: Some("the hub does not serve ClusterProfiles"),
            ..AT
        };
        let e = told(None, Some(&token_of(&secret(Some(b"t")))), &no_crd);
        assert_eq!(
            e,
            "awaiting credentials: the hub does not serve ClusterProfiles"
        );
        let empty = profile_of(&profile(serde_json::Value::Null), "fleet-system");
        assert_eq!(
            told(Some(&empty), Some(&token_of(&secret(Some(b"t")))), &AT),
            "awaiting credentials: ClusterProfile fleet-system/alpha has no access provider yet"
        );
        let no_ca = profile_of(
            &profile(serde_json::json!({"server": "https://a"})),
            "fleet-system",
        );
        let e = told(Some(&no_ca), Some(&token_of(&secret(None))), &AT);
        assert!(e.contains("has no certificate-authority-data yet; Secret fleetnet-system/alpha has no data key \"token\""), "{e}");
    }

    #[test]
    fn a_bad_token_is_refused_never_shown() {
        for data in [
            &b"  "[..],
            b"SECRET\x01",
            &[0xff, 0xfe],
            &vec![b'a'; MAX_TOKEN_BYTES + 1],
        ] {
            let e = token_of(&secret(Some(data))).expect_err("refused");
            assert!(
                matches!(&e, Missing::Refused(t) if !t.contains("SECRET")),
                "{e:?}"
            );
        }
        assert_eq!(token_of(&secret(Some(b"abc.def\n"))), Ok("abc.def".into()));
    }

    #[test]
    fn profile_and_token_make_a_kubeconfig_that_rotates_with_the_token_alone() {
        let c = Connection {
            server: "https://alpha.example".into(),
            ca_data: STANDARD.encode(PEM),
        };
        let one = member_of("alpha", Some(&Ok(c.clone())), Some(&Ok("t1".into())), &AT);
        let two = member_of("alpha", Some(&Ok(c)), Some(&Ok("t2".into())), &AT);
        let text = one.kubeconfig.as_deref().expect("kubeconfig");
        assert!(
            text.contains("token: \"t1\"") && text.contains("server: \"https://alpha.example\""),
            "{text}"
        );
        assert_eq!(
            one.place, two.place,
            "the same place: a rotation, not a move"
        );
        assert_ne!(one.hash, two.hash);
        assert_eq!(one.place.to_string(), "MemberCluster alpha");
        let bad = member_of("Alpha_1", None, None, &AT)
            .kubeconfig
            .expect_err("bad name");
        assert!(bad.contains("invalid member name"), "{bad}");
    }
}
