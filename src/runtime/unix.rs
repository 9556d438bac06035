//! The agent's unix datagram socket.
//!
//! portus' unix socket sends with a plain blocking `sendto`: a datapath that stops reading
//! (its queue is full at `net.unix.max_dgram_qlen` messages) would stall the agent for every
//! other datapath. This socket binds the same path portus does (`/tmp/ccp/<name>`) and
//! receives the same way, but every send waits at most [`SEND_TIMEOUT`]; a datapath that
//! cannot take a message in that time loses it (counted), and one that is gone is forgotten.
//!
//! A datapath that reads several messages per datagram (it said so in a SYNC, docs/wire.md)
//! gets what the agent has for it held and sent together at `flush`: one datagram instead
//! of one per message, so its queue of `net.unix.max_dgram_qlen` datagrams rarely fills and
//! the agent rarely waits.

use super::transport::{RECV_TIMEOUT, Receive, Transport, Unreachable, is_idle};
use ccp_wire::MAX_BATCH_BYTES;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::io::ErrorKind;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Longest a send may wait for a datapath to make room.
pub const SEND_TIMEOUT: Duration = Duration::from_millis(20);

/// Why the agent's socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Perms(#[from] ccp_rundir::PermError),
}

/// The agent's bound socket.
#[derive(Debug)]
pub struct UnixSocket {
    sock: UnixDatagram,
    path: PathBuf,
    unreachable: RefCell<HashSet<PathBuf>>,
    /// Messages dropped because a datapath's queue stayed full.
    dropped: RefCell<u64>,
    /// Bytes held for each datapath that reads batches.
    held: RefCell<HashMap<PathBuf, Vec<u8>>>,
}

impl UnixSocket {
    /// Binds `/tmp/ccp/<name>`, replacing a stale socket file, as portus does. The
    /// directory must be root's or ours and closed to others; the socket gets mode 0600, or
    /// 0660 with the group `gid` (whatever the umask).
    pub fn bind(name: &str, gid: Option<u32>) -> Result<Self, BindError> {
        let dir = Path::new("/tmp/ccp");
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
        sock.set_write_timeout(Some(SEND_TIMEOUT))?;
        Ok(UnixSocket {
            sock,
            path,
            unreachable: RefCell::default(),
            dropped: RefCell::new(0),
            held: RefCell::default(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// One datagram, waiting at most `SEND_TIMEOUT` for room.
    fn send_now(&self, datagram: &[u8], to: &PathBuf) -> Result<(), String> {
        match self.sock.send_to(datagram, to) {
            Ok(_) => Ok(()),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                *self.dropped.borrow_mut() += 1;
                Err(format!("datapath {} is not reading: {e}", to.display()))
            }
            Err(e) => {
                self.held.borrow_mut().remove(to);
                self.unreachable.borrow_mut().insert(to.clone());
                Err(format!("datapath {} unreachable: {e}", to.display()))
            }
        }
    }
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
        *self.dropped.borrow()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_datapath_that_does_not_read_costs_a_bounded_wait() {
        let agent =
            UnixSocket::bind(&format!("unit-agent-{}", std::process::id()), None).expect("bind");
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(agent.path()).expect("stat").permissions(),
        );
        assert_eq!(mode & 0o777, 0o600, "the socket's mode is not the umask's");
        let dp_path = std::env::temp_dir().join(format!("unit-dp-{}", std::process::id()));
        let _ = std::fs::remove_file(&dp_path);
        let dp = UnixDatagram::bind(&dp_path).expect("bind dp");
        let start = std::time::Instant::now();
        let mut failures = 0;
        for _ in 0..30 {
            if agent.send(b"x", &dp_path).is_err() {
                failures += 1;
            }
        }
        // The queue takes a handful; the rest time out, each after SEND_TIMEOUT at most.
        assert!(failures > 0 && agent.dropped_sends() == failures);
        assert!(start.elapsed() < SEND_TIMEOUT * (failures as u32 + 20));
        assert!(
            agent.take_unreachable().is_empty(),
            "a slow datapath is not a lost one"
        );
        drop(dp);
        let _ = std::fs::remove_file(&dp_path);
        assert!(agent.send(b"x", &dp_path).is_err());
        assert_eq!(agent.take_unreachable(), vec![dp_path]);
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
