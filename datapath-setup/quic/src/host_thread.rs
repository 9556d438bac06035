//! The thread that owns libccp: one `ccp_host::Host` on the agent socket, every attached
//! connection's libccp connection, and the agent's liveness.
//!
//! Each loop turn (at most `TURN` apart): the controllers' events (at most
//! `EVENTS_PER_TURN`) are fed to libccp (one `invoke` per ACK frame), what libccp sent
//! leaves through the link's outbox, the agent's datagrams are handed to libccp, libccp's
//! windows and rates are published to the controllers, and the agent is probed with SYNC.
//!
//! Whether the agent is alive is `ccp_host::Liveness`, with a silence window of
//! [`AGENT_SILENCE`]: it is lost when a send fails, when it echoed SYNC and then fell
//! silent, or when it answers a probe with "no Ready from you" (a new agent at the old
//! address). While lost, no decision holds: every controller runs its fallback. When it is
//! found, Ready, every live Create and every priority set are sent again.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};

use ccp_host::{AfterFlush, Decided, Host, Incoming, Liveness, Loss, Received, Timing, ToAgent};
use ccp_wire::msg_type;

use crate::agent_link::AgentLink;
use crate::flow::{AGENT_SILENCE, AckSample, Decision, Event, FlowId, FlowStart, HostClock};
use crate::priority::Priority;

/// Longest wait for the agent's datagrams in one loop turn: the delay an event may see.
const TURN: Duration = Duration::from_millis(1);
/// SYNC probes every 50 ms, so that an echoing agent is heard well within the window in
/// which its decisions hold ([`AGENT_SILENCE`], also its silence window).
const AGENT_TIMING: Timing = Timing {
    probe_interval_ns: 50_000_000,
    silence_ns: AGENT_SILENCE.as_nanos() as u64,
};
/// Most events handled in one turn: libccp's messages leave only between them, so a flood
/// of ACK frames must not hold back the reports, the probes and the agent's answers.
const EVENTS_PER_TURN: usize = 128;
/// Loop turns (`TURN` apart) that the closes sent at shutdown may wait for the agent to read.
const SHUTDOWN_FLUSH_TURNS: usize = 100;
/// Largest datagram the agent sends.
const RECV_BUF_BYTES: usize = 64 * 1024;

/// What happened on the host thread, for applications and tests.
#[derive(Debug, Default)]
pub struct Counters {
    /// Datagrams from the agent.
    pub agent_datagrams: AtomicU64,
    /// Datagrams from anyone else, dropped unread.
    pub rejected: AtomicU64,
    /// Agent messages that were not messages (bad lengths, short SYNC).
    pub malformed: AtomicU64,
    /// Agent messages libccp refused.
    pub refused: AtomicU64,
    /// `invoke`s that failed (no program yet: the agent has not answered the Create).
    pub invoke_errors: AtomicU64,
    /// Times Ready and the live Creates were sent again to a returning agent.
    pub resyncs: AtomicU64,
    /// Measures (reports and closes) queued for a live agent.
    pub measures: AtomicU64,
    /// Sends that found the agent's queue full; the messages went out later.
    pub deferred: AtomicU64,
    /// Waiting reports replaced by a newer one of the same flow.
    pub merged: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

struct HostFlow {
    /// libccp's connection; dropping it sends the close.
    conn: libccp::Connection<'static, Decided>,
    /// libccp's sid, known once the Create went out (libccp holds back the Create of a
    /// slot reused within 100 ms, docs/datapaths.md §5.4).
    sid: Option<u32>,
    /// The application's latest priority, sent after the Create (again after a resync).
    priority: Option<Priority>,
    /// The priority still to be sent once the sid is known.
    priority_unsent: bool,
    /// Where the controller reads libccp's decisions.
    decision: Arc<Decision>,
    /// libccp's latest window (bytes) and rate (bytes/s); 0: none.
    cwnd_bytes: u32,
    rate_bytes_per_sec: u32,
}

pub(crate) struct HostLoop {
    host: Host<AgentLink>,
    /// Id in Ready.
    datapath_id: u32,
    /// Attached connections.
    flows: HashMap<FlowId, HostFlow>,
    /// From the controllers and the applications' handles.
    events: Receiver<Event>,
    /// Where the controllers learn whether decisions hold.
    clock: Arc<HostClock>,
    counters: Arc<Counters>,
    agent: Liveness,
    /// Time zero of the liveness clock.
    origin: Instant,
}

impl HostLoop {
    /// Starts libccp on `link` (libccp sends Ready now).
    pub(crate) fn new(
        link: AgentLink,
        datapath_id: u32,
        events: Receiver<Event>,
        clock: Arc<HostClock>,
        counters: Arc<Counters>,
    ) -> Result<Self, libccp::LibccpError> {
        Ok(HostLoop {
            host: Host::new(datapath_id, link)?,
            datapath_id,
            flows: HashMap::new(),
            events,
            clock,
            counters,
            agent: Liveness::new(0, AGENT_TIMING),
            origin: Instant::now(),
        })
    }

