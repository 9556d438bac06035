//! Loading the BPF object, registering "ccp", attaching the setsockopt program to a
//! cgroup, pinning both links in bpffs, and undoing all of it.
//!
//! Both links are pinned by default, so the registration outlives a killed daemon (its flows
//! then run the BPF fallback) and is removed only by `stop` (docs/datapaths.md §7.6: with a
//! link, process exit unregisters unless the link is pinned; removing the last pin
//! unregisters). Unpinned (`--no-pin`), the registration ends with the process however it
//! ends: what test harnesses and experiment runners want.

use std::ffi::CString;
use std::fs;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore};

use crate::skel::{CcpSkel, CcpSkelBuilder};

/// `statfs` magic of bpffs.
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;
/// Pin names inside the pin directory.
pub const PIN_STRUCT_OPS: &str = "ccp_struct_ops";
pub const PIN_SETSOCKOPT: &str = "ccp_setsockopt";

/// Why the BPF side could not be set up or removed.
#[derive(Debug, thiserror::Error)]
pub enum BpfError {
    #[error("{what}: {source}")]
    Libbpf {
        what: &'static str,
        source: libbpf_rs::Error,
    },
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error(
        "a congestion control named \"ccp\" is already registered (ccp-kernel or another daemon); \
         stop it first (a ccp-ebpf daemon that died keeps it until `ccp-ebpf --run-dir DIR stop` \
         with the run directory it was started with; `ccp-ebpf status` says whether it runs)"
    )]
    AlreadyRegistered,
}

fn io_err(what: &'static str, path: &Path) -> impl FnOnce(io::Error) -> BpfError + use<> {
    let path = path.to_owned();
    move |source| BpfError::Io { what, path, source }
}

fn bpf_err(what: &'static str) -> impl FnOnce(libbpf_rs::Error) -> BpfError {
    move |source| BpfError::Libbpf { what, source }
}

/// Is `path` the root of a bpffs mount?
pub fn is_bpffs(path: &Path) -> bool {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    let mut st = MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: `c` is a valid NUL-terminated path and `st` is writable for one statfs.
    let rc = unsafe { libc::statfs(c.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return false;
    }
    // SAFETY: statfs returned 0, so it filled `st`.
    let st = unsafe { st.assume_init() };
    // f_type is narrower than i64 on 32-bit targets.
    #[allow(clippy::useless_conversion)]
    let f_type = i64::from(st.f_type);
    f_type == BPF_FS_MAGIC
}

/// Mount a private bpffs at `dir` (created if missing).
pub fn mount_bpffs(dir: &Path) -> Result<(), BpfError> {
    fs::create_dir_all(dir).map_err(io_err("creating", dir))?;
    let target = CString::new(dir.as_os_str().as_bytes())
        .map_err(|e| io_err("mount point", dir)(io::Error::other(e)))?;
    // SAFETY: all strings are valid NUL-terminated C strings; data may be NULL.
    let rc = unsafe {
        libc::mount(
            c"bpf".as_ptr(),
            target.as_ptr(),
            c"bpf".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(io_err("mounting bpffs on", dir)(io::Error::last_os_error()));
    }
    Ok(())
}

/// Unmount `dir` (lazily, so that a busy mount cannot keep the daemon from stopping).
pub fn umount(dir: &Path) -> Result<(), BpfError> {
    let target = CString::new(dir.as_os_str().as_bytes())
        .map_err(|e| io_err("mount point", dir)(io::Error::other(e)))?;
    // SAFETY: `target` is a valid NUL-terminated path.
    let rc = unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    if rc != 0 {
        return Err(io_err("unmounting", dir)(io::Error::last_os_error()));
    }
    Ok(())
}

/// Whether the kernel lists "ccp" as an available congestion control.
pub fn ccp_registered() -> bool {
    fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
        .map(|s| s.split_whitespace().any(|n| n == "ccp"))
        .unwrap_or(false)
}

/// The loaded object and its links.
pub struct Loaded {
    pub skel: CcpSkel<'static>,
    struct_ops: Link,
    setsockopt: Option<Link>,
}

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loaded")
            .field("setsockopt", &self.setsockopt.is_some())
            .finish()
    }
}

/// Load, register, attach and, with a pin directory, pin.
pub fn load(
    pin_dir: Option<&Path>,
    cgroup: Option<&Path>,
    fallback_timeout_ns: u64,
) -> Result<Loaded, BpfError> {
    if ccp_registered() {
        return Err(BpfError::AlreadyRegistered);
    }
    // The skeleton borrows its object storage for as long as it lives: the whole process.
    let storage: &'static mut MaybeUninit<libbpf_rs::OpenObject> =
        Box::leak(Box::new(MaybeUninit::uninit()));
    let mut open = CcpSkelBuilder::default()
        .open(storage)
        .map_err(bpf_err("opening the BPF object"))?;
    if let Some(ro) = open.maps.rodata_data.as_deref_mut() {
        ro.fallback_timeout_ns = fallback_timeout_ns;
    }
    let mut skel = open.load().map_err(bpf_err("loading the BPF object"))?;

    if let Some(dir) = pin_dir {
        fs::create_dir_all(dir).map_err(io_err("creating", dir))?;
    }
    let mut struct_ops = skel
        .maps
        .ccp
        .attach_struct_ops()
        .map_err(bpf_err("registering the \"ccp\" struct_ops"))?;
    if let Some(dir) = pin_dir {
        struct_ops
            .pin(dir.join(PIN_STRUCT_OPS))
            .map_err(bpf_err("pinning the struct_ops link"))?;
    }

    let setsockopt = match cgroup {
        None => None,
        Some(cg) => {
            let f = fs::File::open(cg).map_err(io_err("opening cgroup", cg))?;
            let mut link = skel
                .progs
                .ccp_setsockopt
                .attach_cgroup(f.as_raw_fd())
                .map_err(bpf_err("attaching cgroup/setsockopt"))?;
            if let Some(dir) = pin_dir {
                link.pin(dir.join(PIN_SETSOCKOPT))
                    .map_err(bpf_err("pinning the setsockopt link"))?;
            }
            Some(link)
        }
    };
    Ok(Loaded {
        skel,
        struct_ops,
        setsockopt,
    })
}

impl Loaded {
    /// The ring-buffer map.
    pub fn events(&self) -> &dyn MapCore {
        &self.skel.maps.events
    }

    /// Unpin and drop both links: "ccp" is unregistered and the cgroup program detached.
    /// Flows still using "ccp" keep the programs until they close (docs/datapaths.md §7.6).
    pub fn unregister(mut self) {
        let _ = self.struct_ops.unpin();
        if let Some(l) = self.setsockopt.as_mut() {
            let _ = l.unpin();
        }
        drop(self.setsockopt);
        drop(self.struct_ops);
    }
}

/// Remove pins left by a daemon that did not stop cleanly (removing the last reference to
/// a link unregisters or detaches it).
pub fn remove_pins(pin_dir: &Path) {
    for name in [PIN_STRUCT_OPS, PIN_SETSOCKOPT] {
        let _ = fs::remove_file(pin_dir.join(name));
    }
    let _ = fs::remove_dir(pin_dir);
}
