//! Which members the kubeconfig directory declares: one file per member, named after it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// One member as declared by a file of the kubeconfig directory.
#[derive(Clone, PartialEq, Eq)]
pub struct MemberSource {
    pub path: PathBuf,
    /// The file's content, when it could be read and the name is valid.
    pub kubeconfig: Result<String, String>,
    /// SHA-256 of the content (hex); a new hash is a new engagement.
    pub hash: String,
    /// The file exists but could not be read this time: a member already running from it keeps
    /// running (a transient I/O error must not tear down a healthy member).
    pub unreadable: bool,
}

/// Files that are not members: hidden files (this covers the `..data` links of a mounted
/// Secret), documentation, examples and editor leftovers.
fn is_member_file(file_name: &str) -> bool {
    !(file_name.starts_with('.')
        || file_name.eq_ignore_ascii_case("README.md")
        || file_name.ends_with(".sample")
        || file_name.ends_with('~')
        || file_name.ends_with(".swp")
        || file_name.ends_with(".tmp-write"))
}

/// The member name of a file: its name without the extension (`alpha.yaml` → `alpha`).
pub fn member_name(file_name: &str) -> &str {
    match file_name.rsplit_once('.') {
        Some((stem, ext))
            if !stem.is_empty()
                && matches!(ext, "yaml" | "yml" | "kubeconfig" | "conf" | "json") =>
        {
            stem
        }
        _ => file_name,
    }
}

/// The hub namespace prefix fleet-networking uses: member `m`'s exports go to `fleet-member-m`.
pub const DEFAULT_NAMESPACE_PREFIX: &str = "fleet-member-";

/// At most `max` lower-case letters, digits and '-', not starting with '-'.
fn label_like(s: &str, max: usize) -> bool {
    s.len() <= max
        && !s.starts_with('-')
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// A DNS-1123 label: 1–63 lower-case alphanumerics or '-', starting and ending alphanumeric.
pub fn validate_member_name(name: &str) -> Result<(), String> {
    (!name.is_empty() && !name.ends_with('-') && label_like(name, 63))
        .then_some(())
        .ok_or_else(|| format!(
            "invalid member name {name:?}: must be a DNS-1123 label (lower-case letters, digits and '-', at most 63, starting and ending with a letter or digit)"
        ))
}

/// `--hub-namespace-prefix`: empty, or the start of a DNS-1123 label (lower-case letters,
/// digits and '-', starting with a letter or digit) that leaves room for a member name.
pub fn validate_namespace_prefix(prefix: &str) -> Result<(), String> {
    label_like(prefix, 62).then_some(()).ok_or_else(|| format!(
        "invalid hub namespace prefix {prefix:?}: lower-case letters, digits and '-', not starting with '-', at most 62 characters"
    ))
}

/// The hub namespace of `member`: `<prefix><member>`, which must be a valid namespace name
/// (a DNS-1123 label of at most 63 characters).
pub fn hub_namespace(prefix: &str, member: &str) -> Result<String, String> {
    let ns = format!("{prefix}{member}");
    if ns.len() > 63 {
        return Err(format!(
            "hub namespace {ns:?} of member {member:?} is longer than 63 characters: shorten the member name or --hub-namespace-prefix"
        ));
    }
    validate_member_name(&ns).map_err(|e| format!("hub namespace of member {member:?}: {e}"))?;
    Ok(ns)
}

/// Whether `path` (a file of `dir`) resolves inside `dir`: a mounted Secret's links do, a link
/// to the pod's own secrets does not.
fn resolves_inside(dir: &Path, path: &Path) -> Result<(), String> {
    let inside = std::fs::canonicalize(dir)
        .and_then(|d| std::fs::canonicalize(path).map(|p| p.starts_with(d)))
        .map_err(|e| format!("cannot resolve {}: {e}", path.display()))?;
    if inside {
        Ok(())
    } else {
        Err(format!(
            "{} is a symlink to a file outside the kubeconfig directory: refused",
            path.display()
        ))
    }
}

/// Reads the directory. Errors of one file are that member's error; an unreadable directory
/// is the caller's (it keeps the members it has). Two files naming one member (`a.yaml`,
/// `a.yml`) refuse that member, naming both files.
pub fn scan(dir: &Path) -> std::io::Result<BTreeMap<String, MemberSource>> {
    let mut members: BTreeMap<String, MemberSource> = BTreeMap::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let file_name = entry.file_name().to_string_lossy().into_owned();
        if !is_member_file(&file_name) {
            continue;
        }
        let path = entry.path();
        // `metadata` follows symlinks: a Secret's `alpha.yaml -> ..data/alpha.yaml` is a file.
        match std::fs::metadata(&path) {
            Ok(m) if m.is_dir() => continue,
            _ => {}
        }
        let name = member_name(&file_name).to_string();
        let mut unreadable = false;
        let is_link = std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink());
        let kubeconfig = validate_member_name(&name)
            .and_then(|()| {
                if is_link {
                    resolves_inside(dir, &path)
                } else {
                    Ok(())
                }
            })
            .and_then(|()| {
                std::fs::read_to_string(&path).map_err(|e| {
                    unreadable = true;
                    format!("cannot read {}: {e}", path.display())
                })
            });
        let hash = match &kubeconfig {
            Ok(text) => hex(&Sha256::digest(text.as_bytes())),
            Err(e) => hex(&Sha256::digest(e.as_bytes())),
        };
        let source = MemberSource {
            path,
            kubeconfig,
            hash,
            unreadable,
        };
        match members.remove(&name) {
            None => {
                members.insert(name, source);
            }
            Some(first) => {
                // Sorted, so the error (and its hash) is the same whatever order the directory lists.
                let mut paths = [first.path, source.path];
                paths.sort();
                let e = format!(
                    "files {} and {} both declare member {name:?}: remove or rename one",
                    paths[0].display(),
                    paths[1].display()
                );
                let [path, _] = paths;
                members.insert(
                    name,
                    MemberSource {
                        hash: hex(&Sha256::digest(e.as_bytes())),
                        kubeconfig: Err(e),
                        unreadable: false,
                        path,
                    },
                );
            }
        }
    }
    Ok(members)
}