    /// `t` on the liveness clock, ns.
    fn ns(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.origin).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Runs until `Event::Stop` or every sender is gone; then closes every flow.
    pub(crate) fn run(mut self) {
        let mut buf = vec![0u8; RECV_BUF_BYTES];
        'turns: loop {
            let mut handled = 0;
            while handled < EVENTS_PER_TURN {
                match self.events.try_recv() {
                    Ok(Event::Stop) | Err(TryRecvError::Disconnected) => break 'turns,
                    Ok(ev) => self.on_event(ev),
                    Err(TryRecvError::Empty) => break,
                }
                handled += 1;
            }
            // What the events made libccp send leaves before the turn waits.
            self.flush(Instant::now());
            // A turn cut short by the cap does not wait: more events are there.
            let mut wait = if handled == EVENTS_PER_TURN {
                Duration::ZERO
            } else {
                TURN
            };
            loop {
                let got = self.host.to_agent().recv(&mut buf, wait);
                let Some(got) = got else { break };
                wait = Duration::ZERO;
                match got {
                    Received::Agent(n) => self.on_agent_datagram(&mut buf[..n]),
                    Received::Rejected(_) => bump(&self.counters.rejected),
                }
            }
            self.check_agent(Instant::now());
        }
        // Dropping a connection sends libccp's close; the agent may read them for a moment.
        self.flows.clear();
        for _ in 0..SHUTDOWN_FLUSH_TURNS {
            self.flush(Instant::now());
            if !self.agent.alive() || self.host.to_agent().outbox.is_empty() {
                break;
            }
            std::thread::sleep(TURN);
        }
        // libccp keeps the socket for the life of the process; the file goes now.
        let _ = std::fs::remove_file(self.host.to_agent().path());
    }

    fn on_event(&mut self, ev: Event) {
        match ev {
            Event::Attach {
                id,
                start,
                decision,
            } => self.attach(id, start, decision),
            Event::Ack { id, sample } => self.on_ack(id, sample),
            Event::Priority { id, priority } => {
                if let Some(f) = self.flows.get_mut(&id) {
                    f.priority = Some(priority);
                    f.priority_unsent = true;
                    self.send_priority(id);
                }
            }
            Event::Closed { id } => {
                if let Some(f) = self.flows.remove(&id) {
                    f.decision.set(0, 0);
                }
            }
            Event::Stop => {}
        }
    }

    fn attach(&mut self, id: FlowId, start: FlowStart, decision: Arc<Decision>) {
        let (src_ip, dst_ip) = (ipv4_wire(start.local), ipv4_wire(start.remote));
        let info = libccp::FlowInfo::default()
            .with_init_cwnd(start.init_cwnd_bytes)
            .with_mss(start.mss_bytes)
            .with_four_tuple(
                src_ip,
                port_wire(start.local),
                dst_ip,
                port_wire(start.remote),
            );
        // A refused start (more than 1024 flows) leaves the connection on its fallback.
        let Ok(conn) = self.host.start(Decided::default(), info) else {
            return;
        };
        let sid = self.host.take_create_sid();
        self.flows.insert(
            id,
            HostFlow {
                conn,
                sid,
                priority: None,
                priority_unsent: false,
                decision,
                cwnd_bytes: 0,
                rate_bytes_per_sec: 0,
            },
        );
    }

    fn on_ack(&mut self, id: FlowId, s: AckSample) {
        let alive = self.agent.alive();
        let Some(f) = self.flows.get_mut(&id) else {
            return;
        };
        // libccp loads `Cwnd` from `snd_cwnd` and writes it back after the run: the window
        // in the event may predate the latest decision, which must not be undone.
        let mut prims = s.prims;
        if !s.in_fallback && f.cwnd_bytes > 0 {
            prims.snd_cwnd = f.cwnd_bytes;
        }
        f.conn
            .load_primitives(ccp_host::primitives::to_libccp(prims));
        if f.conn.invoke().is_err() {
            bump(&self.counters.invoke_errors);
        }
        if let Some(c) = f.conn.cwnd_bytes.take() {
            f.cwnd_bytes = c;
        }
        if let Some(r) = f.conn.rate_bytes_per_sec.take() {
            f.rate_bytes_per_sec = r;
        }
        // A dead agent's program keeps echoing the window: only a live agent steers.
        if alive {
            f.decision.set(f.cwnd_bytes, f.rate_bytes_per_sec);
        }
        if f.sid.is_none() {
            // A held-back Create goes out from invoke.
            f.sid = self.host.take_create_sid();
            self.send_priority(id);
        }
    }

    /// Sends the flow's priority if it has one to send and its sid is known.
    fn send_priority(&mut self, id: FlowId) {
        let Some(f) = self.flows.get_mut(&id) else {
            return;
        };
        let (Some(sid), Some(p), true) = (f.sid, f.priority, f.priority_unsent) else {
            return;
        };
        f.priority_unsent = false;
        self.host
            .to_agent()
            .send(&ccp_wire::encode_priority(&p.message(sid)));
    }

