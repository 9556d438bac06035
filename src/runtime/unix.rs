//! The agent's unix datagram socket.
//!
//! portus' unix socket sends with a plain blocking `sendto`: a datapath that stops reading
//! (its queue is full at `net.unix.max_dgram_qlen` datagrams) would stall the agent for
//! every other datapath. This socket binds the same path portus does (`/tmp/ccp/<name>`)
//! and receives the same way, but never waits to send: what a datapath's full queue does
//! not take waits in this socket's own queue for that datapath, in order, and goes out at
//! the next `flush` (after every datagram the agent handles, and when it is idle). Only
//! more than [`MAX_WAITING_BYTES`] waiting for one datapath loses messages, the oldest
//! first (counted); a datapath that is gone is forgotten.
//!
//! A datapath that reads several messages per datagram (it said so in a SYNC, docs/wire.md)
//! gets what the agent has for it held and sent together at `flush`: one datagram instead
//! of one per message, so its queue of `net.unix.max_dgram_qlen` datagrams rarely fills.

use super::transport::{RECV_TIMEOUT, Receive, Transport, Unreachable, is_idle};
use ccp_wire::MAX_BATCH_BYTES;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{self, ErrorKind};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};

/// Most bytes that may wait for one datapath whose queue is full: room for an Install and
/// a few reports' answers for each of thousands of flows, yet bounded for one that never
/// reads again.
pub const MAX_WAITING_BYTES: usize = 4 << 20;

/// Why the agent's socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Perms(#[from] ccp_rundir::PermError),
}

/// Datagrams a datapath's full queue has not taken yet, oldest first.
#[derive(Debug, Default)]
struct Waiting {
    datagrams: VecDeque<Vec<u8>>,
    bytes: usize,
}

/// How sends have fared, for the exit summary.
#[derive(Debug, Default, Clone, Copy)]
struct SendCounts {
    /// Datagrams that had to wait for room in a datapath's queue.
    deferred: u64,
    /// Datagrams lost because too much was waiting for one datapath.
    dropped: u64,
}

/// The agent's bound socket.
#[derive(Debug)]
pub struct UnixSocket {
    sock: UnixDatagram,
    path: PathBuf,
    unreachable: RefCell<HashSet<PathBuf>>,
    counts: RefCell<SendCounts>,
    /// Bytes held for each datapath that reads batches.
    held: RefCell<HashMap<PathBuf, Vec<u8>>>,
    /// Datagrams waiting for room, per datapath.
    waiting: RefCell<HashMap<PathBuf, Waiting>>,
}

