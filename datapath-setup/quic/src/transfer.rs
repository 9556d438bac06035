//! The `ccp-quic` tool's two ends: `serve` sinks whatever arrives, `send` pushes bulk data
//! under CCP for a while and reports like iperf3's `-J` (intervals, `end.sum_sent`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::{FlowHandle, FlowStats, Priority, QuicDatapath};

/// Bytes per write of the bulk sender.
const CHUNK_BYTES: usize = 64 * 1024;
/// How often the sender looks at the clock for intervals and priority changes.
const TICK: Duration = Duration::from_millis(10);
/// How long the sender waits for the peer to take the connection's close.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// Why a transfer failed.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("connecting: {0}")]
    Connect(#[from] quinn::ConnectError),
    #[error("connection: {0}")]
    Connection(#[from] quinn::ConnectionError),
    #[error("joining CCP: {0}")]
    Attach(#[from] crate::AttachError),
}

/// A priority change at a time into the transfer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PriorityAt {
    /// Since the transfer began.
    pub at: Duration,
    pub priority: Priority,
}

impl std::str::FromStr for PriorityAt {
    type Err = String;

    /// `SECONDS:CLASS`, e.g. `5:scavenger` or `2.5:hybrid=20`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (t, class) = s
            .split_once(':')
            .ok_or_else(|| format!("{s:?}: want SECONDS:CLASS"))?;
        let secs: f64 = t
            .parse()
            .map_err(|_| format!("{t:?}: want seconds into the transfer"))?;
        if !secs.is_finite() || secs < 0.0 {
            return Err(format!("{t:?}: want seconds into the transfer"));
        }
        Ok(PriorityAt {
            at: Duration::from_secs_f64(secs),
            priority: class.parse()?,
        })
    }
}

/// Whose congestion control a transfer's connection runs.
#[derive(Debug, Clone, Copy)]
pub enum Controller<'a> {
    /// The agent's, through this datapath (the fallback's while the agent is away).
    Ccp(&'a QuicDatapath),
    /// quinn's own CUBIC: the stack's baseline, without libccp or the agent.
    QuinnCubic,
}

/// What `send` does.
#[derive(Debug, Clone)]
pub struct SendPlan {
    /// The server.
    pub to: SocketAddr,
    /// The local UDP port (0: any free one); fixed ports let a policy match the connection.
    pub local_port: u16,
    /// How long to send.
    pub duration: Duration,
    /// Length of a reported interval.
    pub interval: Duration,
    /// Priority changes, in any order.
    pub priorities: Vec<PriorityAt>,
}

/// Serves on `listen` until the process ends; `bound` learns the address first.
pub async fn serve(
    listen: SocketAddr,
    bound: impl FnOnce(SocketAddr),
) -> Result<(), TransferError> {
    let endpoint = quinn::Endpoint::server(crate::tls::server_config()?, listen)?;
    bound(endpoint.local_addr()?);
    while let Some(incoming) = endpoint.accept().await {
        tokio::spawn(async move {
            let Ok(conn) = incoming.await else { return };
            while let Ok(mut stream) = conn.accept_uni().await {
                tokio::spawn(async move {
                    let mut buf = vec![0u8; CHUNK_BYTES];
                    while let Ok(Some(_)) = stream.read(&mut buf).await {}
                });
            }
        });
    }
    Ok(())
}

fn priority_name(p: Priority) -> &'static str {
    match p {
        Priority::Primary => "primary",
        Priority::Scavenger => "scavenger",
        Priority::Hybrid { .. } => "hybrid",
    }
}

/// One interval's numbers.
#[derive(Debug, Clone, Copy)]
struct Interval {
    /// Since the transfer began.
    start: Duration,
    end: Duration,
    /// Bytes of datagrams acknowledged during the interval.
    bytes: u64,
    /// quinn's smoothed RTT at the end.
    rtt: Duration,
    /// The window at the end, bytes.
    window_bytes: u64,
    /// The agent steered at the end.
    steered: bool,
    /// The last priority the application set.
    priority: Option<Priority>,
}

impl Interval {
    fn json(&self) -> Value {
        let secs = (self.end - self.start).as_secs_f64();
        let bps = if secs > 0.0 {
            self.bytes as f64 * 8.0 / secs
        } else {
            0.0
        };
        let sum = json!({
            "start": self.start.as_secs_f64(),
            "end": self.end.as_secs_f64(),
            "seconds": secs,
            "bytes": self.bytes,
            "bits_per_second": bps,
        });
        let mut stream = sum.clone();
        if let Some(o) = stream.as_object_mut() {
            o.insert("rtt".into(), json!(self.rtt.as_micros() as u64));
            o.insert("snd_cwnd".into(), json!(self.window_bytes));
            o.insert("ccp_steered".into(), json!(self.steered));
            o.insert("priority".into(), json!(self.priority.map(priority_name)));
        }
        json!({ "streams": [stream], "sum": sum })
    }
}

