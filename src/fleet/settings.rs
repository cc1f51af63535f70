//! Per-member settings: the `--member-config` file (`members: {<name>: MemberSettings}`), read at
//! start and again at every rescan of the members.

use std::collections::BTreeMap;
use std::path::PathBuf;

use parking_lot::RwLock;
use serde::Deserialize;

/// Per-member settings (`--member-config`).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MemberSettings {
    pub azure_subscription_id: Option<String>,
    pub azure_resource_group: Option<String>,
    pub trace_sampling_ratio: Option<f64>,
    /// Resource groups (besides `azureResourceGroup`) whose public IPs a Service of this member
    /// may name with its `azure-load-balancer-resource-group` annotation; any other is not
    /// looked up.
    #[serde(default)]
    pub azure_resource_groups: Vec<String>,
    /// The member's namespace in the hub when it is not `<prefix><member>` (the reference
    /// agents' hub namespace of a member registered under another name).
    pub hub_namespace: Option<String>,
}

/// The `--member-config` file: `members: { <name>: MemberSettings }`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct MemberConfigFile {
    #[serde(default)]
    pub members: BTreeMap<String, MemberSettings>,
}

impl MemberConfigFile {
    /// Reads and parses the file, naming it in errors.
    pub fn load(path: &std::path::Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read member config {}: {e}", path.display()))?;
        // By line, column and field path: the parser's message quotes the file.
        serde_saphyr::from_str::<Option<Self>>(&text)
            .map(Option::unwrap_or_default)
            .map_err(|e| {
                let known = |key: &str| {
                    matches!(
                        key,
                        "members"
                            | "azureSubscriptionId"
                            | "azureResourceGroup"
                            | "azureResourceGroups"
                            | "traceSamplingRatio"
                            | "hubNamespace"
                    ) || super::registry::validate_member_name(key).is_ok()
                };
                format!(
                    "invalid member config {}: {}",
                    path.display(),
                    super::vet::parse_error::yaml_error(&text, &e, &known)
                )
            })
    }
}

/// The `--member-config` file as last read well: read at start (an invalid file fails it) and
/// again at every rescan of the members ([`MemberConfig::reload`]), so a member added or
/// changed at runtime gets its settings without a restart; an edit that cannot be read or
/// parsed keeps the last good settings (and says so in the log, once per rescan). Without a
/// file every member has the defaults.
#[derive(Debug, Default)]
pub struct MemberConfig {
    path: Option<PathBuf>,
    last_good: RwLock<MemberConfigFile>,
}

impl MemberConfig {
    /// Reads the file at `path`, if any.
    pub fn load(path: Option<PathBuf>) -> Result<Self, String> {
        let file = match &path {
            Some(path) => MemberConfigFile::load(path)?,
            None => MemberConfigFile::default(),
        };
        Ok(Self {
            path,
            last_good: RwLock::new(file),
        })
    }

    /// Reads the file again; keeps the last good settings when it cannot.
    pub fn reload(&self) {
        let Some(path) = &self.path else { return };
        match MemberConfigFile::load(path) {
            Ok(file) => *self.last_good.write() = file,
            Err(e) => tracing::warn!(error = %e, "keeping the last valid member config"),
        }
    }

    /// Member `name`'s settings (the defaults when the file does not name it).
    pub fn member(&self, name: &str) -> MemberSettings {
        self.last_good
            .read()
            .members
            .get(name)
            .cloned()
            .unwrap_or_default()
    }

    /// Every member the file names, with its settings.
    pub fn members(&self) -> BTreeMap<String, MemberSettings> {
        self.last_good.read().members.clone()
    }
}
