//! `fleetnet-hub register` / `unregister`: a member's kubeconfig, vetted as `run` vets it, into
//! (or out of) the labelled hub Secret the Secrets source reads ([`super::secrets`]).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams};

use super::secrets::{KUBECONFIG_KEY, MEMBER_LABEL, MEMBER_NAME_LABEL, member_of, selector};
use crate::fleet::registry::{MAX_KUBECONFIG_BYTES, validate_member_name};
use crate::fleet::vet::{self, TrustPolicy};

/// Who writes the registration Secrets (server-side apply).
const FIELD_MANAGER: &str = "fleetnet-hub-register";

/// The name of the Secret `register` writes for `member`: prefixed, so that no member name
/// can be the name of another Secret of the namespace (Helm's, the cleanup records).
pub fn secret_name(member: &str) -> String {
    format!("fleetnet-member-{member}")
}

/// Reads `file` (a regular file within [`MAX_KUBECONFIG_BYTES`]) and vets it for member
/// `member` as `run` would: what `run` refuses is refused here with the same redacted reason.
pub fn read_and_vet(member: &str, file: &Path, trust: TrustPolicy) -> Result<String, String> {
    validate_member_name(member)?;
    let shown = file.display();
    let opened = std::fs::File::open(file).map_err(|e| format!("cannot read {shown}: {e}"))?;
    let meta = opened
        .metadata()
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("{shown} is not a regular file"));
    }
    let mut bytes = vec![];
    opened
        .take(MAX_KUBECONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    if bytes.len() as u64 > MAX_KUBECONFIG_BYTES {
        return Err(format!(
            "{shown} is over the {MAX_KUBECONFIG_BYTES}-byte limit of a member kubeconfig: refused"
        ));
    }
    let text = String::from_utf8(bytes).map_err(|_| format!("{shown} is not UTF-8 text"))?;
    vet::vet(&text, &shown.to_string(), trust)?;
    Ok(text)
}

/// The Secret that registers `member` in `namespace` with `kubeconfig`.
pub fn secret_for(member: &str, namespace: &str, kubeconfig: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(secret_name(member)),
            namespace: Some(namespace.to_string()),
            labels: Some(BTreeMap::from([
                (MEMBER_LABEL.to_string(), "true".to_string()),
                (MEMBER_NAME_LABEL.to_string(), member.to_string()),
            ])),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            KUBECONFIG_KEY.to_string(),
            ByteString(kubeconfig.as_bytes().to_vec()),
        )])),
        type_: Some("Opaque".to_string()),
        ..Secret::default()
    }
}

/// `secret` as YAML without its credentials (`--dry-run`): the kubeconfig is replaced by its
/// size.
pub fn redacted_yaml(secret: &Secret) -> Result<String, String> {
    let mut value = serde_json::to_value(secret).map_err(|e| e.to_string())?;
    value["apiVersion"] = "v1".into();
    value["kind"] = "Secret".into();
    let len = secret
        .data
        .as_ref()
        .and_then(|d| d.get(KUBECONFIG_KEY))
        .map_or(0, |b| b.0.len());
    if let Some(data) = value.get_mut("data").and_then(|d| d.as_object_mut()) {
        data.insert(
            KUBECONFIG_KEY.to_string(),
            format!("<redacted: {len} bytes>").into(),
        );
    }
    serde_saphyr::to_string(&value).map_err(|e| e.to_string())
}

/// Creates or updates the Secret of `secret`'s member (server-side apply). Refuses to take
/// over a Secret of that name that is not a member Secret, and to add a second Secret for a
/// member another Secret already declares (the member would be refused, both named).
pub async fn register(hub: kube::Client, secret: &Secret) -> Result<(), String> {
    let namespace = secret.metadata.namespace.clone().unwrap_or_default();
    let name = secret.metadata.name.clone().unwrap_or_default();
    let api: Api<Secret> = Api::namespaced(hub, &namespace);
    let member = member_of(secret).map(|(m, _)| m).unwrap_or_default();
    if let Some(existing) = api.get_opt(&name).await.map_err(|e| e.to_string())?
        && member_of(&existing).is_none_or(|_| !is_member_secret(&existing))
    {
        return Err(format!(
            "Secret {namespace}/{name} exists and is not a member Secret (no {MEMBER_LABEL}: \"true\"): not overwritten"
        ));
    }
    for other in declaring(&api, &member).await? {
        if other != name {
            return Err(format!(
                "Secret {namespace}/{other} already declares member {member:?}: unregister it first"
            ));
        }
    }
    let params = PatchParams::apply(FIELD_MANAGER).force();
    api.patch(&name, &params, &Patch::Apply(secret))
        .await
        .map_err(|e| format!("cannot apply Secret {namespace}/{name}: {e}"))?;
    Ok(())
}

