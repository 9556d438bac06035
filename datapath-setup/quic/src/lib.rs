//! A QUIC datapath for CCP: quinn connections whose congestion control is the agent's.
//!
//! ```text
//!  quinn connection ── CcpController (per connection, Send + Sync)
//!        │  ACK frames, losses, RTT, bytes in flight          ▲ window (atomics)
//!        ▼  (channel)                                         │
//!  host thread: ccp_host::Host ── libccp, one connection per flow ── /tmp/ccp/<bind>
//!                                                                      │ CCP IPC
//!                                                                   ccp-agent
//! ```
//!
//! libccp is not thread-safe and its `Datapath` not `Send`, while quinn wants `Send + Sync`
//! controllers, so libccp lives on one thread ([`host_thread`]), as the eBPF datapath's
//! libccp lives in its daemon: each controller sends its measurements as events (one per
//! ACK frame, one per loss) and reads the window the host thread publishes
//! ([`flow::Decision`]).
//!
//! * **Joining CCP.** quinn builds a controller before the connection has addresses, and a
//!   Create must carry them (the agent's policy matches on them), so a connection joins
//!   when the application calls [`QuicDatapath::attach`], which sends its Create and
//!   returns a [`FlowHandle`]. Until then, and for connections never attached, the
//!   controller runs its fallback.
//! * **Rates.** quinn paces from the window and the smoothed RTT and has no rate to set.
//!   The plain translation, window = `rate × srtt`, fails below a few milliseconds of RTT
//!   (one datagram in flight, delayed ACKs), so a `Rate` from the agent is a token bucket
//!   that the window lets through ([`rate_gate`]), capped by the agent's `Cwnd`. On
//!   loopback a flow carries 93–99 % of the agent's rate from 20 to 500 Mbit/s
//!   (docs/datapaths.md §8.2); the bucket holds 25 ms of the rate, so bursts reach that size.
//! * **Fallback.** NewReno ([`fallback`]) whenever the flow has no decision from a live
//!   agent: before the agent's first answer, when it has been silent for more than
//!   [`flow::AGENT_SILENCE`] (200 ms), when its socket is gone, or when a new agent at the
//!   same address says it has no Ready from this datapath. When it comes back (a new one at
//!   once), Ready and every live Create go out again and its decisions take over.
//! * **Priorities.** [`FlowHandle::set_priority`] sends the PRIORITY message for the
//!   connection's sid (docs/wire.md).
//!
//! * **Prompt ACKs.** quinn gives a controller no ACK delay to take out of its RTT
//!   sample, so [`QuicDatapath::transport_config`] asks the peer (ACK-frequency extension)
//!   to hold an ACK at most [`PROMPT_ACK_DELAY`] instead of 25 ms: a flow sending a
//!   datagram every few milliseconds would otherwise see the peer's timer as queueing delay.
//!
//! Deviations from ccp-kernel's primitives: one libccp `invoke` per ACK frame, not per
//! acknowledged packet; the RTT sample is the newest acknowledged packet's, ACK delay
//! included (quinn keeps its own latest sample private); `Ack.packets_misordered` and
//! `Ack.ecn_packets` read 0 (quinn tells a controller of neither), as do
//! `Flow.rate_outgoing` and `Flow.rate_incoming` (no algorithm here reads them); IPv6
//! addresses are sent as 0 in Create, which has room only for IPv4.
//!
//! This crate links libccp, whose exported `log` symbol breaks `f64::ln` in the whole
//! binary (docs/datapaths.md §5.5): no natural logarithms here.
//!
//! An application switching its connection to scavenger:
//!
//! ```no_run
//! # async fn demo(mut endpoint: quinn::Endpoint, mut client: quinn::ClientConfig) -> Result<(), Box<dyn std::error::Error>> {
//! let dp = ccp_quic::QuicDatapath::start(&ccp_quic::Config::new("ccp-agent"))?;
//! client.transport_config(std::sync::Arc::new(dp.transport_config()));
//! endpoint.set_default_client_config(client);
//! let conn = endpoint.connect("192.0.2.1:4433".parse()?, "example")?.await?;
//! let flow = dp.attach(&endpoint, &conn)?;
//! flow.set_priority(ccp_quic::Priority::Scavenger)?;
//! # Ok(()) }
//! ```

pub mod agent_link;
pub mod controller;
pub mod fallback;
pub mod flow;
pub mod host_thread;
pub mod priority;
pub mod rate_gate;
pub mod tls;
pub mod transfer;

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

