//! How the runtime sends to datapaths: portus' IPC sockets in production, a recorder in
//! tests and fuzzing.

use std::cell::RefCell;
use std::collections::HashSet;
use std::fmt::Debug;
use std::hash::Hash;
use std::io;
use std::time::Duration;

/// How often a blocked receive returns so the loop can look at its stop flag.
pub const RECV_TIMEOUT: Duration = Duration::from_millis(200);

/// Whether a failed receive only means "nothing yet": the receive timeout ran out
/// (EAGAIN/EWOULDBLOCK, or ETIMEDOUT) or a signal such as SIGTERM interrupted it (EINTR).
/// Decided by the error code: the text differs between libc, nix and portus.
pub fn is_idle(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EAGAIN | libc::ETIMEDOUT | libc::EINTR)
    ) || matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// A datagram transport to datapaths, addressed per datapath.
pub trait Transport: 'static {
    /// How a datapath is addressed (its bound socket path for unix sockets; `()` for
    /// netlink, where there is only the kernel).
    type Addr: Clone + Eq + Hash + Debug;
    /// Sends one message. A failure means the datapath is gone, or (unix sockets) that
    /// messages waiting for it were dropped.
    fn send(&self, msg: &[u8], to: &Self::Addr) -> Result<(), String>;
    /// The datapath at `to` reads several messages per datagram: sends to it may be held
    /// and go out together at the next `flush`.
    fn batch_to(&self, _to: &Self::Addr) {}
    /// Sends whatever is held; failures show up in `Unreachable`.
    fn flush(&self) {}
}

/// A portus IPC socket used as a transport. Remembers which addresses could not be reached
/// so the runtime can forget those datapaths after the message that found out.
#[derive(Debug)]
pub struct IpcTransport<I: portus::ipc::Ipc> {
    pub sock: I,
    unreachable: RefCell<HashSet<I::Addr>>,
}

impl<I: portus::ipc::Ipc> IpcTransport<I> {
    pub fn new(sock: I) -> Self {
        IpcTransport {
            sock,
            unreachable: RefCell::new(HashSet::new()),
        }
    }
}

impl<I: portus::ipc::Ipc> Transport for IpcTransport<I> {
    type Addr = I::Addr;

    fn send(&self, msg: &[u8], to: &I::Addr) -> Result<(), String> {
        self.sock.send(msg, to).map_err(|e| {
            self.unreachable.borrow_mut().insert(to.clone());
            e.0
        })
    }
}

/// Addresses a transport failed to reach since the last call.
pub trait Unreachable: Transport {
    fn take_unreachable(&self) -> Vec<Self::Addr>;
    /// Messages lost because too much waited for a datapath that did not read.
    fn dropped_sends(&self) -> u64 {
        0
    }
    /// Messages that waited for room in a datapath's queue (none lost by that).
    fn deferred_sends(&self) -> u64 {
        0
    }
}

/// The receiving side of a transport, for the agent's loop.
pub trait Receive: Transport {
    /// One datagram and its sender; `Ok(None)` when the receive timed out (so the loop can
    /// look at its stop flag) or the sender cannot be answered.
    fn recv_datagram(&self, buf: &mut [u8]) -> Result<Option<(usize, Self::Addr)>, String>;
}

impl<I: portus::ipc::Ipc> Receive for IpcTransport<I> {
    fn recv_datagram(&self, buf: &mut [u8]) -> Result<Option<(usize, I::Addr)>, String> {
        // Only the character device comes here (unix and netlink have their own sockets,
        // which keep error codes); portus' device receive blocks until a message arrives,
        // so it has no timeout to recognise.
        self.sock.recv(buf).map(Some).map_err(|e| e.0)
    }
}

impl<I: portus::ipc::Ipc> Unreachable for IpcTransport<I> {
    fn take_unreachable(&self) -> Vec<I::Addr> {
        self.unreachable.borrow_mut().drain().collect()
    }
}

/// Keeps every message instead of sending it: for tests, benchmarks of the dispatch path,
/// and the fuzzer. `fail_to` makes sends to one address fail.
#[derive(Debug, Default)]
pub struct Recorder {
    pub sent: RefCell<Vec<(u32, Vec<u8>)>>,
    pub fail_to: RefCell<HashSet<u32>>,
    failed: RefCell<HashSet<u32>>,
}

impl Transport for Recorder {
    type Addr = u32;

    fn send(&self, msg: &[u8], to: &u32) -> Result<(), String> {
        if self.fail_to.borrow().contains(to) {
            self.failed.borrow_mut().insert(*to);
            return Err("connection refused".into());
        }
        self.sent.borrow_mut().push((*to, msg.to_vec()));
        Ok(())
    }
}

impl Unreachable for Recorder {
    fn take_unreachable(&self) -> Vec<u32> {
        self.failed.borrow_mut().drain().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::is_idle;
    use std::io;

    #[test]
    fn timeouts_and_interruptions_are_recognised_by_their_code() {
        // EWOULDBLOCK is EAGAIN on Linux; both are listed for other targets.
        for code in [
            libc::EAGAIN,
            libc::EWOULDBLOCK,
            libc::ETIMEDOUT,
            libc::EINTR,
        ] {
            assert!(is_idle(&io::Error::from_raw_os_error(code)), "errno {code}");
        }
        for code in [libc::ECONNREFUSED, libc::EBADF, libc::ENOBUFS, libc::EPERM] {
            assert!(
                !is_idle(&io::Error::from_raw_os_error(code)),
                "errno {code}"
            );
        }
        // The text no longer matters: portus' own wording is not an error code.
        assert!(!is_idle(&io::Error::other("EAGAIN: Try again")));
    }
}
