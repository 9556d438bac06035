//! The datapath's unix datagram socket to the agent (docs/datapaths.md §2.1): bound at a
//! named path, everything sent from it, and only the agent's own address heard.

use std::io;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ccp_host::ToAgent;
use ccp_wire::{msg_type, peek_header};

/// How long a send may wait for room in the agent's queue before the message is dropped.
const SEND_WAIT: Duration = Duration::from_millis(20);

/// Why the socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("binding {path}: {source}")]
    Bind { path: PathBuf, source: io::Error },
    #[error(transparent)]
    Perms(#[from] ccp_rundir::PermError),
}

/// Where a path for a CCP socket name lives: a bare name under /tmp/ccp, as the agent's
/// `--bind NAME`; anything with a slash as given.
pub fn socket_path(name_or_path: &str) -> PathBuf {
    if name_or_path.contains('/') {
        PathBuf::from(name_or_path)
    } else {
        Path::new("/tmp/ccp").join(name_or_path)
    }
}

/// What a receive found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// A datagram of this many bytes from the agent's address.
    Agent(usize),
    /// A datagram from anyone else, dropped unread.
    Rejected,
}

/// The socket and what became of the sends.
#[derive(Debug)]
pub struct AgentLink {
    sock: UnixDatagram,
    /// This datapath's socket file.
    path: PathBuf,
    /// The agent's socket: the only address sent to and heard from.
    agent: PathBuf,
    /// While false only SYNC probes go out: a found agent gets Ready and the live Creates
    /// again, so what a lost one missed is not worth keeping.
    pub reachable: bool,
    /// A send found no agent (nobody bound, or its queue full for `SEND_WAIT`).
    pub send_failed: bool,
    /// Messages that could not be sent.
    pub dropped: u64,
    /// Measures (reports and closes) sent.
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
        sock.set_write_timeout(Some(SEND_WAIT)).map_err(bind_err)?;
        Ok(AgentLink {
            sock,
            path: path.to_owned(),
            agent: agent.to_owned(),
            reachable: true,
            send_failed: false,
            dropped: 0,
            measures: 0,
        })
    }

    /// Waits up to `wait` for one datagram.
    pub fn recv(&self, buf: &mut [u8], wait: Duration) -> Option<Received> {
        // A zero timeout would mean "block for ever".
        let wait = wait.max(Duration::from_micros(1));
        self.sock.set_read_timeout(Some(wait)).ok()?;
        let (n, from) = self.sock.recv_from(buf).ok()?;
        Some(if from.as_pathname() == Some(self.agent.as_path()) {
            Received::Agent(n)
        } else {
            Received::Rejected
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl ToAgent for AgentLink {
    fn send(&mut self, msg: &[u8]) {
        let typ = peek_header(msg).map(|h| h.typ).ok();
        if !self.reachable && typ != Some(msg_type::SYNC) {
            return;
        }
        match self.sock.send_to(msg, &self.agent) {
            Ok(_) => self.measures += u64::from(typ == Some(msg_type::MEASURE)),
            Err(_) => {
                self.dropped += 1;
                self.send_failed = true;
            }
        }
    }
}

// libccp keeps its datapath, and so this link, for the life of the process; the link is
// dropped only when libccp's start fails, and the host thread removes the file otherwise.
impl Drop for AgentLink {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
