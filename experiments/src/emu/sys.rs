//! Operating-system glue: network namespaces, TUN devices, per-namespace sysctls and `/proc`
//! reads. Everything unsafe in the emulator lives here.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;

/// A failed system step, with what was being done.
#[derive(Debug, thiserror::Error)]
pub enum SysError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("`{cmd}` failed: {stderr}")]
    Command { cmd: String, stderr: String },
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> SysError {
    let what = what.into();
    move |source| SysError::Io { what, source }
}

/// Runs `ip ARGS...` and fails with its stderr.
pub fn ip(args: &[&str]) -> Result<(), SysError> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(io_err("running ip"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(SysError::Command {
            cmd: format!("ip {}", args.join(" ")),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// A named network namespace (`ip netns add`), deleted on drop.
#[derive(Debug)]
pub struct NetNs {
    name: String,
    fd: File,
}

impl NetNs {
    /// Creates the namespace and brings its loopback up.
    pub fn create(name: &str) -> Result<Self, SysError> {
        ip(&["netns", "add", name])?;
        let fd = match File::open(format!("/run/netns/{name}")) {
            Ok(fd) => fd,
            Err(e) => {
                let _ = ip(&["netns", "del", name]);
                return Err(io_err(format!("opening namespace {name}"))(e));
            }
        };
        let ns = Self {
            name: name.to_string(),
            fd,
        };
        ip(&["-n", name, "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `f` with this thread inside the namespace, then returns to the original one.
    pub fn enter<T>(&self, f: impl FnOnce() -> T) -> Result<T, SysError> {
        let home = File::open("/proc/thread-self/ns/net").map_err(io_err("opening own netns"))?;
        setns(&self.fd, &self.name)?;
        let out = f();
        setns(&home, "original namespace")?;
        Ok(out)
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.name]);
    }
}

fn setns(fd: &File, what: &str) -> Result<(), SysError> {
    // SAFETY: fd is an open namespace file for the life of the call; setns only changes this
    // thread's network namespace.
    let rc = unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io_err(format!("entering {what}"))(
            io::Error::last_os_error(),
        ))
    }
}

/// `TUNSETIFF` = `_IOW('T', 202, int)`.
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
/// Layout of `struct ifreq` as far as TUNSETIFF reads it (name, flags), padded to 40 bytes.
#[repr(C)]
struct IfReqFlags {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Creates a TUN device (IFF_TUN with the 4-byte packet-information header that Mahimahi's
/// sizes include) in the calling thread's namespace; the fd is non-blocking.
pub fn create_tun(name: &str) -> Result<OwnedFd, SysError> {
    let path = c"/dev/net/tun";
    // SAFETY: path is a NUL-terminated C string; the returned fd is checked below.
    let raw = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    };
    if raw < 0 {
        return Err(io_err("opening /dev/net/tun")(io::Error::last_os_error()));
    }
    // SAFETY: raw is a freshly opened fd that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut req = IfReqFlags {
        name: [0; libc::IFNAMSIZ],
        flags: libc::IFF_TUN as libc::c_short,
        _pad: [0; 22],
    };
    let bytes = name.as_bytes();
    let n = bytes.len().min(libc::IFNAMSIZ - 1);
    req.name[..n].copy_from_slice(&bytes[..n]);
    // SAFETY: TUNSETIFF reads and writes a struct ifreq; IfReqFlags has its size and the
    // name/flags fields at the same offsets, and lives across the call.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETIFF, &mut req as *mut IfReqFlags) };
    if rc < 0 {
        return Err(io_err(format!("creating TUN {name}"))(
            io::Error::last_os_error(),
        ));
    }
    Ok(fd)
}

/// Reads one packet; `Ok(None)` when none is waiting.
pub fn read_packet(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<Option<usize>> {
    // SAFETY: buf is valid for writes of buf.len() bytes for the duration of the call.
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    if n >= 0 {
        return Ok(Some(n as usize));
    }
    let e = io::Error::last_os_error();
    if e.kind() == io::ErrorKind::WouldBlock {
        Ok(None)
    } else {
        Err(e)
    }
}

/// Writes one packet; false if the kernel refused it (counted by the caller as a loss).
pub fn write_packet(fd: &OwnedFd, packet: &[u8]) -> bool {
    // SAFETY: packet is valid for reads of packet.len() bytes for the duration of the call.
    let n = unsafe { libc::write(fd.as_raw_fd(), packet.as_ptr().cast(), packet.len()) };
    n == packet.len() as isize
}

/// Waits until one of `fds` is readable or `timeout_us` passes (0 = just check).
pub fn wait_readable(fds: &[&OwnedFd], timeout_us: u64) -> io::Result<()> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ts = libc::timespec {
        tv_sec: (timeout_us / 1_000_000) as libc::time_t,
        tv_nsec: ((timeout_us % 1_000_000) * 1000) as libc::c_long,
    };
    // SAFETY: pfds and ts live across the call; a null sigmask keeps the current one.
    let rc = unsafe {
        libc::ppoll(
            pfds.as_mut_ptr(),
            pfds.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(())
}

/// Asks for precise timer wake-ups (the default slack is 50 µs).
pub fn tighten_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and affects only this thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong);
    }
}

/// Puts the calling thread in SCHED_FIFO at `priority`; false if not permitted.
pub fn set_realtime(priority: i32) -> bool {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: param lives across the call; pid 0 is the calling thread.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 }
}

/// CPU time (user + system) this process has used, s (children not included).
pub fn own_cpu_seconds() -> f64 {
    // SAFETY: rusage is plain data that getrusage fills; a zeroed value is valid.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: ru lives across the call.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0.0;
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(ru.ru_utime) + secs(ru.ru_stime)
}

/// Writes a sysctl of the calling thread's namespace through /proc/sys.
pub fn write_sysctl(key: &str, value: &str) -> Result<(), SysError> {
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    std::fs::write(&path, value).map_err(io_err(format!("setting {key}={value}")))
}

/// Transmit drops of `dev` in the calling thread's namespace (from /proc/thread-self/net/dev).
pub fn tx_dropped(dev: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/net/dev").ok()?;
    parse_tx_dropped(&text, dev)
}

fn parse_tx_dropped(text: &str, dev: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (name, rest) = line.split_once(':')?;
        if name.trim() != dev {
            return None;
        }
        // rx: bytes packets errs drop fifo frame compressed multicast; tx: bytes packets errs drop
        rest.split_whitespace().nth(11)?.parse().ok()
    })
}

