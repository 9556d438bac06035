//! The unix socket to the agent, and lock-step through SYNC.
//!
//! The datapath binds its own path (the agent replies to the sender's address and drops
//! unbound senders; docs/datapaths.md §2.1) and sends everything from it: libccp's messages
//! (through [`Outbox`], the host's [`ToAgent`]), PRIORITY and SYNC. After anything was
//! sent, [`AgentLink::sync`] sends SYNC and reads until the agent's echo of that token;
//! every other agent message on the way (Install, ChangeProg, UpdateFields) goes to
//! libccp through the [`Host`]. The agent answers in order, so when the echo arrives every
//! decision it took on what came before is staged in libccp: the next simulated ACK sees
//! it, deterministically.

use crate::clock::real_monotonic_ns;
use ccp_host::{AgentMsg, Host, Incoming, ToAgent, split};
use ccp_wire::{encode_sync, msg_type, peek_header};
use std::cell::RefCell;
use std::io;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;
use thiserror::Error;

/// Largest agent message libccp accepts (its BIGGEST_MSG_SIZE).
const RECV_BUF: usize = 32 * 1024;
/// How long one attempt of the start-up SYNC waits for its echo.
const PROBE_WAIT: Duration = Duration::from_millis(250);
/// Pause between start-up attempts while the agent's socket does not exist.
const PROBE_RETRY: Duration = Duration::from_millis(100);

/// Why talking to the agent failed.
#[derive(Debug, Error)]
pub enum LinkError {
    #[error("cannot bind the datapath socket {path}: {source}")]
    Bind { path: PathBuf, source: io::Error },
    #[error(
        "agent at {agent} did not answer within {waited_ms} ms (no SYNC echo; is `ccp-agent --bind {name}` running?)"
    )]
    NoAgent {
        agent: PathBuf,
        name: String,
        waited_ms: u64,
    },
    #[error("agent at {agent} did not answer SYNC {token} within {waited_ms} ms")]
    Timeout {
        agent: PathBuf,
        token: u64,
        waited_ms: u64,
    },
    #[error("sending to the agent at {agent} failed: {source}")]
    Send { agent: PathBuf, source: io::Error },
    #[error("reading from the agent socket failed: {0}")]
    Recv(io::Error),
}

/// What libccp sent since the last look, recorded by [`Outbox`].
#[derive(Debug, Default)]
pub struct Sent {
    /// Messages sent (any type).
    pub messages: u64,
    /// (sid, program uid, fields) of every Measure with fields (reports; closes excluded).
    pub reports: Vec<(u32, u32, Vec<u64>)>,
    /// The first send error, if any.
    pub error: Option<io::Error>,
}

/// The host's way to the agent: sends on the datapath's socket and records what went out.
#[derive(Debug)]
pub struct Outbox {
    sock: UnixDatagram,
    agent: PathBuf,
    sent: Rc<RefCell<Sent>>,
}

impl ToAgent for Outbox {
    fn send(&mut self, msg: &[u8]) {
        let mut sent = self.sent.borrow_mut();
        sent.messages += 1;
        if peek_header(msg).is_ok_and(|h| h.typ == msg_type::MEASURE) {
            if let Ok(ccp_wire::DatapathMsg::Measure(m)) = ccp_wire::decode(msg) {
                if !m.is_close() {
                    sent.reports.push((m.sid, m.program_uid, m.fields));
                }
            }
        }
        if let Err(e) = self.sock.send_to(msg, &self.agent) {
            sent.error.get_or_insert(e);
        }
    }
}

/// Counters of what came back from the agent.
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct AgentStats {
    /// Messages handed to libccp.
    pub delivered: u64,
    /// Of those, how many libccp refused.
    pub refused: u64,
    /// Malformed datagrams, or agent messages that arrived before libccp existed.
    pub dropped: u64,
    /// SYNC round trips.
    pub syncs: u64,
}

