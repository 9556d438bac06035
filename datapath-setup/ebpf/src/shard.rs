//! One libccp datapath and its unix socket to the agent.
//!
//! libccp allows 1024 connections per datapath and the crate cannot change that
//! (docs/datapaths.md §5.1), so the daemon runs several shards, each bound to its own
//! socket path (portus tells datapaths apart by that path, docs/datapaths.md §2.1).
//!
//! The libccp side (the Creates kept for a resync, the sid of each new connection, agent
//! datagrams handed to libccp) is `ccp-host`'s; the shard adds the socket, the outbox and
//! the agent's state. libccp never retries a Create or a Ready (docs/datapaths.md §5.4):
//! the shard re-sends Ready and every live flow's Create when the agent (re)appears (see
//! `ccp_host::liveness` for how the daemon tells).
//!
//! Every message goes through the shard's outbox (`ccp_host::outbox`), which the daemon
//! flushes each loop turn (at most 1 ms apart): a full agent queue delays messages instead
//! of losing them.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};

use ccp_host::{Flushed, Host, Outbox, OutboxStats, Received, ToAgent};

/// The socket side of a shard: how its host's messages reach the agent.
#[derive(Debug)]
pub struct ShardIo {
    sock: UnixDatagram,
    path: PathBuf,
    agent: PathBuf,
    /// Messages waiting for room in the agent's queue, and whether the agent is lost on
    /// this shard (its socket gone, its queue stalled, or the daemon lost it otherwise):
    /// then Ready and the Creates must be sent again when it answers.
    outbox: Outbox,
    /// Times the agent could not be reached at all, or its queue stalled.
    send_errors: u64,
}

impl ToAgent for ShardIo {
    fn send(&mut self, msg: &[u8]) {
        self.outbox.push(msg);
    }
}

/// A libccp datapath bound to its own socket.
pub struct Shard {
    pub host: Host<ShardIo>,
    /// Live connections on this shard.
    pub flows: usize,
    /// Datapath id sent in Ready.
    id: u32,
}

impl std::fmt::Debug for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shard")
            .field("id", &self.id)
            .field("host", &self.host)
            .field("flows", &self.flows)
            .finish()
    }
}

/// Why a shard could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    #[error("binding {path}: {source}")]
    Bind { path: PathBuf, source: io::Error },
    #[error(transparent)]
    Perms(ccp_rundir::PermError),
    #[error("libccp datapath init failed: {0:?}")]
    Libccp(libccp::LibccpError),
}

impl Shard {
    /// Bind `path` and start a libccp datapath on it (which sends Ready).
    pub fn new(id: u32, path: &Path, agent: &Path, gid: Option<u32>) -> Result<Self, ShardError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| ShardError::Bind {
                path: path.to_owned(),
                source,
            })?;
        }
        // A stale socket file from a killed daemon would make bind fail.
        let _ = std::fs::remove_file(path);
        let bind_err = |source| ShardError::Bind {
            path: path.to_owned(),
            source,
        };
        let sock = UnixDatagram::bind(path).map_err(bind_err)?;
        sock.set_nonblocking(true).map_err(bind_err)?;
        ccp_host::receive_credentials(&sock).map_err(bind_err)?;
        // Only the agent (root, or the shared group) may write to the datapath.
        ccp_rundir::set_owner_mode(path, ccp_rundir::socket_mode(gid), gid)
            .map_err(ShardError::Perms)?;
        let io = ShardIo {
            sock,
            path: path.to_owned(),
            agent: agent.to_owned(),
            outbox: Outbox::default(),
            send_errors: 0,
        };
        Ok(Shard {
            host: Host::new(id, io).map_err(ShardError::Libccp)?,
            flows: 0,
            id,
        })
    }

    pub fn fd(&self) -> RawFd {
        self.host.to_agent().sock.as_raw_fd()
    }

    /// Whether the agent is lost on this shard: it needs a resync when it answers.
    pub fn agent_lost(&self) -> bool {
        self.host.to_agent().outbox.lost()
    }

    /// What waits was meant for the lost agent; a resync sends what the next one needs.
    pub fn mark_lost(&self) {
        self.host.to_agent().outbox.mark_lost();
    }

    pub fn send(&self, msg: &[u8]) {
        self.host.to_agent().send(msg);
    }

    /// Send what waits (`batch`: several messages per datagram). A gone agent, or one whose
    /// queue has not moved for a long time, is lost (`Flushed::Lost`, this turn).
    pub fn flush(&self, now_ns: u64, batch: bool) -> Flushed {
        let mut io = self.host.to_agent();
        let io = &mut *io;
        let flushed = io.outbox.flush_to(now_ns, batch, &io.sock, &io.agent);
        if flushed == Flushed::Lost {
            io.send_errors += 1;
        }
        flushed
    }

    /// The agent answered after being lost: Ready and every live flow's Create go again
    /// (`Outbox::resync`).
    pub fn resync(&self) {
        let creates = self.host.live_creates();
        let ready = ccp_wire::encode_ready(self.id);
        self.host.to_agent().outbox.resync(&ready, &creates);
    }

    /// Receive one datagram, if any (`ccp_host::recv_from_agent`).
    pub fn recv(&self, buf: &mut [u8]) -> Option<Received> {
        let io = self.host.to_agent();
        ccp_host::recv_from_agent(&io.sock, &io.agent, buf)
    }

    pub fn remove_socket(&self) {
        let _ = std::fs::remove_file(&self.host.to_agent().path);
    }

    /// Messages waiting now, the outbox's counts, and the send errors.
    pub fn outbox(&self) -> (usize, OutboxStats, u64) {
        let io = self.host.to_agent();
        (io.outbox.len(), io.outbox.stats, io.send_errors)
    }
}
