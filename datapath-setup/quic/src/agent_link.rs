//! The datapath's unix datagram socket to the agent (docs/datapaths.md §2.1): bound at a
//! named path, everything sent from it, and only the agent heard (`ccp_host::agent_socket`).
//!
//! Sends never block: every message goes through the outbox (`ccp_host::outbox`), which
//! the host thread flushes each loop turn, so a full agent queue delays messages instead of
//! losing them or stalling libccp.

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ccp_host::{Flushed, Outbox, Received, ToAgent};
use ccp_wire::{msg_type, peek_header};

/// Why the socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("binding {path}: {source}")]
    Bind { path: PathBuf, source: io::Error },
    #[error(transparent)]
    Perms(#[from] ccp_rundir::PermError),
}

/// The socket and what became of the sends.
#[derive(Debug)]
pub struct AgentLink {
    sock: UnixDatagram,
    /// This datapath's socket file.
    path: PathBuf,
    /// The agent's socket: the only address sent to and heard from.
    agent: PathBuf,
    /// Messages waiting for room in the agent's queue; while the agent is lost only SYNC
    /// probes, as a found agent gets Ready and the live Creates again.
    pub outbox: Outbox,
    /// Measures (reports and closes) handed to the outbox for a live agent.
    pub measures: u64,
}

impl AgentLink {
    /// Binds `path` (0600, or 0660 with a group `gid` that shares it with the agent),
    /// replacing a stale socket file, with `agent` as the only peer.
    pub fn bind(path: &Path, agent: &Path, gid: Option<u32>) -> Result<Self, LinkError> {
        let bind_err = |source| LinkError::Bind {
            path: path.to_owned(),
            source,
        };
        if let Some(dir) = path.parent() {
            let dir_mode = if gid.is_some() { 0o775 } else { 0o755 };
            ccp_rundir::secure_dir(dir, dir_mode, gid)?;
        }
        // A socket file left by a killed process would make bind fail.
        let _ = std::fs::remove_file(path);
        let sock = UnixDatagram::bind(path).map_err(bind_err)?;
        ccp_rundir::set_owner_mode(path, ccp_rundir::socket_mode(gid), gid)?;
        sock.set_nonblocking(true).map_err(bind_err)?;
        ccp_host::receive_credentials(&sock).map_err(bind_err)?;
        Ok(AgentLink {
            sock,
            path: path.to_owned(),
            agent: agent.to_owned(),
            outbox: Outbox::default(),
            measures: 0,
        })
    }

    /// Waits up to `wait` for one datagram.
    pub fn recv(&self, buf: &mut [u8], wait: Duration) -> Option<Received> {
        let mut fd = libc::pollfd {
            fd: self.sock.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let wait_ms = libc::c_int::try_from(wait.as_millis()).unwrap_or(libc::c_int::MAX);
        // SAFETY: `fd` is one valid pollfd.
        unsafe { libc::poll(&mut fd, 1, wait_ms) };
        ccp_host::recv_from_agent(&self.sock, &self.agent, buf)
    }

    /// Sends what waits (`batch`: several messages per datagram, for an agent that reads
    /// them so). A gone agent, or one whose queue has not moved for a long time, is lost.
    pub fn flush(&mut self, now_ns: u64, batch: bool) -> Flushed {
        self.outbox.flush_to(now_ns, batch, &self.sock, &self.agent)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl ToAgent for AgentLink {
    fn send(&mut self, msg: &[u8]) {
        let measure = peek_header(msg).is_ok_and(|h| h.typ == msg_type::MEASURE);
        self.measures += u64::from(measure && !self.outbox.lost());
        self.outbox.push(msg);
    }
}

// libccp keeps its datapath, and so this link, for the life of the process; the link is
// dropped only when libccp's start fails, and the host thread removes the file otherwise.
impl Drop for AgentLink {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