/// The datapath's socket and the agent's address.
#[derive(Debug)]
pub struct AgentLink {
    sock: UnixDatagram,
    own: PathBuf,
    agent: PathBuf,
    agent_name: String,
    timeout: Duration,
    next_token: u64,
    buf: Vec<u8>,
    sent: Rc<RefCell<Sent>>,
    stats: AgentStats,
    last_refusal: Option<libccp::LibccpError>,
}

impl AgentLink {
    /// Binds `bind` (a stale socket file there is replaced) to talk to `agent`.
    pub fn bind(bind: &str, agent: &str, timeout: Duration) -> Result<Self, LinkError> {
        let own = ccp_rundir::socket_path(bind);
        let err = |source| LinkError::Bind {
            path: own.clone(),
            source,
        };
        if let Some(dir) = own.parent() {
            std::fs::create_dir_all(dir).map_err(err)?;
        }
        match std::fs::remove_file(&own) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(err(e)),
        }
        let sock = UnixDatagram::bind(&own).map_err(err)?;
        remove_on_signal(&own);
        Ok(AgentLink {
            sock,
            own,
            agent: ccp_rundir::socket_path(agent),
            agent_name: agent.to_owned(),
            timeout,
            next_token: 1,
            buf: vec![0; RECV_BUF],
            sent: Rc::new(RefCell::new(Sent::default())),
            stats: AgentStats::default(),
            last_refusal: None,
        })
    }

    /// The host's way to the agent, sending from this socket.
    pub fn outbox(&self) -> io::Result<Outbox> {
        Ok(Outbox {
            sock: self.sock.try_clone()?,
            agent: self.agent.clone(),
            sent: Rc::clone(&self.sent),
        })
    }

    /// What libccp sent since the last call.
    pub fn take_sent(&self) -> Sent {
        std::mem::take(&mut *self.sent.borrow_mut())
    }

    /// True when libccp sent something since the last [`take_sent`](Self::take_sent).
    pub fn has_unsynced(&self) -> bool {
        self.sent.borrow().messages > 0
    }

    pub fn agent_path(&self) -> &Path {
        &self.agent
    }

    pub fn own_path(&self) -> &Path {
        &self.own
    }

    pub fn stats(&self) -> AgentStats {
        self.stats
    }

    /// The last error libccp returned for an agent message, if any.
    pub fn last_refusal(&self) -> Option<libccp::LibccpError> {
        self.last_refusal
    }

    /// Sends raw bytes (PRIORITY) from the datapath's socket.
    pub fn send(&self, msg: &[u8]) -> Result<(), LinkError> {
        self.sock
            .send_to(msg, &self.agent)
            .map(|_| ())
            .map_err(|source| LinkError::Send {
                agent: self.agent.clone(),
                source,
            })
    }

    /// Waits until the agent answers a SYNC, retrying for `total`.
    pub fn wait_for_agent(&mut self, total: Duration) -> Result<(), LinkError> {
        let deadline = real_monotonic_ns() + total.as_nanos() as u64;
        while real_monotonic_ns() < deadline {
            let token = self.next_token;
            self.next_token += 1;
            if self
                .sock
                .send_to(&encode_sync(0, token), &self.agent)
                .is_err()
            {
                // No agent socket yet (or nobody reading it).
                std::thread::sleep(PROBE_RETRY);
                continue;
            }
            match self.wait_echo(token, PROBE_WAIT, None) {
                Ok(()) => return Ok(()),
                Err(LinkError::Timeout { .. }) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(LinkError::NoAgent {
            agent: self.agent.clone(),
            name: self.agent_name.clone(),
            waited_ms: total.as_millis() as u64,
        })
    }

    /// One lock-step barrier: SYNC, then everything the agent sends up to the echo goes to
    /// libccp. Fails if a send failed since the last barrier or the echo does not come.
    pub fn sync(&mut self, host: &Host<Outbox>) -> Result<(), LinkError> {
        if let Some(source) = self.sent.borrow_mut().error.take() {
            return Err(LinkError::Send {
                agent: self.agent.clone(),
                source,
            });
        }
        let token = self.next_token;
        self.next_token += 1;
        self.send(&encode_sync(0, token))?;
        self.stats.syncs += 1;
        self.wait_echo(token, self.timeout, Some(host))
    }

    fn wait_echo(
        &mut self,
        token: u64,
        wait: Duration,
        host: Option<&Host<Outbox>>,
    ) -> Result<(), LinkError> {
        let start = real_monotonic_ns();
        let deadline = start + wait.as_nanos() as u64;
        loop {
            let now = real_monotonic_ns();
            if now >= deadline {
                return Err(LinkError::Timeout {
                    agent: self.agent.clone(),
                    token,
                    waited_ms: (now - start) / 1_000_000,
                });
            }
            // The kernel's timer, not `Instant` (which may be virtual).
            let left = Duration::from_nanos(deadline - now).max(Duration::from_micros(1));
            self.sock
                .set_read_timeout(Some(left))
                .map_err(LinkError::Recv)?;
            let n = match self.sock.recv(&mut self.buf) {
                Ok(n) => n,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) =>
                {
                    continue;
                }
                Err(e) => return Err(LinkError::Recv(e)),
            };
            if self.handle_datagram(n, token, host) {
                return Ok(());
            }
        }
    }

    /// Handles one datagram (one or more messages); true if it held the awaited echo.
    /// Older tokens are late echoes of start-up probes; before libccp exists (`host` is
    /// `None`) anything but SYNC is dropped.
    fn handle_datagram(&mut self, n: usize, token: u64, host: Option<&Host<Outbox>>) -> bool {
        let mut echoed = false;
        let stats = &mut self.stats;
        let datagram = &mut self.buf[..n];
        match host {
            Some(host) => host.receive(datagram, |m| match m {
                Incoming::Sync { token: t, .. } => echoed |= t == token,
                Incoming::Delivered(_) => stats.delivered += 1,
                Incoming::Refused(_, e) => {
                    stats.delivered += 1;
                    stats.refused += 1;
                    self.last_refusal = Some(e);
                }
                Incoming::Malformed(_) => stats.dropped += 1,
            }),
            None => {
                let malformed = split(datagram, |m| match m {
                    AgentMsg::Sync { token: t, .. } => echoed |= t == token,
                    AgentMsg::Other { .. } | AgentMsg::Malformed(_) => stats.dropped += 1,
                });
                stats.dropped += u64::from(malformed.is_some());
            }
        }
        echoed
    }
}

