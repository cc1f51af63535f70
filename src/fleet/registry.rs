//! Which members the kubeconfig directory declares: one file per member, named after it; and
//! what every source of members produces ([`MemberSource`], declared at a [`Place`]).

use std::collections::BTreeMap;
use std::path::Path;

use sha2::{Digest, Sha256};

mod names;
mod place;
mod read;

pub use names::{
    DEFAULT_NAMESPACE_PREFIX, hub_namespace, hub_namespaces, namespace_of, validate_member_name,
    validate_namespace_prefix,
};
pub use place::{Place, declared_twice};
pub use read::MAX_KUBECONFIG_BYTES;
use read::{Unread, read_member};

/// One member as declared by a source: a file of the kubeconfig directory, a Secret.
#[derive(Clone, PartialEq, Eq)]
pub struct MemberSource {
    /// Where it is declared (named in logs, errors and on `/members`).
    pub place: Place,
    /// Its kubeconfig, when it could be read and the name is valid.
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

/// Reads the directory. Errors of one file are that member's error; an unreadable directory
/// is the caller's (it keeps the members it has). Two or more files naming one member
/// (`a.yaml`, `a.yml`) refuse that member, naming them all. Nothing in the directory can block
/// it: only regular files are opened, without blocking, and at most [`MAX_KUBECONFIG_BYTES`]
/// read.
pub fn scan(dir: &Path) -> std::io::Result<BTreeMap<String, MemberSource>> {
    Ok(merge(scan_places(dir)?))
}

/// Every file of the directory that declares a member, with that member's name, one entry per
/// file (two files naming one member are two entries: [`merge`] refuses them).
pub fn scan_places(dir: &Path) -> std::io::Result<Vec<(String, MemberSource)>> {
    let real_dir = std::fs::canonicalize(dir)?;
    let mut found = vec![];
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
            read_member(&real_dir, &path).map_err(|e| match e {
                Unread::Refused(e) => e,
                Unread::Unreadable(e) => {
                    unreadable = true;
                    e
                }
            })
        });
        let source = source_at(Place::File(path), kubeconfig);
        found.push((
            name,
            MemberSource {
                unreadable,
                ..source
            },
        ));
    }
    Ok(found)
}

/// One source per member from every place found, whatever the sources (files, Secrets): a
/// member declared at two or more places is refused, naming them all ([`one_source`]).
pub fn merge(
    found: impl IntoIterator<Item = (String, MemberSource)>,
) -> BTreeMap<String, MemberSource> {
    let mut by_name: BTreeMap<String, Vec<MemberSource>> = BTreeMap::new();
    for (name, source) in found {
        by_name.entry(name).or_default().push(source);
    }
    by_name
        .into_iter()
        .map(|(name, sources)| {
            let source = one_source(&name, sources);
            (name, source)
        })
        .collect()
}

/// The source of member `name` from the places that declare it (files, Secrets): the one
/// place, or, for several, a refusal that names every one of them. The same whatever order
/// they are found in (sorted), so its hash is too, and the refused member is engaged once.
fn one_source(name: &str, mut sources: Vec<MemberSource>) -> MemberSource {
    if sources.len() == 1
        && let Some(source) = sources.pop()
    {
        return source;
    }
    let mut places: Vec<Place> = sources.into_iter().map(|s| s.place).collect();
    places.sort();
    let e = declared_twice(name, &places);
    MemberSource {
        hash: hex(&Sha256::digest(e.as_bytes())),
        kubeconfig: Err(e),
        unreadable: false,
        place: places.into_iter().next().unwrap_or_default(),
    }
}

/// The source of a member whose kubeconfig is `kubeconfig` (or why there is none), declared
/// at `place`: its hash is the content's (a file and a Secret with the same text hash alike).
pub fn source_at(place: Place, kubeconfig: Result<String, String>) -> MemberSource {
    let hash = match &kubeconfig {
        Ok(text) => hex(&Sha256::digest(text.as_bytes())),
        Err(e) => hex(&Sha256::digest(e.as_bytes())),
    };
    MemberSource {
        place,
        kubeconfig,
        hash,
        unreadable: false,
    }
}