/// Never the kubeconfig's content: it holds credentials.
impl std::fmt::Debug for MemberSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberSource")
            .field("path", &self.path)
            .field(
                "kubeconfig",
                &self
                    .kubeconfig
                    .as_ref()
                    .map(|k| format!("<{} bytes>", k.len())),
            )
            .field("hash", &self.hash)
            .field("unreadable", &self.unreadable)
            .finish()
    }
}

/// Lower-case hex of `bytes`.
pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes each `(name, content)` below `dir`, creating its folder.
    fn write(dir: &Path, files: &[(&str, &str)]) {
        for (name, content) in files {
            let path = dir.join(name);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, content).expect("write");
        }
    }

    /// Creates each `(name, target)` symlink in `dir`.
    fn link(dir: &Path, links: &[(&str, &str)]) {
        for (name, target) in links {
            std::os::unix::fs::symlink(target, dir.join(name)).expect("link");
        }
    }

    #[test]
    fn names() {
        assert_eq!(member_name("alpha.yaml"), "alpha");
        assert_eq!(member_name("alpha.kubeconfig"), "alpha");
        assert_eq!(member_name("alpha"), "alpha");
        assert_eq!(member_name("a.b.yaml"), "a.b");
        assert!(validate_member_name("member-1").is_ok());
        for bad in ["", "-a", "a-", "Alpha", "a_b", "a.b", &"x".repeat(64)] {
            assert!(validate_member_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn scan_reads_members_and_skips_the_rest() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path();
        write(
            p,
            &[
                ("alpha.yaml", "a"),
                ("Bad_Name.yaml", "b"),
                ("README.md", "docs"),
                ("example.yaml.sample", "x"),
                (".hidden", "x"),
                // A mounted Secret: data in a timestamped dir, `..data` link, file links.
                ("..2026_12_02/beta.yaml", "b1"),
            ],
        );
        link(
            p,
            &[
                ("..data", "..2026_12_02"),
                ("beta.yaml", "..data/beta.yaml"),
            ],
        );
        let members = scan(p).expect("scan");
        assert_eq!(
            members.keys().collect::<Vec<_>>(),
            vec!["Bad_Name", "alpha", "beta"]
        );
        assert_eq!(members["alpha"].kubeconfig.as_deref(), Ok("a"));
        assert_eq!(members["beta"].kubeconfig.as_deref(), Ok("b1"));
        assert!(
            members["Bad_Name"]
                .kubeconfig
                .as_ref()
                .is_err_and(|e| e.contains("DNS-1123"))
        );

        // Atomic swap of the Secret's data: same name, new content, new hash.
        let before = members["beta"].hash.clone();
        write(p, &[("..2026_12_03/beta.yaml", "b2")]);
        link(p, &[("..data_tmp", "..2026_12_03")]);
        std::fs::rename(p.join("..data_tmp"), p.join("..data")).expect("swap");
        let members = scan(p).expect("scan");
        assert_eq!(members["beta"].kubeconfig.as_deref(), Ok("b2"));
        assert_ne!(members["beta"].hash, before);
    }

    #[test]
    fn two_files_for_one_member_refuse_it_naming_both() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path();
        write(
            p,
            &[("alpha.yaml", "a"), ("alpha.yml", "b"), ("gamma.yaml", "g")],
        );
        let members = scan(p).expect("scan");
        let e = members["alpha"].kubeconfig.as_ref().expect_err("refused");
        assert!(e.contains("alpha.yaml") && e.contains("alpha.yml"), "{e}");
        assert_eq!(
            members["gamma"].kubeconfig.as_deref(),
            Ok("g"),
            "others unaffected"
        );
        assert_eq!(scan(p).expect("scan")["alpha"].hash, members["alpha"].hash);
    }

    #[test]
    fn symlinks_are_followed_only_inside_the_directory() {
        let outside = tempfile::tempdir().expect("tempdir");
        write(outside.path(), &[("token", "hub-sa-token")]);
        let token = outside.path().join("token");
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path();
        write(p, &[("..2026_12_03/good.yaml", "g")]);
        link(
            p,
            &[
                ("evil.yaml", token.to_str().expect("utf-8")),
                ("..data", "..2026_12_03"),
                ("good.yaml", "..data/good.yaml"),
            ],
        );
        let members = scan(p).expect("scan");
        let e = members["evil"].kubeconfig.as_ref().expect_err("refused");
        assert!(e.contains("outside the kubeconfig directory"), "{e}");
        assert!(!e.contains("hub-sa-token"));
        assert!(
            !members["evil"].unreadable,
            "a refusal, not a passing read error"
        );
        assert_eq!(members["good"].kubeconfig.as_deref(), Ok("g"));
    }

    #[test]
    fn prefix_and_hub_namespace_names() {
        assert!(validate_namespace_prefix(DEFAULT_NAMESPACE_PREFIX).is_ok());
        assert!(validate_namespace_prefix("").is_ok());
        for bad in ["Fleet-", "-x", "a_b-", "a.b-", &"x".repeat(63)] {
            assert!(validate_namespace_prefix(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            hub_namespace(DEFAULT_NAMESPACE_PREFIX, "m1").as_deref(),
            Ok("fleet-member-m1")
        );
        let long = "m".repeat(51);
        assert!(
            hub_namespace(DEFAULT_NAMESPACE_PREFIX, &long)
                .is_err_and(|e| e.contains("longer than 63"))
        );
        assert!(hub_namespace(DEFAULT_NAMESPACE_PREFIX, &"m".repeat(50)).is_ok());
    }
}
