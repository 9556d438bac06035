//! One libccp datapath, its flows, and the lock-step with the agent.

use crate::clock;
use crate::link::{AgentLink, AgentStats, LinkError, Outbox};
use algs_core::Priority;
use ccp_host::Host;
use ccp_sim::AckSample;
use ccp_wire::{PriorityClass, PriorityMsg, encode_priority};
use libccp::{CongestionOps, Connection, FlowInfo, LibccpError};
use serde::Serialize;
use std::time::Duration;
use thiserror::Error;

/// How long to wait for the agent to appear at start.
pub const AGENT_WAIT: Duration = Duration::from_secs(10);
/// Default wait for one SYNC echo.
pub const SYNC_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the datapath cannot go on.
#[derive(Debug, Error)]
pub enum DpError {
    #[error(transparent)]
    Link(#[from] LinkError),
    #[error(transparent)]
    Clock(#[from] clock::NotInterposed),
    #[error("libccp: {0}")]
    Libccp(LibccpError),
    #[error("cannot clone the datapath socket: {0}")]
    Socket(std::io::Error),
    #[error("no flow {0:?}")]
    UnknownFlow(String),
    #[error("flow {0:?} exists already")]
    DuplicateFlow(String),
    #[error("flow {0:?} is closed")]
    Closed(String),
    #[error("algorithm name {0:?} is longer than the 63 bytes of Create")]
    AlgName(String),
}

/// Where and how to connect.
#[derive(Debug, Clone)]
pub struct DpOptions {
    /// Agent name (`/tmp/ccp/NAME`) or path.
    pub agent: String,
    /// Datapath socket name or path.
    pub bind: String,
    /// Wait for one SYNC echo.
    pub sync_timeout: Duration,
    /// Wait for the agent at start.
    pub agent_wait: Duration,
    /// Id in Ready.
    pub datapath_id: u32,
}

impl DpOptions {
    /// Defaults for an agent name: bind `testdp-<pid>`.
    pub fn new(agent: &str) -> Self {
        DpOptions {
            agent: agent.to_owned(),
            bind: format!("testdp-{}", std::process::id()),
            sync_timeout: SYNC_TIMEOUT,
            agent_wait: AGENT_WAIT,
            datapath_id: std::process::id(),
        }
    }
}

/// What a flow asks for in Create.
#[derive(Debug, Clone)]
pub struct FlowSpec {
    pub name: String,
    pub alg: String,
    /// Bytes, as ccp-kernel sends it.
    pub init_cwnd: u32,
    pub mss: u32,
    /// Addresses and ports in host order; sent in network order as ccp-kernel does.
    pub src: std::net::SocketAddrV4,
    pub dst: std::net::SocketAddrV4,
}

/// The per-connection state libccp writes through `CongestionOps`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Applied {
    /// Window in force, bytes.
    pub cwnd: u32,
    /// Pacing rate in force, bytes/s (0 = never set).
    pub rate: u32,
    /// `set_cwnd` calls that changed the window.
    pub cwnd_updates: u64,
    /// `set_rate_abs` calls that changed the rate.
    pub rate_updates: u64,
}

impl CongestionOps for Applied {
    fn set_cwnd(&mut self, cwnd: u32) {
        if cwnd != self.cwnd {
            self.cwnd_updates += 1;
        }
        self.cwnd = cwnd;
    }

    fn set_rate_abs(&mut self, rate: u32) {
        if rate != self.rate {
            self.rate_updates += 1;
        }
        self.rate = rate;
    }
}

/// The last report a flow's program sent.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct LastReport {
    pub program_uid: u32,
    pub fields: Vec<u64>,
}

/// Everything known about one flow, as printed in the script mode's JSON lines.
#[derive(Debug, Clone, Serialize)]
pub struct FlowStatus {
    pub flow: String,
    pub alg: String,
    /// libccp's socket id (from the Create it sent); `None` while the Create is pending.
    pub sid: Option<u32>,
    pub cwnd: u32,
    pub rate: u32,
    pub cwnd_updates: u64,
    pub rate_updates: u64,
    pub invokes: u64,
    pub invoke_errors: u64,
    /// Reports (Measures with fields) the flow's program sent.
    pub reports: u64,
    pub last_report: Option<LastReport>,
    /// The last error `invoke` returned (libccp's wording), if any ever.
    pub last_error: Option<String>,
    pub closed: bool,
}