/// Never the kubeconfig's content: it holds credentials.
impl std::fmt::Debug for MemberSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberSource")
            .field("place", &self.place)
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
    use super::read::{inspect, open_member, opened_at, same_file_at};
    use super::*;
    use std::path::PathBuf;

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
    fn many_files_for_one_member_refuse_it_naming_all_in_any_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path();
        let files = ["alpha.yaml", "alpha.yml", "alpha.json", "alpha.conf"];
        for f in files {
            write(p, &[(f, f)]);
        }
        let members = scan(p).expect("scan");
        assert_eq!(members.len(), 1);
        let refused = &members["alpha"];
        let e = refused.kubeconfig.as_ref().expect_err("refused");
        for f in files {
            assert!(e.contains(&p.join(f).display().to_string()), "{f} in {e}");
        }
        assert!(e.contains("all declare member \"alpha\""), "{e}");
        // Whatever order the directory lists them in, the same refusal (and hash): the member
        // is engaged once, not again at every scan.
        let sources = |order: &[usize]| {
            order
                .iter()
                .map(|&i| MemberSource {
                    place: Place::File(p.join(files[i])),
                    kubeconfig: Ok(files[i].to_string()),
                    hash: files[i].to_string(),
                    unreadable: i == 0,
                })
                .collect::<Vec<_>>()
        };
        for order in [[0, 1, 2, 3], [3, 2, 1, 0], [1, 3, 0, 2], [2, 0, 3, 1]] {
            let source = one_source("alpha", sources(&order));
            assert_eq!(&source, refused, "{order:?}");
            assert!(!source.unreadable, "a refusal, not a passing read error");
        }
    }

    #[test]
    fn symlinks_are_followed_only_inside_the_directory() {
        let (outside, dir) = (
            tempfile::tempdir().expect("tempdir"),
            tempfile::tempdir().expect("tempdir"),
        );
        let token = secret_outside_and_data_inside(outside.path(), dir.path());
        let p = dir.path();
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

    /// A file `token` ("hub-sa-token") in `outside`, a mounted Secret's data (`good.yaml`, "g")
    /// in `dir`; returns the token's path.
    fn secret_outside_and_data_inside(outside: &Path, dir: &Path) -> PathBuf {
        write(outside, &[("token", "hub-sa-token")]);
        write(dir, &[("..2026_12_03/good.yaml", "g")]);
        outside.join("token")
    }

    fn mkfifo(path: &Path) {
        let made = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .expect("mkfifo runs");
        assert!(made.success(), "mkfifo {}", path.display());
    }

    /// Points the symlink `name` of `dir` at `target` instead.
    fn relink(dir: &Path, name: &str, target: &str) {
        std::fs::remove_file(dir.join(name)).expect("rm");
        link(dir, &[(name, target)]);
    }

    /// `scan(dir)` on another thread: a scan that blocks fails the test instead of hanging it.
    fn scan_within(dir: &Path, limit: std::time::Duration) -> BTreeMap<String, MemberSource> {
        let (tx, rx) = std::sync::mpsc::channel();
        let dir = dir.to_path_buf();
        std::thread::spawn(move || {
            let _ = tx.send(scan(&dir).expect("scan"));
        });
        rx.recv_timeout(limit).expect("the scan returns")
    }

    #[test]
    fn fifos_sockets_and_devices_are_refused_and_never_block() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path();
        write(p, &[("good.yaml", "g"), ("..data/queue", "")]);
        std::fs::remove_file(p.join("..data/queue")).expect("rm");
        for fifo in [p.join("fifo.yaml"), p.join("..data/queue")] {
            mkfifo(&fifo);
        }
        link(
            p,
            &[("linked.yaml", "..data/queue"), ("null.yaml", "/dev/null")],
        );
        let _socket = std::os::unix::net::UnixListener::bind(p.join("socket.yaml")).expect("bind");
        let members = scan_within(p, std::time::Duration::from_secs(10));
        assert_eq!(members["good"].kubeconfig.as_deref(), Ok("g"));
        for (member, kind) in [
            ("fifo", "is a FIFO, not a regular file"),
            ("linked", "is a FIFO, not a regular file"),
            ("socket", "is a socket, not a regular file"),
            ("null", "is a device, not a regular file"),
        ] {
            let source = &members[member];
            let e = source.kubeconfig.as_ref().expect_err("refused");
            assert!(
                e.contains(kind) && e.contains(&format!("{member}.yaml")),
                "{member}: {e}"
            );
            assert!(
                !source.unreadable,
                "{member}: a refusal, not a passing read error"
            );
        }
    }

    #[test]
    fn a_fifo_swapped_in_after_the_look_is_opened_without_blocking_and_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path();
        let fifo = p.join("late.yaml");
        mkfifo(&fifo);
        // What read_member does after its first look said "regular file".
        let real_dir = std::fs::canonicalize(p).expect("canonical");
        let (tx, rx) = std::sync::mpsc::channel();
        let path = fifo.clone();
        std::thread::spawn(move || {
            let opened = open_member(&path).map(|f| inspect(&real_dir, &path, &f));
            let _ = tx.send(opened.map_err(|e| e.to_string()));
        });
        let inspected = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("opening a FIFO does not block")
            .expect("opened");
        assert!(
            matches!(&inspected, Err(Unread::Refused(e)) if e.contains("late.yaml is a FIFO")),
            "{inspected:?}"
        );
    }

    #[test]
    fn oversized_files_are_refused_with_their_size() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path();
        let limit = MAX_KUBECONFIG_BYTES as usize;
        let big = format!("# {}\n", "x".repeat(limit));
        let fits = "y".repeat(limit);
        write(p, &[("big.yaml", &big), ("fits.yaml", &fits)]);
        let members = scan(p).expect("scan");
        let e = members["big"].kubeconfig.as_ref().expect_err("refused");
        assert!(
            e.contains(&format!("big.yaml is {} bytes", big.len()))
                && e.contains("1048576-byte limit"),
            "{e}"
        );
        assert!(!members["big"].unreadable);
        assert_eq!(
            members["fits"].kubeconfig.as_ref().map(String::len),
            Ok(limit)
        );
    }

    #[test]
    fn a_symlink_swapped_after_the_open_is_judged_by_what_was_opened() {
        let (outside, dir) = (
            tempfile::tempdir().expect("tempdir"),
            tempfile::tempdir().expect("tempdir"),
        );
        let token = secret_outside_and_data_inside(outside.path(), dir.path());
        let p = dir.path();
        link(p, &[("..data", "..2026_12_03")]);
        let real_dir = std::fs::canonicalize(p).expect("canonical");
        let name = p.join("swap.yaml");
        // Points outside when opened, inside when looked at by name: refused.
        link(p, &[("swap.yaml", token.to_str().expect("utf-8"))]);
        let opened = open_member(&name).expect("open");
        relink(p, "swap.yaml", "..data/good.yaml");
        for at in [opened_at(&opened, &name), same_file_at(&opened, &name)] {
            assert!(
                !at.is_ok_and(|at| at.starts_with(&real_dir)),
                "judged by the name"
            );
        }
        let e = inspect(&real_dir, &name, &opened).expect_err("refused");
        assert!(
            matches!(&e, Unread::Refused(e) if e.contains("swap.yaml is a symlink to a file outside")),
            "{e:?}"
        );
        // Inside when opened, outside now: what was opened is read, and it is the inside file.
        let opened = open_member(&name).expect("open");
        relink(p, "swap.yaml", token.to_str().expect("utf-8"));
        assert_eq!(inspect(&real_dir, &name, &opened), Ok(()));
        let mut text = String::new();
        std::io::Read::read_to_string(&mut &opened, &mut text).expect("read");
        assert_eq!(text, "g");
        // And the scan as a whole refuses the link as it is now.
        let members = scan(p).expect("scan");
        let e = members["swap"].kubeconfig.as_ref().expect_err("refused");
        assert!(
            e.contains("outside the kubeconfig directory") && !e.contains("hub-sa-token"),
            "{e}"
        );
    }
}