    fn on_agent_datagram(&mut self, datagram: &mut [u8]) {
        bump(&self.counters.agent_datagrams);
        let (mut heard, mut sync_echo, mut forgot) = (false, false, false);
        let mut changed = Vec::new();
        let (counters, agent) = (&self.counters, &self.agent);
        self.host.receive(datagram, |m| match m {
            Incoming::Sync { sid, token } => {
                (heard, sync_echo) = (true, true);
                forgot |= agent.forgot_by(sid, token);
            }
            Incoming::Delivered(h) => {
                heard = true;
                if h.typ == msg_type::CHANGE_PROG {
                    changed.push(h.sid);
                }
            }
            Incoming::Refused(..) => {
                heard = true;
                bump(&counters.refused);
            }
            Incoming::Malformed(_) => bump(&counters.malformed),
        });
        for sid in changed {
            self.program_changed(sid);
        }
        if forgot {
            // A new agent knows none of the flows: their old decisions go, and Ready and
            // the Creates go out again at once (below).
            self.lose(Loss::Forgot);
        }
        if heard {
            self.heard(Instant::now(), sync_echo);
        }
    }

    /// A new program is a new controller (the agent handed the flow to another algorithm):
    /// the old one's rate goes; libccp sets a rate only when the program writes one.
    fn program_changed(&mut self, sid: u32) {
        if let Some(f) = self.flows.values_mut().find(|f| f.sid == Some(sid)) {
            f.rate_bytes_per_sec = 0;
        }
    }

    fn heard(&mut self, now: Instant, sync_echo: bool) {
        if self.agent.heard(self.ns(now), sync_echo) {
            self.found();
        }
        self.clock.agent_heard(now);
    }

    /// Sends what waits; a send that finds no agent loses it, and a probe that reaches its
    /// socket finds an agent lost that way.
    fn flush(&mut self, now: Instant) {
        let now_ns = self.ns(now);
        let batch = self.agent.echoes_sync();
        let flushed = self.host.to_agent().flush(now_ns, batch);
        match self.agent.flushed(now_ns, flushed) {
            AfterFlush::Lost => self.lose(Loss::SendFailed),
            AfterFlush::Found => self.found(),
            AfterFlush::Unchanged => {}
        }
    }

    fn check_agent(&mut self, now: Instant) {
        let now_ns = self.ns(now);
        if self.agent.silent(now_ns) {
            self.lose(Loss::Silence);
        }
        let token = self
            .agent
            .probe_due(now_ns)
            .then(|| self.agent.probe(now_ns))
            .flatten();
        if let Some(token) = token {
            // The sid tells the agent this datapath reads batches (docs/wire.md).
            let probe = ccp_wire::encode_sync(ccp_wire::SYNC_SID_READS_BATCHES, token);
            self.host.to_agent().send(&probe);
        }
        self.flush(now);
        if self.agent.alive() && !self.agent.echoes_sync() {
            // An agent that never echoes SYNC is trusted until a send to it fails.
            self.clock.agent_heard(now);
        }
        let link = self.host.to_agent();
        let c = &self.counters;
        c.measures.store(link.measures, Ordering::Relaxed);
        c.deferred
            .store(link.outbox.stats.deferred, Ordering::Relaxed);
        c.merged.store(link.outbox.stats.merged, Ordering::Relaxed);
    }

    fn lose(&mut self, why: Loss) {
        if !self.agent.alive() {
            return;
        }
        self.agent.lose(why);
        self.host.to_agent().outbox.mark_lost();
        self.clock.agent_lost();
        // Old decisions must not come back with the agent: fallback until it decides again.
        for f in self.flows.values_mut() {
            f.decision.set(0, 0);
            (f.cwnd_bytes, f.rate_bytes_per_sec) = (0, 0);
        }
    }

    /// The agent is back (maybe a new one): Ready makes it forget this datapath's flows, so
    /// every live Create and every priority set go again.
    fn found(&mut self) {
        bump(&self.counters.resyncs);
        let creates = self.host.live_creates();
        let ready = ccp_wire::encode_ready(self.datapath_id);
        self.host.to_agent().outbox.resync(&ready, &creates);
        let ids: Vec<FlowId> = self.flows.keys().copied().collect();
        for id in ids {
            if let Some(f) = self.flows.get_mut(&id) {
                f.priority_unsent = f.priority.is_some();
            }
            self.send_priority(id);
        }
    }
}

/// An IPv4 address as ccp-kernel writes it into Create (network byte order,
/// docs/datapaths.md §1.3); 0 for IPv6, which Create cannot carry.
fn ipv4_wire(a: SocketAddr) -> u32 {
    match a {
        SocketAddr::V4(v4) => u32::from_ne_bytes(v4.ip().octets()),
        SocketAddr::V6(_) => 0,
    }
}

/// A port as ccp-kernel writes it into Create (network byte order).
fn port_wire(a: SocketAddr) -> u32 {
    u32::from(a.port().to_be())
}