struct DpFlow {
    status: FlowStatus,
    conn: Option<Connection<'static, Applied>>,
    /// A priority asked for while libccp held the Create back; sent once it went out.
    pending_priority: Option<Priority>,
}

impl std::fmt::Debug for DpFlow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DpFlow")
            .field("status", &self.status)
            .finish()
    }
}

/// A libccp datapath in lock-step with an agent, on virtual time.
pub struct TestDatapath {
    host: Host<Outbox>,
    link: AgentLink,
    flows: Vec<DpFlow>,
    /// Virtual time at init, ns; simulated time 0.
    base_ns: u64,
}

impl std::fmt::Debug for TestDatapath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestDatapath")
            .field("link", &self.link)
            .field("flows", &self.flows)
            .field("base_ns", &self.base_ns)
            .finish()
    }
}

impl TestDatapath {
    /// Binds, waits for the agent, starts virtual time, initializes libccp (which sends
    /// Ready) and waits until the agent has answered it (its Installs are in libccp).
    pub fn connect(opts: &DpOptions) -> Result<Self, DpError> {
        let mut link = AgentLink::bind(&opts.bind, &opts.agent, opts.sync_timeout)?;
        link.wait_for_agent(opts.agent_wait)?;
        // Virtual time must run before init: libccp takes its time zero there.
        let base_ns = clock::start()?;
        let outbox = link.outbox().map_err(DpError::Socket)?;
        let host = Host::new(opts.datapath_id, outbox).map_err(DpError::Libccp)?;
        let mut me = TestDatapath {
            host,
            link,
            flows: Vec::new(),
            base_ns,
        };
        me.settle()?;
        Ok(me)
    }

    /// Virtual time, ns since init.
    pub fn now_ns(&self) -> u64 {
        clock::now().saturating_sub(self.base_ns)
    }

    /// Moves virtual time to `ns` since init (never backwards).
    pub fn set_time(&mut self, ns: u64) {
        clock::set(self.base_ns + ns);
    }

    /// Lock-step after whatever libccp sent; records reports and Create sids.
    fn settle(&mut self) -> Result<(), DpError> {
        self.settle_for(None)
    }

    /// As [`settle`](Self::settle), attributing a Create that went out to `creator`.
    fn settle_for(&mut self, creator: Option<usize>) -> Result<(), DpError> {
        if !self.link.has_unsynced() {
            return Ok(());
        }
        let sent = self.link.take_sent();
        let mut announced = None;
        if let (Some(i), Some(sid)) = (creator, self.host.take_create_sid()) {
            self.flows[i].status.sid = Some(sid);
            announced = Some(i);
        }
        for (sid, program_uid, fields) in sent.reports {
            if let Some(f) = self
                .flows
                .iter_mut()
                .find(|f| !f.status.closed && f.status.sid == Some(sid))
            {
                f.status.reports += 1;
                f.status.last_report = Some(LastReport {
                    program_uid,
                    fields,
                });
            }
        }
        if let Some(e) = sent.error {
            return Err(LinkError::Send {
                agent: self.link.agent_path().to_owned(),
                source: e,
            }
            .into());
        }
        self.link.sync(&self.host)?;
        if let Some(i) = announced {
            if let Some(p) = self.flows[i].pending_priority.take() {
                self.priority(i, p)?;
            }
        }
        Ok(())
    }

    /// Index of a flow by name.
    pub fn flow_index(&self, name: &str) -> Result<usize, DpError> {
        self.flows
            .iter()
            .position(|f| f.status.flow == name)
            .ok_or_else(|| DpError::UnknownFlow(name.to_owned()))
    }