/// Deletes every member Secret of `namespace` that declares `member`; the names deleted.
pub async fn unregister(
    hub: kube::Client,
    namespace: &str,
    member: &str,
) -> Result<Vec<String>, String> {
    let api: Api<Secret> = Api::namespaced(hub, namespace);
    let names = declaring(&api, member).await?;
    if names.is_empty() {
        return Err(format!(
            "no member Secret in namespace {namespace} declares member {member:?}"
        ));
    }
    for name in &names {
        api.delete(name, &DeleteParams::default())
            .await
            .map_err(|e| format!("cannot delete Secret {namespace}/{name}: {e}"))?;
    }
    Ok(names)
}

/// What `fleetnet-hub register` was asked.
pub struct Request<'a> {
    pub member: &'a str,
    pub kubeconfig: &'a Path,
    pub namespace: &'a str,
    /// The hub's kubeconfig; `None`: the usual one (`KUBECONFIG`, `~/.kube/config`, in-cluster).
    pub hub_kubeconfig: Option<&'a Path>,
    pub trust: TrustPolicy,
    /// Print the Secret (without credentials), write nothing.
    pub dry_run: bool,
}

/// `fleetnet-hub register`: vets the kubeconfig, then writes (or, dry, prints) the Secret.
pub async fn run(request: Request<'_>) -> Result<(), String> {
    let kubeconfig = read_and_vet(request.member, request.kubeconfig, request.trust)?;
    let secret = secret_for(request.member, request.namespace, &kubeconfig);
    if request.dry_run {
        print!("{}", redacted_yaml(&secret)?);
        return Ok(());
    }
    register(hub(request.hub_kubeconfig).await?, &secret).await?;
    println!(
        "member {:?} registered: Secret {}/{}",
        request.member,
        request.namespace,
        secret_name(request.member)
    );
    Ok(())
}

/// `fleetnet-hub unregister`: deletes the member Secrets that declare `member`.
pub async fn run_unregister(
    member: &str,
    namespace: &str,
    hub_kubeconfig: Option<&Path>,
) -> Result<(), String> {
    for name in unregister(hub(hub_kubeconfig).await?, namespace, member).await? {
        println!("member {member:?} unregistered: Secret {namespace}/{name} deleted");
    }
    Ok(())
}

/// A client of the hub from `kubeconfig`, else the usual configuration.
async fn hub(kubeconfig: Option<&Path>) -> Result<kube::Client, String> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| format!("hub kubeconfig {}: {e}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .map_err(|e| format!("hub kubeconfig {}: {e}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| format!("no hub configuration: {e}"))?,
    };
    kube::Client::try_from(config).map_err(|e| format!("hub client: {e}"))
}

fn is_member_secret(secret: &Secret) -> bool {
    secret
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(MEMBER_LABEL))
        .is_some_and(|v| v == "true")
}

/// The member Secrets that declare `member`, by name.
async fn declaring(api: &Api<Secret>, member: &str) -> Result<Vec<String>, String> {
    let list = api
        .list(&ListParams::default().labels(&selector()))
        .await
        .map_err(|e| format!("cannot list the member Secrets: {e}"))?;
    Ok(list
        .items
        .iter()
        .filter(|s| member_of(s).is_some_and(|(m, _)| m == member))
        .filter_map(|s| s.metadata.name.clone())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBECONFIG: &str = "apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\nclusters:\n- name: k\n  cluster:\n    server: https://10.0.0.1\nusers:\n- name: u\n  user:\n    token: SECRET-TOKEN\n";

    #[test]
    fn the_registered_secret_declares_its_member_and_prints_without_credentials() {
        let secret = secret_for("alpha", "fleetnet-system", KUBECONFIG);
        let (member, source) = member_of(&secret).expect("a member Secret");
        assert_eq!(member, "alpha");
        assert_eq!(source.kubeconfig.as_deref(), Ok(KUBECONFIG));
        assert!(is_member_secret(&secret));
        let shown = redacted_yaml(&secret).expect("yaml");
        assert!(!shown.contains("SECRET-TOKEN"), "{shown}");
        assert!(
            shown.contains(&format!("<redacted: {} bytes>", KUBECONFIG.len()))
                && shown.contains("fleetnet-member-alpha")
                && shown.contains("kind: Secret"),
            "{shown}"
        );
    }

    #[test]
    fn what_run_refuses_register_refuses_with_the_same_reason() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("alpha.yaml");
        let exec = KUBECONFIG.replace(
            "    token: SECRET-TOKEN\n",
            "    exec:\n      command: /bin/SECRET-PLUGIN\n      apiVersion: client.authentication.k8s.io/v1\n",
        );
        std::fs::write(&file, &exec).expect("write");
        let e = read_and_vet("alpha", &file, TrustPolicy::default()).expect_err("refused");
        let run = vet::vet(&exec, &file.display().to_string(), TrustPolicy::default())
            .expect_err("run refuses it too");
        assert_eq!(e, run);
        assert!(!e.contains("SECRET"), "{e}");
        std::fs::write(&file, KUBECONFIG).expect("write");
        assert_eq!(
            read_and_vet("alpha", &file, TrustPolicy::default()).as_deref(),
            Ok(KUBECONFIG)
        );
        assert!(read_and_vet("Alpha", &file, TrustPolicy::default()).is_err());
    }
}
