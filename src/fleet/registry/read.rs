//! Reading one member kubeconfig from the directory: regular files only, opened without
//! blocking, the opened handle inspected (type, size, where it really is) and then read, so a
//! name swapped between the checks and the read changes nothing.

use std::path::{Path, PathBuf};

/// The largest member kubeconfig read. One is a few KiB; a bigger file is a mistake, or an
/// attempt on the memory of the loop that reads them all.
pub const MAX_KUBECONFIG_BYTES: u64 = 1024 * 1024;

/// Why a member file was not read.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Unread {
    /// Not a file fleetnet-hub reads as a kubeconfig, until it changes.
    Refused(String),
    /// Could not be read this time (see [`super::MemberSource::unreadable`]).
    Unreadable(String),
}

/// What a file that is not a regular file is, for the error.
fn kind_of(file_type: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_socket() {
        "a socket"
    } else if file_type.is_char_device() || file_type.is_block_device() {
        "a device"
    } else if file_type.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    }
}

/// Regular files only: reading a FIFO blocks until someone writes, a device may never end.
fn regular(path: &Path, metadata: &std::fs::Metadata) -> Result<(), Unread> {
    if metadata.is_file() {
        Ok(())
    } else {
        Err(Unread::Refused(format!(
            "{} is {}, not a regular file: refused",
            path.display(),
            kind_of(metadata.file_type())
        )))
    }
}

/// Opens `path` for reading without blocking: opening a FIFO waits for a writer otherwise,
/// should the name be swapped for one after it was looked at.
pub(super) fn open_member(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
}

/// Where the opened `file` is: `/proc/self/fd` names the file the handle holds (whatever its
/// name was swapped for since); without `/proc`, the path `name` leads to now, if that is
/// still the very file opened (same device and inode).
pub(super) fn opened_at(file: &std::fs::File, name: &Path) -> Result<PathBuf, Unread> {
    use std::os::fd::AsRawFd;
    if let Ok(path) = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())) {
        return Ok(path);
    }
    same_file_at(file, name)
}

/// The fallback of [`opened_at`]: the canonical path of `name`, if it is the file opened.
pub(super) fn same_file_at(file: &std::fs::File, name: &Path) -> Result<PathBuf, Unread> {
    use std::os::unix::fs::MetadataExt;
    let unreadable =
        |e: std::io::Error| Unread::Unreadable(format!("cannot resolve {}: {e}", name.display()));
    let opened = file.metadata().map_err(unreadable)?;
    let path = std::fs::canonicalize(name).map_err(unreadable)?;
    let now = std::fs::metadata(&path).map_err(unreadable)?;
    if (now.dev(), now.ino()) == (opened.dev(), opened.ino()) {
        Ok(path)
    } else {
        // Changed between the open and now (a Secret's update): the next scan reads it.
        Err(Unread::Unreadable(format!(
            "{} changed while being read",
            name.display()
        )))
    }
}

/// Checks the opened `file` itself (`path` is its name in the directory, `real_dir` the
/// directory's canonical path): a regular file, within [`MAX_KUBECONFIG_BYTES`], inside the
/// directory (a mounted Secret's links are, a link to the pod's own secrets is not).
pub(super) fn inspect(real_dir: &Path, path: &Path, file: &std::fs::File) -> Result<(), Unread> {
    let metadata = file
        .metadata()
        .map_err(|e| Unread::Unreadable(format!("cannot read {}: {e}", path.display())))?;
    regular(path, &metadata)?;
    if metadata.len() > MAX_KUBECONFIG_BYTES {
        return Err(too_big(path, metadata.len()));
    }
    if !opened_at(file, path)?.starts_with(real_dir) {
        return Err(Unread::Refused(format!(
            "{} is a symlink to a file outside the kubeconfig directory: refused",
            path.display()
        )));
    }
    Ok(())
}

fn too_big(path: &Path, len: u64) -> Unread {
    Unread::Refused(format!(
        "{} is {len} bytes, over the {MAX_KUBECONFIG_BYTES}-byte limit of a member kubeconfig: refused",
        path.display()
    ))
}

/// Reads the member file `path` of the directory whose canonical path is `real_dir`: opened
/// once, the opened handle inspected ([`inspect`]), then read from that same handle, so a
/// name swapped between the checks and the read changes nothing.
pub(super) fn read_member(real_dir: &Path, path: &Path) -> Result<String, Unread> {
    use std::io::Read;
    let unreadable =
        |e: std::io::Error| Unread::Unreadable(format!("cannot read {}: {e}", path.display()));
    // Not even opened unless it is a regular file now: opening a device may act on it.
    regular(path, &std::fs::metadata(path).map_err(unreadable)?)?;
    let file = open_member(path).map_err(unreadable)?;
    inspect(real_dir, path, &file)?;
    let mut bytes = Vec::new();
    // Bounded also when the file grows after it was inspected.
    file.take(MAX_KUBECONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() as u64 > MAX_KUBECONFIG_BYTES {
        return Err(too_big(path, bytes.len() as u64));
    }
    String::from_utf8(bytes)
        .map_err(|_| Unread::Refused(format!("{} is not UTF-8 text: refused", path.display())))
}