    /// Starts a connection (libccp sends Create) and waits for the agent's answer.
    pub fn create(&mut self, spec: &FlowSpec) -> Result<usize, DpError> {
        if self.flows.iter().any(|f| f.status.flow == spec.name) {
            return Err(DpError::DuplicateFlow(spec.name.clone()));
        }
        if spec.alg.len() > 63 {
            return Err(DpError::AlgName(spec.alg.clone()));
        }
        let net_ip = |a: &std::net::SocketAddrV4| u32::from_ne_bytes(a.ip().octets());
        let net_port = |a: &std::net::SocketAddrV4| u32::from(a.port().to_be());
        let mut info = FlowInfo::default()
            .with_init_cwnd(spec.init_cwnd)
            .with_mss(spec.mss)
            .with_four_tuple(
                net_ip(&spec.src),
                net_port(&spec.src),
                net_ip(&spec.dst),
                net_port(&spec.dst),
            );
        if !spec.alg.is_empty() {
            info = info
                .with_cong_alg(&spec.alg)
                .map_err(|_| DpError::AlgName(spec.alg.clone()))?;
        }
        let applied = Applied {
            cwnd: spec.init_cwnd,
            ..Applied::default()
        };
        let conn = self.host.start(applied, info).map_err(DpError::Libccp)?;
        self.flows.push(DpFlow {
            status: FlowStatus {
                flow: spec.name.clone(),
                alg: spec.alg.clone(),
                sid: None,
                cwnd: spec.init_cwnd,
                rate: 0,
                cwnd_updates: 0,
                rate_updates: 0,
                invokes: 0,
                invoke_errors: 0,
                reports: 0,
                last_report: None,
                last_error: None,
                closed: false,
            },
            conn: Some(conn),
            pending_priority: None,
        });
        let i = self.flows.len() - 1;
        self.settle_for(Some(i))?;
        Ok(i)
    }

    /// One ACK (or timeout): loads the primitives, runs the flow's program, then lock-step.
    /// An `invoke` error is recorded in the flow's status, not returned: libccp refusing a
    /// program run is something tests look at.
    pub fn ack(&mut self, flow: usize, a: &AckSample) -> Result<(), DpError> {
        let f = &mut self.flows[flow];
        let Some(conn) = f.conn.as_mut() else {
            return Err(DpError::Closed(f.status.flow.clone()));
        };
        conn.load_primitives(ccp_host::primitives::to_libccp(a.prims));
        let res = conn.invoke();
        f.status.invokes += 1;
        if let Err(e) = res {
            f.status.invoke_errors += 1;
            f.status.last_error = Some(e.to_string());
        }
        let applied: Applied = **conn;
        f.status.cwnd = applied.cwnd;
        f.status.rate = applied.rate;
        f.status.cwnd_updates = applied.cwnd_updates;
        f.status.rate_updates = applied.rate_updates;
        // A Create that was pending (slot reused within 100 ms) goes out from invoke.
        let creator = f.status.sid.is_none().then_some(flow);
        self.settle_for(creator)
    }

    /// Sends PRIORITY for a flow and waits for the agent to have handled it.
    /// Before libccp has sent the flow's Create (it holds one back when a slot is reused
    /// within 100 ms) the agent cannot know the flow: the priority is sent right after the
    /// Create instead.
    pub fn priority(&mut self, flow: usize, p: Priority) -> Result<(), DpError> {
        let f = &mut self.flows[flow];
        if f.status.closed {
            return Err(DpError::Closed(f.status.flow.clone()));
        }
        let Some(sid) = f.status.sid else {
            f.pending_priority = Some(p);
            return Ok(());
        };
        let (class, threshold) = match p {
            Priority::Primary => (PriorityClass::Primary, 0),
            Priority::Scavenger => (PriorityClass::Scavenger, 0),
            Priority::Hybrid { threshold } => (
                PriorityClass::Hybrid,
                threshold.map_or(0, |t| t.to_wire_threshold()),
            ),
        };
        self.link.send(&encode_priority(&PriorityMsg {
            sid,
            class,
            flags: 0,
            hybrid_threshold_bytes_per_sec: threshold,
        }))?;
        self.link.sync(&self.host)?;
        Ok(())
    }

    /// Closes a flow (libccp sends the close Measure) and waits for the agent.
    pub fn close(&mut self, flow: usize) -> Result<(), DpError> {
        let f = &mut self.flows[flow];
        // Dropping the connection frees the slot and sends the close.
        drop(f.conn.take());
        f.status.closed = true;
        self.settle()
    }

    /// A flow's status.
    pub fn status(&self, flow: usize) -> &FlowStatus {
        &self.flows[flow].status
    }

    /// Every flow's status, in creation order.
    pub fn statuses(&self) -> impl Iterator<Item = &FlowStatus> {
        self.flows.iter().map(|f| &f.status)
    }

    /// What came back from the agent.
    pub fn agent_stats(&self) -> AgentStats {
        self.link.stats()
    }

    /// The last agent message libccp refused, if any.
    pub fn last_refusal(&self) -> Option<String> {
        self.link.last_refusal().map(|e| e.to_string())
    }
}
