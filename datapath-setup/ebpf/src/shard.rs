//! One libccp datapath and its unix socket to the agent.
//!
//! libccp allows 1024 connections per datapath and the crate cannot change that
//! (docs/datapaths.md §5.1), so the daemon runs several shards, each bound to its own
//! socket path (portus tells datapaths apart by that path, docs/datapaths.md §2.1).
//!
//! libccp never retries a Create or a Ready (docs/datapaths.md §5.4): the shard keeps
//! every live flow's Create bytes (captured in `send_msg`, which `Connection::start` calls
//! synchronously) and re-sends Ready and all of them when the agent (re)appears (see
//! `liveness.rs` for how the daemon tells).
//!
//! Every message goes through the shard's outbox (`outbox.rs`), which the daemon flushes
//! each loop turn: a full agent queue delays messages instead of losing them.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use ccp_wire::{HEADER_LEN, msg_type};

use crate::outbox::{Outbox, OutboxStats, Sent};

/// Whether the agent answers on this shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentState {
    /// Every message since the last resync reached a live agent.
    Alive,
    /// Its socket is gone, its queue stalled, or probes went unanswered: Ready and the
    /// Creates must be sent again when it answers.
    Lost,
}

/// What a shard's socket delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// A datagram of this many bytes from the agent's address.
    Agent(usize),
    /// A datagram from any other sender, dropped.
    Rejected,
}

/// The socket side of a shard, shared between the daemon and libccp's `send_msg`.
#[derive(Debug)]
pub struct ShardIo {
    sock: UnixDatagram,
    path: PathBuf,
    agent: PathBuf,
    /// Create message bytes of every live connection, by sid.
    creates: HashMap<u32, Vec<u8>>,
    /// The sid of the last Create libccp sent (how a new connection learns its sid).
    last_create_sid: Option<u32>,
    state: AgentState,
    /// Messages waiting for room in the agent's queue.
    outbox: Outbox,
    /// Times the agent could not be reached at all, or its queue stalled.
    pub send_errors: u64,
}

impl ShardIo {
    fn note_and_send(&mut self, msg: &[u8]) {
        if msg.len() >= HEADER_LEN {
            let typ = u16::from_le_bytes([msg[0], msg[1]]);
            let sid = u32::from_le_bytes([msg[4], msg[5], msg[6], msg[7]]);
            match typ {
                msg_type::CREATE => {
                    self.creates.insert(sid, msg.to_vec());
                    self.last_create_sid = Some(sid);
                }
                // A Measure with no fields is libccp's close; the sid is free again.
                msg_type::MEASURE if msg.len() == ccp_wire::msg_len::MEASURE_BASE => {
                    self.creates.remove(&sid);
                }
                _ => {}
            }
        }
        self.send(msg);
    }

    /// Queue a message for the agent. While it is lost only probes are worth keeping: the
    /// resync sends whatever a found agent needs.
    pub fn send(&mut self, msg: &[u8]) {
        let probe = msg.len() >= 2 && u16::from_le_bytes([msg[0], msg[1]]) == msg_type::SYNC;
        if self.state == AgentState::Alive || probe {
            self.outbox.push(msg);
        }
    }

    /// Send what waits. A gone agent, or one whose queue has not moved for a long time,
    /// is lost. True when nothing waits any more.
    fn flush(&mut self, now_ns: u64, batch: bool) -> bool {
        let (sock, agent) = (&self.sock, &self.agent);
        let result = self
            .outbox
            .flush(now_ns, batch, |d| match sock.send_to(d, agent) {
                Ok(_) => Sent::Yes,
                Err(e) => Sent::from_error(&e),
            });
        if result == Sent::Gone || self.outbox.stalled(now_ns) {
            self.send_errors += 1;
            self.state = AgentState::Lost;
            self.outbox.clear();
        }
        result == Sent::Yes
    }
}

/// libccp's `DatapathOps` for a shard.
struct Ops(Rc<RefCell<ShardIo>>);