/// The socket path to unlink if the process is killed by SIGINT or SIGTERM (set once).
static SOCKET_PATH: std::sync::OnceLock<std::ffi::CString> = std::sync::OnceLock::new();

extern "C" fn unlink_and_exit(sig: libc::c_int) {
    if let Some(p) = SOCKET_PATH.get() {
        // SAFETY: unlink(2) is async-signal-safe and `p` is a NUL-terminated string that
        // lives for the rest of the process.
        unsafe { libc::unlink(p.as_ptr()) };
    }
    // SAFETY: _exit(2) is async-signal-safe; the conventional status of a signal death.
    unsafe { libc::_exit(128 + sig) };
}

/// Removes the datapath's socket file when an interrupted test or a user kills the
/// process (only the first bound socket of a process; later ones rely on `Drop`).
fn remove_on_signal(path: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return;
    };
    if SOCKET_PATH.set(c).is_err() {
        return;
    }
    let handler = unlink_and_exit as extern "C" fn(libc::c_int) as libc::sighandler_t;
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: installs a handler that only calls async-signal-safe functions.
        unsafe { libc::signal(sig, handler) };
    }
}

impl Drop for AgentLink {
    fn drop(&mut self) {
        // Best effort: a socket file left behind is harmless but confusing.
        let _ = std::fs::remove_file(&self.own);
    }
}