pub use controller::{CcpController, CcpControllerFactory};
pub use host_thread::Counters;
pub use priority::Priority;

use agent_link::AgentLink;
use flow::{Event, FlowLease, FlowStart, HostClock, Leases};

/// The longest the peer may hold an ACK: quinn's timer granularity, the least a quinn
/// peer accepts (a peer with a coarser timer raises it to its own minimum).
pub const PROMPT_ACK_DELAY: Duration = Duration::from_millis(1);

/// Where the datapath and its agent are.
#[derive(Debug, Clone)]
pub struct Config {
    /// The agent's socket (`ccp-agent --bind NAME`: /tmp/ccp/NAME).
    pub agent: PathBuf,
    /// This datapath's socket.
    pub bind: PathBuf,
    /// A group that shares the socket with the agent (mode 0660 instead of 0600).
    pub group: Option<u32>,
    /// Id in Ready.
    pub datapath_id: u32,
}

impl Config {
    /// The agent by name or path (see [`ccp_rundir::socket_path`]); this datapath binds
    /// `quic-<pid>` beside the agent's socket.
    pub fn new(agent: &str) -> Self {
        let agent = ccp_rundir::socket_path(agent);
        let bind = agent.with_file_name(format!("quic-{}", std::process::id()));
        Config {
            agent,
            bind,
            group: None,
            datapath_id: std::process::id(),
        }
    }
}

/// Why the datapath did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Link(#[from] agent_link::LinkError),
    #[error("libccp datapath init failed: {0:?}")]
    Libccp(libccp::LibccpError),
    #[error("cannot start the host thread: {0}")]
    Thread(std::io::Error),
}

/// Why a connection could not join CCP.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    #[error(
        "the connection's controller is not this datapath's (set its factory on the endpoint's TransportConfig)"
    )]
    NotCcp,
    #[error("the connection's controller belongs to another QuicDatapath")]
    OtherDatapath,
    #[error("the connection is attached already")]
    Attached,
    #[error("cannot learn the local address: {0}")]
    LocalAddr(std::io::Error),
}

/// Why a priority could not be set.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PriorityError {
    #[error("the connection is closed")]
    Closed,
}

/// The datapath: a libccp host thread on a unix socket to the agent.
#[derive(Debug)]
pub struct QuicDatapath {
    leases: Leases,
    counters: Arc<Counters>,
    thread: Option<JoinHandle<()>>,
}