impl libccp::DatapathOps for Ops {
    fn send_msg(&mut self, msg: &[u8]) {
        self.0.borrow_mut().note_and_send(msg);
    }
}

/// A libccp datapath bound to its own socket.
pub struct Shard {
    /// Lives as long as the process: connections borrow it for `'static`.
    pub dp: &'static libccp::Datapath,
    pub io: Rc<RefCell<ShardIo>>,
    /// Live connections on this shard.
    pub flows: usize,
    /// Datapath id sent in Ready.
    id: u32,
}

impl std::fmt::Debug for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shard")
            .field("id", &self.id)
            .field("io", &self.io)
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
        // Only the agent (root, or the shared group) may write to the datapath.
        ccp_rundir::set_owner_mode(path, ccp_rundir::socket_mode(gid), gid)
            .map_err(ShardError::Perms)?;
        let io = Rc::new(RefCell::new(ShardIo {
            sock,
            path: path.to_owned(),
            agent: agent.to_owned(),
            creates: HashMap::new(),
            last_create_sid: None,
            state: AgentState::Alive,
            outbox: Outbox::default(),
            send_errors: 0,
        }));
        let dp = libccp::DatapathBuilder::default()
            .with_id(id)
            .with_ops(Ops(io.clone()))
            .init()
            .map_err(ShardError::Libccp)?;
        Ok(Shard {
            dp: Box::leak(Box::new(dp)),
            io,
            flows: 0,
            id,
        })
    }

    pub fn fd(&self) -> RawFd {
        self.io.borrow().sock.as_raw_fd()
    }

    pub fn state(&self) -> AgentState {
        self.io.borrow().state
    }

    /// What waits was meant for the lost agent; a resync sends what the next one needs.
    pub fn mark_lost(&self) {
        let mut io = self.io.borrow_mut();
        io.state = AgentState::Lost;
        io.outbox.clear();
    }

    /// Take the sid of the Create the last `Connection::start` sent.
    pub fn take_create_sid(&self) -> Option<u32> {
        self.io.borrow_mut().last_create_sid.take()
    }

    pub fn send(&self, msg: &[u8]) {
        self.io.borrow_mut().send(msg);
    }

    /// Send what waits (`batch`: several messages per datagram). True when nothing waits.
    pub fn flush(&self, now_ns: u64, batch: bool) -> bool {
        self.io.borrow_mut().flush(now_ns, batch)
    }

    /// The agent answered after being lost. It may be a new one, and Ready makes any agent
    /// forget this datapath's flows, so Ready and every live flow's Create are queued again
    /// (nothing else: what the lost agent missed means nothing now). They leave at the
    /// agent's pace, not into a full queue.
    pub fn resync(&self) {
        let mut guard = self.io.borrow_mut();
        let io = &mut *guard;
        io.state = AgentState::Alive;
        io.outbox.clear();
        io.outbox.push(&ccp_wire::encode_ready(self.id));
        let mut sids: Vec<&u32> = io.creates.keys().collect();
        sids.sort_unstable();
        for sid in sids {
            io.outbox.push(&io.creates[sid]);
        }
    }

    /// Receive one datagram, if any. Only the agent's own socket address may steer flows:
    /// anything else (another path, an unbound or abstract sender) is rejected unread.
    pub fn recv(&self, buf: &mut [u8]) -> Option<Received> {
        let io = self.io.borrow();
        let (n, from) = io.sock.recv_from(buf).ok()?;
        Some(if from.as_pathname() == Some(io.agent.as_path()) {
            Received::Agent(n)
        } else {
            Received::Rejected
        })
    }

    pub fn remove_socket(&self) {
        let _ = std::fs::remove_file(&self.io.borrow().path);
    }

    pub fn live_creates(&self) -> usize {
        self.io.borrow().creates.len()
    }

    /// Messages waiting now, and the outbox's counts.
    pub fn outbox(&self) -> (usize, OutboxStats) {
        let io = self.io.borrow();
        (io.outbox.len(), io.outbox.stats)
    }
}