/// Sends for `plan.duration` over a connection run by `cc`, and reports. `end.sum_sent`
/// also counts every UDP byte sent (`udp_bytes`, retransmissions included), the one
/// measure both controllers share.
pub async fn send(cc: Controller<'_>, plan: &SendPlan) -> Result<Value, TransferError> {
    let bind: SocketAddr = if plan.to.is_ipv4() {
        ([0, 0, 0, 0], plan.local_port).into()
    } else {
        ([0u16; 8], plan.local_port).into()
    };
    let mut endpoint = quinn::Endpoint::client(bind)?;
    let mut client = crate::tls::insecure_client_config()?;
    // quinn's CUBIC keeps quinn's defaults: it is the stack's baseline as shipped.
    let transport = match cc {
        Controller::Ccp(dp) => dp.transport_config(),
        Controller::QuinnCubic => {
            let mut t = quinn::TransportConfig::default();
            t.congestion_controller_factory(Arc::new(quinn::congestion::CubicConfig::default()));
            t
        }
    };
    client.transport_config(Arc::new(transport));
    endpoint.set_default_client_config(client);

    let conn = endpoint.connect(plan.to, crate::tls::SERVER_NAME)?.await?;
    let flow = match cc {
        Controller::Ccp(dp) => Some(dp.attach(&endpoint, &conn)?),
        Controller::QuinnCubic => None,
    };
    let local = endpoint.local_addr()?;
    let mut stream = conn.open_uni().await?;

    let stop = Arc::new(AtomicBool::new(false));
    let writer_stop = stop.clone();
    let writer = tokio::spawn(async move {
        let chunk = vec![0u8; CHUNK_BYTES];
        while !writer_stop.load(Ordering::Relaxed) {
            if stream.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = stream.finish();
    });

    let intervals = run_clock(&conn, flow.as_ref(), plan).await;
    stop.store(true, Ordering::Relaxed);
    let _ = writer.await;
    let totals = progress(&conn, flow.as_ref());
    let udp_bytes = conn.stats().udp_tx.bytes;
    conn.close(0u32.into(), b"done");
    let _ = tokio::time::timeout(CLOSE_WAIT, endpoint.wait_idle()).await;

    let acked: u64 = intervals.iter().map(|i| i.bytes).sum();
    let secs = plan.duration.as_secs_f64();
    let ccp = match cc {
        Controller::Ccp(dp) => {
            let c = dp.counters();
            json!({
                "agent_datagrams": c.agent_datagrams.load(Ordering::Relaxed),
                "measures": c.measures.load(Ordering::Relaxed),
                "resyncs": c.resyncs.load(Ordering::Relaxed),
                "rejected": c.rejected.load(Ordering::Relaxed),
                "malformed": c.malformed.load(Ordering::Relaxed),
                "refused": c.refused.load(Ordering::Relaxed),
                "invoke_errors": c.invoke_errors.load(Ordering::Relaxed),
                "deferred": c.deferred.load(Ordering::Relaxed),
                "merged": c.merged.load(Ordering::Relaxed),
            })
        }
        Controller::QuinnCubic => Value::Null,
    };
    Ok(json!({
        "start": {
            "connected": [{
                "local_host": local.ip().to_string(),
                "local_port": local.port(),
                "remote_host": plan.to.ip().to_string(),
                "remote_port": plan.to.port(),
            }],
            "test_start": { "protocol": "QUIC", "duration": secs },
        },
        "intervals": intervals.iter().map(Interval::json).collect::<Vec<_>>(),
        "end": {
            "sum_sent": {
                "start": 0.0,
                "end": secs,
                "seconds": secs,
                "bytes": acked,
                "bits_per_second": acked as f64 * 8.0 / secs,
                "lost_bytes": totals.lost_bytes,
                "udp_bytes": udp_bytes,
            },
            "ccp": ccp,
        },
    }))
}

/// Ticks through the transfer: priority changes at their times, one [`Interval`] per
/// `plan.interval`.
async fn run_clock(
    conn: &quinn::Connection,
    flow: Option<&FlowHandle>,
    plan: &SendPlan,
) -> Vec<Interval> {
    let start = Instant::now();
    let mut pending: Vec<PriorityAt> = plan.priorities.clone();
    // Latest first: due changes are popped off the end.
    pending.sort_by_key(|p| std::cmp::Reverse(p.at));
    let mut priority = None;
    let mut intervals = Vec::new();
    let mut from = Duration::ZERO;
    let mut acked_before = 0;
    let mut tick = tokio::time::interval(TICK);
    loop {
        tick.tick().await;
        let now = start.elapsed();
        while pending.last().is_some_and(|p| p.at <= now) {
            if let (Some(p), Some(flow)) = (pending.pop(), flow) {
                // A closed connection ends the transfer below.
                let _ = flow.set_priority(p.priority);
                priority = Some(p.priority);
            }
        }
        let done = now >= plan.duration || conn.close_reason().is_some();
        if now - from >= plan.interval || done {
            let s = progress(conn, flow);
            intervals.push(Interval {
                start: from,
                end: now,
                bytes: s.acked_bytes.saturating_sub(acked_before),
                rtt: conn.rtt(),
                window_bytes: s.window_bytes,
                steered: s.steered,
                priority,
            });
            acked_before = s.acked_bytes;
            from = now;
        }
        if done {
            return intervals;
        }
    }
}

/// The connection's numbers so far: the datapath's for a CCP flow; quinn's for its own
/// controller, where bytes sent and not declared lost stand for acknowledged ones (quinn
/// counts no acknowledged bytes; the two differ by what is in flight).
fn progress(conn: &quinn::Connection, flow: Option<&FlowHandle>) -> FlowStats {
    if let Some(f) = flow {
        return f.stats().unwrap_or_default();
    }
    let stats = conn.stats();
    FlowStats {
        acked_bytes: stats.udp_tx.bytes.saturating_sub(stats.path.lost_bytes),
        lost_bytes: stats.path.lost_bytes,
        window_bytes: stats.path.cwnd,
        steered: false,
    }
}