impl QuicDatapath {
    /// Binds the socket and starts libccp on its own thread (libccp sends Ready). An
    /// absent agent is no error: connections run their fallback until it appears.
    pub fn start(cfg: &Config) -> Result<Self, StartError> {
        let link = AgentLink::bind(&cfg.bind, &cfg.agent, cfg.group)?;
        let (tx, rx) = mpsc::channel();
        let clock = Arc::new(HostClock::new());
        let counters = Arc::new(Counters::default());
        let (ready_tx, ready_rx) = mpsc::channel();
        let (c, k, id) = (clock.clone(), counters.clone(), cfg.datapath_id);
        let thread = std::thread::Builder::new()
            .name("ccp-quic-host".into())
            .spawn(
                move || match host_thread::HostLoop::new(link, id, rx, c, k) {
                    Ok(host) => {
                        let _ = ready_tx.send(Ok(()));
                        host.run();
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                },
            )
            .map_err(StartError::Thread)?;
        if let Ok(Err(e)) = ready_rx.recv() {
            let _ = thread.join();
            return Err(StartError::Libccp(e));
        }
        Ok(QuicDatapath {
            leases: Leases {
                events: tx,
                clock,
                next_id: Arc::new(AtomicU64::new(1)),
            },
            counters,
            thread: Some(thread),
        })
    }

    /// A `TransportConfig` for connections under this datapath: its controllers, and the
    /// peer asked to acknowledge within [`PROMPT_ACK_DELAY`] (every second ack-eliciting
    /// packet at once, as without the extension), so the RTT samples the agent sees hold
    /// the path's delay and not the peer's ACK timer.
    pub fn transport_config(&self) -> quinn::TransportConfig {
        let mut acks = quinn::AckFrequencyConfig::default();
        acks.max_ack_delay(Some(PROMPT_ACK_DELAY));
        let mut transport = quinn::TransportConfig::default();
        transport
            .congestion_controller_factory(self.controller_factory())
            .ack_frequency_config(Some(acks));
        transport
    }

    /// The controller factory, for an application that builds its own `TransportConfig`
    /// (it should also ask for prompt ACKs, as [`Self::transport_config`] does).
    pub fn controller_factory(&self) -> Arc<CcpControllerFactory> {
        Arc::new(CcpControllerFactory {
            leases: self.leases.clone(),
        })
    }

    /// The connection (of `endpoint`) joins CCP: its Create, with its addresses, goes to
    /// the agent, whose policy picks its algorithm.
    pub fn attach(
        &self,
        endpoint: &quinn::Endpoint,
        conn: &quinn::Connection,
    ) -> Result<FlowHandle, AttachError> {
        let controller = conn
            .congestion_state()
            .into_any()
            .downcast::<CcpController>()
            .map_err(|_| AttachError::NotCcp)?;
        let lease = controller.lease().clone();
        if !Arc::ptr_eq(&lease.clock, &self.leases.clock) {
            return Err(AttachError::OtherDatapath);
        }
        let bound = endpoint.local_addr().map_err(AttachError::LocalAddr)?;
        let remote = conn.remote_address();
        // quinn knows the local address of a server's connection; a client's is the
        // endpoint's, or the kernel's choice for the remote when that is a wildcard.
        let local_ip = match conn.local_ip() {
            Some(ip) => ip,
            None if !bound.ip().is_unspecified() => bound.ip(),
            None => route_source(remote).map_err(AttachError::LocalAddr)?,
        };
        if lease.attached.swap(true, Ordering::Relaxed) {
            return Err(AttachError::Attached);
        }
        let start = FlowStart {
            local: SocketAddr::new(local_ip, bound.port()),
            remote,
            mss_bytes: u32::from(controller.mss()),
            init_cwnd_bytes: u32::try_from(quinn::congestion::Controller::window(&*controller))
                .unwrap_or(u32::MAX),
        };
        lease.send(Event::Attach {
            id: lease.id,
            start,
            decision: lease.decision.clone(),
        });
        Ok(FlowHandle {
            lease: Arc::downgrade(&lease),
            id: lease.id,
            events: self.leases.events.clone(),
        })
    }

    /// The host thread's counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }
}

impl Drop for QuicDatapath {
    /// Closes every flow (the agent sees their closes) and removes the socket.
    fn drop(&mut self) {
        let _ = self.leases.events.send(Event::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The local address the kernel would send from to reach `remote` (a connected UDP socket
/// learns it without sending anything).
fn route_source(remote: SocketAddr) -> std::io::Result<IpAddr> {
    let any: SocketAddr = match remote {
        SocketAddr::V4(_) => "0.0.0.0:0".parse().map_err(std::io::Error::other)?,
        SocketAddr::V6(_) => "[::]:0".parse().map_err(std::io::Error::other)?,
    };
    let s = UdpSocket::bind(any)?;
    s.connect(remote)?;
    Ok(s.local_addr()?.ip())
}

/// An application's hold on one attached connection.
#[derive(Debug)]
pub struct FlowHandle {
    /// Weak: the flow ends with its connection, not with this handle.
    lease: Weak<FlowLease>,
    id: flow::FlowId,
    events: Sender<Event>,
}

/// What a connection's controller last did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlowStats {
    /// Bytes of datagrams the peer acknowledged.
    pub acked_bytes: u64,
    /// Bytes of datagrams declared lost.
    pub lost_bytes: u64,
    /// Window in force, bytes.
    pub window_bytes: u64,
    /// The window was the agent's (else the fallback's).
    pub steered: bool,
}

impl FlowHandle {
    /// Asks the agent to run the connection at `priority` (the PRIORITY message for its
    /// sid; sent right after the Create if libccp still holds that back).
    pub fn set_priority(&self, priority: Priority) -> Result<(), PriorityError> {
        if self.lease.strong_count() == 0 {
            return Err(PriorityError::Closed);
        }
        self.events
            .send(Event::Priority {
                id: self.id,
                priority,
            })
            .map_err(|_| PriorityError::Closed)
    }

    /// The connection's controller, as last seen; `None` once the connection is gone.
    pub fn stats(&self) -> Option<FlowStats> {
        let l = self.lease.upgrade()?;
        Some(FlowStats {
            acked_bytes: l.acked_bytes.load(Ordering::Relaxed),
            lost_bytes: l.lost_bytes.load(Ordering::Relaxed),
            window_bytes: l.window_bytes.load(Ordering::Relaxed),
            steered: l.steered.load(Ordering::Relaxed),
        })
    }
}