impl UnixSocket {
    /// Binds `<name>` in [`ccp_rundir::SOCKET_DIR`], replacing a stale socket file, as portus does. The
    /// directory must be root's or ours and closed to others; the socket gets mode 0600, or
    /// 0660 with the group `gid` (whatever the umask).
    pub fn bind(name: &str, gid: Option<u32>) -> Result<Self, BindError> {
        let dir = Path::new(ccp_rundir::SOCKET_DIR);
        let dir_mode = if gid.is_some() { 0o775 } else { 0o755 };
        ccp_rundir::secure_dir(dir, dir_mode, gid)?;
        let path = dir.join(name);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != ErrorKind::NotFound => return Err(e.into()),
            _ => {}
        }
        let sock = UnixDatagram::bind(&path)?;
        ccp_rundir::set_owner_mode(&path, ccp_rundir::socket_mode(gid), gid)?;
        sock.set_read_timeout(Some(RECV_TIMEOUT))?;
        Ok(UnixSocket {
            sock,
            path,
            unreachable: RefCell::default(),
            counts: RefCell::default(),
            held: RefCell::default(),
            waiting: RefCell::default(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// One datagram: now if the datapath's queue has room and nothing waits before it,
    /// else behind what waits.
    fn send_now(&self, datagram: &[u8], to: &PathBuf) -> Result<(), String> {
        if self
            .waiting
            .borrow()
            .get(to)
            .is_some_and(|w| !w.datagrams.is_empty())
        {
            return self.wait(datagram.to_vec(), to);
        }
        match send_dontwait(&self.sock, datagram, to) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                self.counts.borrow_mut().deferred += 1;
                self.wait(datagram.to_vec(), to)
            }
            Err(e) => Err(self.lost(to, &e)),
        }
    }

    /// Queues `datagram` for `to`; beyond the bound the oldest waiting ones are lost.
    fn wait(&self, datagram: Vec<u8>, to: &Path) -> Result<(), String> {
        let mut waiting = self.waiting.borrow_mut();
        let w = waiting.entry(to.to_path_buf()).or_default();
        w.bytes += datagram.len();
        w.datagrams.push_back(datagram);
        let mut dropped = 0;
        while w.bytes > MAX_WAITING_BYTES {
            let Some(old) = w.datagrams.pop_front() else {
                break;
            };
            w.bytes -= old.len();
            dropped += 1;
        }
        if dropped == 0 {
            return Ok(());
        }
        self.counts.borrow_mut().dropped += dropped;
        Err(format!(
            "datapath {} is not reading: {dropped} waiting message(s) dropped",
            to.display()
        ))
    }

    /// Sends what waits for each datapath, in order, until its queue is full again.
    fn drain_waiting(&self) {
        let mut lost = Vec::new();
        for (to, w) in self.waiting.borrow_mut().iter_mut() {
            while let Some(front) = w.datagrams.front() {
                let len = front.len();
                match send_dontwait(&self.sock, front, to) {
                    Ok(()) => {
                        w.bytes -= len;
                        w.datagrams.pop_front();
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => {
                        lost.push((to.clone(), e));
                        break;
                    }
                }
            }
        }
        self.waiting
            .borrow_mut()
            .retain(|_, w| !w.datagrams.is_empty());
        for (to, e) in lost {
            let _ = self.lost(&to, &e);
        }
    }

    /// `to` is gone: nothing is kept for it, and the runtime learns it.
    fn lost(&self, to: &PathBuf, e: &io::Error) -> String {
        self.held.borrow_mut().remove(to);
        self.waiting.borrow_mut().remove(to);
        self.unreachable.borrow_mut().insert(to.clone());
        format!("datapath {} unreachable: {e}", to.display())
    }
}

/// `sendto` that never waits (MSG_DONTWAIT), from the bound socket so that the datapath
/// sees the agent's address; the socket itself keeps its blocking receive.
fn send_dontwait(sock: &UnixDatagram, datagram: &[u8], to: &Path) -> io::Result<()> {
    let path = to.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain old data; all zeroes is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if path.len() >= addr.sun_path.len() {
        return Err(io::Error::new(
            ErrorKind::InvalidInput,
            "socket path too long",
        ));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr.sun_path.iter_mut().zip(path) {
        *d = *s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + path.len() + 1;
    // SAFETY: the buffer and the address are valid for the lengths given.
    let n = unsafe {
        libc::sendto(
            sock.as_raw_fd(),
            datagram.as_ptr().cast(),
            datagram.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            (&raw const addr).cast(),
            len as libc::socklen_t,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl Receive for UnixSocket {
    fn recv_datagram(&self, buf: &mut [u8]) -> Result<Option<(usize, PathBuf)>, String> {
        match self.sock.recv_from(buf) {
            // An unbound sender cannot be answered; datapaths must bind a path.
            Ok((n, addr)) => Ok(addr.as_pathname().map(|p| (n, p.to_path_buf()))),
            Err(e) if is_idle(&e) => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }
}

impl Drop for UnixSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Transport for UnixSocket {
    type Addr = PathBuf;

    fn send(&self, msg: &[u8], to: &PathBuf) -> Result<(), String> {
        let full = {
            let mut held = self.held.borrow_mut();
            let Some(buf) = held.get_mut(to) else {
                drop(held);
                return self.send_now(msg, to);
            };
            let full = (buf.len() + msg.len() > MAX_BATCH_BYTES).then(|| std::mem::take(buf));
            buf.extend_from_slice(msg);
            full
        };
        match full {
            Some(batch) if !batch.is_empty() => self.send_now(&batch, to),
            _ => Ok(()),
        }
    }

    fn batch_to(&self, to: &PathBuf) {
        self.held.borrow_mut().entry(to.clone()).or_default();
    }

    fn flush(&self) {
        self.drain_waiting();
        let batches: Vec<(PathBuf, Vec<u8>)> = self
            .held
            .borrow_mut()
            .iter_mut()
            .filter(|(_, b)| !b.is_empty())
            .map(|(to, b)| (to.clone(), std::mem::take(b)))
            .collect();
        for (to, batch) in batches {
            // A failure is counted or noted for `take_unreachable`.
            let _ = self.send_now(&batch, &to);
        }
    }
}

impl Unreachable for UnixSocket {
    fn take_unreachable(&self) -> Vec<PathBuf> {
        self.unreachable.borrow_mut().drain().collect()
    }

    fn dropped_sends(&self) -> u64 {
        self.counts.borrow().dropped
    }

    fn deferred_sends(&self) -> u64 {
        self.counts.borrow().deferred
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_datapath_that_does_not_read_costs_no_wait_and_loses_nothing() {
        let agent =
            UnixSocket::bind(&format!("unit-agent-{}", std::process::id()), None).expect("bind");
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(agent.path()).expect("stat").permissions(),
        );
        assert_eq!(mode & 0o777, 0o600, "the socket's mode is not the umask's");
        let dp_path = std::env::temp_dir().join(format!("unit-dp-{}", std::process::id()));
        let _ = std::fs::remove_file(&dp_path);
        let dp = UnixDatagram::bind(&dp_path).expect("bind dp");
        dp.set_nonblocking(true).expect("nonblocking");
        // Far more datagrams than the datapath's queue holds (net.unix.max_dgram_qlen).
        let n = 2_000u32;
        let start = std::time::Instant::now();
        for i in 0..n {
            agent
                .send(&i.to_le_bytes(), &dp_path)
                .expect("queued, not lost");
        }
        assert!(
            start.elapsed() < std::time::Duration::from_millis(500),
            "sending to a full queue waited: {:?}",
            start.elapsed()
        );
        assert!(agent.deferred_sends() > 0, "the queue never filled");
        assert_eq!(agent.dropped_sends(), 0);
        assert!(
            agent.take_unreachable().is_empty(),
            "a slow datapath is not a lost one"
        );
        // The datapath reads again: every datagram arrives, in order, through flushes.
        let mut got = Vec::new();
        let mut buf = [0u8; 16];
        while got.len() < n as usize && start.elapsed() < std::time::Duration::from_secs(10) {
            while let Ok(k) = dp.recv(&mut buf) {
                got.push(u32::from_le_bytes(buf[..k].try_into().expect("4 bytes")));
            }
            agent.flush();
        }
        assert_eq!(got, (0..n).collect::<Vec<_>>());
        // Beyond the bound the oldest go first, counted.
        let big = vec![1u8; 64 * 1024];
        let mut errors = 0;
        for _ in 0..(2 * MAX_WAITING_BYTES / big.len()) {
            errors += usize::from(agent.send(&big, &dp_path).is_err());
        }
        assert!(errors > 0 && agent.dropped_sends() as usize == errors);
        drop(dp);
        let _ = std::fs::remove_file(&dp_path);
        agent.flush();
        assert_eq!(agent.take_unreachable(), vec![dp_path.clone()]);
        assert!(
            agent.send(b"x", &dp_path).is_err(),
            "gone: nothing waits for it"
        );
    }

    #[test]
    fn a_datapath_that_reads_batches_gets_held_messages_in_one_datagram_at_flush() {
        let agent =
            UnixSocket::bind(&format!("unit-agent-b-{}", std::process::id()), None).expect("bind");
        let dp_path = std::env::temp_dir().join(format!("unit-dp-b-{}", std::process::id()));
        let _ = std::fs::remove_file(&dp_path);
        let dp = UnixDatagram::bind(&dp_path).expect("bind dp");
        dp.set_nonblocking(true).expect("nonblocking");
        let mut buf = vec![0u8; 4 * MAX_BATCH_BYTES];
        agent.send(b"one", &dp_path).expect("send");
        assert_eq!(
            dp.recv(&mut buf).ok(),
            Some(3),
            "not batched before it said so"
        );
        agent.batch_to(&dp_path);
        agent.send(b"two", &dp_path).expect("send");
        agent.send(b"three", &dp_path).expect("send");
        assert!(dp.recv(&mut buf).is_err(), "held until flush");
        agent.flush();
        assert_eq!(
            dp.recv(&mut buf).map(|n| buf[..n].to_vec()).ok(),
            Some(b"twothree".to_vec())
        );
        // More than a batch's worth goes out as the batch fills, never above MAX_BATCH_BYTES.
        let big = vec![7u8; MAX_BATCH_BYTES / 3 + 1];
        for _ in 0..3 {
            agent.send(&big, &dp_path).expect("send");
        }
        agent.flush();
        let sizes: Vec<usize> = std::iter::from_fn(|| dp.recv(&mut buf).ok()).collect();
        assert_eq!(sizes, vec![2 * big.len(), big.len()]);
        drop(dp);
        let _ = std::fs::remove_file(&dp_path);
    }
}
