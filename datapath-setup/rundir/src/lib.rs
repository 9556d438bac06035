//! Where CCP agents and datapaths bind their sockets, and fixed modes and owners for what
//! they create, whatever the umask (`datapath-setup/README.md`, "Security").
//!
//! * Directories (`/tmp/ccp`, a daemon's run directory): owned by root or by the running
//!   user, else refused (whoever owns one can replace a socket or a state file in it); one
//!   we own gets its mode set, one of root's must not be writable beyond that mode.
//! * Sockets: 0600, or 0660 with a group that shares them (the group an unprivileged agent
//!   runs in).
//! * Private files (a daemon's state): 0600, created afresh.

use std::fs::{DirBuilder, File, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Where CCP agents and datapaths bind their sockets by default (portus' convention).
pub const SOCKET_DIR: &str = "/tmp/ccp";

/// The socket path of a name: a bare name lives under [`SOCKET_DIR`] (as the agent's
/// `--bind NAME`); anything with a `/` is a path already.
pub fn socket_path(name_or_path: &str) -> PathBuf {
    if name_or_path.contains('/') {
        PathBuf::from(name_or_path)
    } else {
        Path::new(SOCKET_DIR).join(name_or_path)
    }
}

/// Why a path cannot be used safely.
#[derive(Debug, thiserror::Error)]
pub enum PermError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path} is not a directory (a symlink?): refusing to use it")]
    NotADirectory { path: PathBuf },
    #[error("{path} is owned by uid {uid}, not root or this user: refusing to use it")]
    ForeignOwner { path: PathBuf, uid: u32 },
    #[error(
        "{path} has mode {mode:o} (others may write) and is not ours to fix: refusing to use it"
    )]
    OpenToOthers { path: PathBuf, mode: u32 },
    #[error("no group named {0:?}")]
    NoSuchGroup(String),
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> PermError + '_ {
    move |source| PermError::Io {
        path: path.to_owned(),
        source,
    }
}

fn euid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

/// Group id of a group name.
pub fn group_id(name: &str) -> Result<u32, PermError> {
    let group = std::fs::read_to_string("/etc/group").map_err(io_err(Path::new("/etc/group")))?;
    group
        .lines()
        .find_map(|l| {
            let mut f = l.split(':');
            (f.next()? == name).then(|| f.nth(1)?.parse().ok())?
        })
        .ok_or_else(|| PermError::NoSuchGroup(name.to_owned()))
}

/// Creates `dir` if needed with exactly `mode` (and, with `gid`, that group), then checks
/// it: a directory (not a symlink) owned by root or us, which others may not write to. One
/// we own loses others' write permission, and with `gid` gets `mode` and that group; one of
/// root's that others may write to is refused.
pub fn secure_dir(dir: &Path, mode: u32, gid: Option<u32>) -> Result<(), PermError> {
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent).map_err(io_err(parent))?;
    }
    let created = match DirBuilder::new().mode(mode).create(dir) {
        Ok(()) => true,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
        Err(e) => return Err(io_err(dir)(e)),
    };
    let meta = std::fs::symlink_metadata(dir).map_err(io_err(dir))?;
    if !meta.is_dir() {
        return Err(PermError::NotADirectory {
            path: dir.to_owned(),
        });
    }
    let ours = meta.uid() == euid();
    if meta.uid() != 0 && !ours {
        return Err(PermError::ForeignOwner {
            path: dir.to_owned(),
            uid: meta.uid(),
        });
    }
    let current = meta.mode() & 0o7777;
    match (ours, created || gid.is_some()) {
        (true, true) => set_owner_mode(dir, mode, gid),
        (true, false) if current & 0o002 != 0 => set_owner_mode(dir, current & !0o002, None),
        (false, _) if current & 0o002 != 0 => Err(PermError::OpenToOthers {
            path: dir.to_owned(),
            mode: current,
        }),
        _ => Ok(()),
    }
}

/// Sets a file's mode exactly (no umask) and, with `gid`, its group.
pub fn set_owner_mode(path: &Path, mode: u32, gid: Option<u32>) -> Result<(), PermError> {
    if let Some(gid) = gid {
        std::os::unix::fs::chown(path, None, Some(gid)).map_err(io_err(path))?;
    }
    std::fs::set_permissions(path, Permissions::from_mode(mode)).map_err(io_err(path))
}

/// The mode of a socket the agent must use: 0660 when a group shares it, else 0600.
pub fn socket_mode(gid: Option<u32>) -> u32 {
    if gid.is_some() { 0o660 } else { 0o600 }
}

/// Writes a file readable and writable by its owner only, replacing any old one (which
/// could be a link planted by someone else).
pub fn write_private(path: &Path, contents: &str) -> Result<(), PermError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(io_err(path)(e)),
        _ => {}
    }
    let mut f: File = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io_err(path))?;
    // The umask can only narrow the mode above; set it exactly anyway.
    f.set_permissions(Permissions::from_mode(0o600))
        .map_err(io_err(path))?;
    f.write_all(contents.as_bytes()).map_err(io_err(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_names_live_in_the_socket_dir_and_paths_stay_paths() {
        assert_eq!(socket_path("agent"), Path::new("/tmp/ccp/agent"));
        assert_eq!(socket_path("./agent"), Path::new("./agent"));
        assert_eq!(socket_path("/run/x/dp"), Path::new("/run/x/dp"));
    }

    #[test]
    fn modes_are_exact_under_any_umask() {
        let dir = std::env::temp_dir().join(format!("ccp-perms-{}", std::process::id()));
        // SAFETY: umask only changes this process' file creation mask.
        let old = unsafe { libc::umask(0) };
        secure_dir(&dir, 0o755, None).expect("dir");
        let state = dir.join("state");
        write_private(&state, "pid=1\n").expect("state");
        // SAFETY: as above.
        unsafe { libc::umask(old) };
        let mode = |p: &Path| std::fs::metadata(p).expect("stat").mode() & 0o7777;
        assert_eq!((mode(&dir), mode(&state)), (0o755, 0o600));
        // Left by a run under umask 000: others lose write permission.
        std::fs::set_permissions(&dir, Permissions::from_mode(0o777)).expect("chmod");
        secure_dir(&dir, 0o755, None).expect("our own directory is fixed");
        assert_eq!(mode(&dir), 0o775);
        assert!(matches!(
            secure_dir(&state, 0o755, None),
            Err(PermError::NotADirectory { .. })
        ));
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