/// True if a TCP socket (v4 or v6, which iperf3 uses for both) listens on `port` in the
/// calling thread's namespace.
pub fn tcp_listening(port: u16) -> bool {
    ["/proc/thread-self/net/tcp", "/proc/thread-self/net/tcp6"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .any(|text| bound_in(&text, port, Some(TCP_LISTEN)))
}

/// Whether a UDP socket of this thread's network namespace is bound to `port` (a QUIC
/// server), in any state.
pub fn udp_bound(port: u16) -> bool {
    ["/proc/thread-self/net/udp", "/proc/thread-self/net/udp6"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .any(|text| bound_in(&text, port, None))
}

/// `st` of a listening TCP socket in /proc/net/tcp.
const TCP_LISTEN: &str = "0A";

/// Whether a socket in a /proc/net/{tcp,udp}[6] table has local port `port` (and, if
/// given, state `state`).
fn bound_in(text: &str, port: u16, state: Option<&str>) -> bool {
    text.lines().skip(1).any(|line| {
        let mut it = line.split_whitespace();
        let local = it.nth(1);
        let st = it.nth(1);
        let port_hex = local.and_then(|l| l.rsplit(':').next());
        state.is_none_or(|want| st == Some(want))
            && port_hex.and_then(|p| u16::from_str_radix(p, 16).ok()) == Some(port)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_tx_drops_from_proc_net_dev() {
        let text = "Inter-|   Receive                            |  Transmit\n \
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n\
    lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0\n\
emutun: 1234 10 0 0 0 0 0 0 5678 20 0 7 0 0 0 0\n";
        assert_eq!(parse_tx_dropped(text, "emutun"), Some(7));
        assert_eq!(parse_tx_dropped(text, "lo"), Some(0));
        assert_eq!(parse_tx_dropped(text, "eth0"), None);
    }

    #[test]
    fn finds_listening_sockets_in_proc_net_tcp() {
        let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 00000000000000000000000000000000:1451 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0\n\
   1: 0100000A:1452 0200000A:9C40 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0\n";
        assert!(bound_in(text, 5201, Some(TCP_LISTEN)));
        assert!(
            !bound_in(text, 5202, Some(TCP_LISTEN)),
            "established, not listening"
        );
        assert!(!bound_in(text, 80, Some(TCP_LISTEN)));
    }

    #[test]
    fn finds_bound_sockets_in_proc_net_udp() {
        let text = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  123: 00000000:1451 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4 2 0 0
";
        assert!(bound_in(text, 5201, None));
        assert!(!bound_in(text, 5202, None));
    }
}
