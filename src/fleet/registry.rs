//! Which members the kubeconfig directory declares: one file per member, named after it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// One member as declared by a file of the kubeconfig directory.
#[derive(Debug, Clone, PartialEq, Eq)]
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

/// A DNS-1123 label: 1–63 lower-case alphanumerics or '-', starting and ending alphanumeric.
pub fn validate_member_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid member name {name:?}: must be a DNS-1123 label (lower-case letters, digits and '-', at most 63, starting and ending with a letter or digit)"
        ))
    }
}

/// Reads the directory. Errors of one file are that member's error; an unreadable directory
/// is the caller's (it keeps the members it has).
pub fn scan(dir: &Path) -> std::io::Result<BTreeMap<String, MemberSource>> {
    let mut members = BTreeMap::new();
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
        let kubeconfig = validate_member_name(&name).and_then(|()| {
            std::fs::read_to_string(&path).map_err(|e| {
                unreadable = true;
                format!("cannot read {}: {e}", path.display())
            })
        });
        let hash = match &kubeconfig {
            Ok(text) => hex(&Sha256::digest(text.as_bytes())),
            Err(e) => hex(&Sha256::digest(e.as_bytes())),
        };
        members.insert(
            name,
            MemberSource {
                path,
                kubeconfig,
                hash,
                unreadable,
            },
        );
    }
    Ok(members)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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
        std::fs::write(p.join("alpha.yaml"), "a").expect("write");
        std::fs::write(p.join("Bad_Name.yaml"), "b").expect("write");
        std::fs::write(p.join("README.md"), "docs").expect("write");
        std::fs::write(p.join("example.yaml.sample"), "x").expect("write");
        std::fs::write(p.join(".hidden"), "x").expect("write");
        // A mounted Secret: data in a timestamped dir, `..data` link, file links.
        std::fs::create_dir(p.join("..2026_12_02")).expect("mkdir");
        std::fs::write(p.join("..2026_12_02/beta.yaml"), "b1").expect("write");
        std::os::unix::fs::symlink("..2026_12_02", p.join("..data")).expect("link");
        std::os::unix::fs::symlink("..data/beta.yaml", p.join("beta.yaml")).expect("link");
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
        std::fs::create_dir(p.join("..2026_12_03")).expect("mkdir");
        std::fs::write(p.join("..2026_12_03/beta.yaml"), "b2").expect("write");
        std::os::unix::fs::symlink("..2026_12_03", p.join("..data_tmp")).expect("link");
        std::fs::rename(p.join("..data_tmp"), p.join("..data")).expect("swap");
        let members = scan(p).expect("scan");
        assert_eq!(members["beta"].kubeconfig.as_deref(), Ok("b2"));
        assert_ne!(members["beta"].hash, before);
    }
}
