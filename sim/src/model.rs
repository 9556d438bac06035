//! The event-driven single-bottleneck model.
//!
//! ```text
//!  sender 1 ─┐ (cwnd, pacing)                      base RTT (fixed)
//!  sender 2 ─┼─► droptail FIFO (bytes) ─► link ─────────────────────► ACK at the sender
//!  cross    ─┘                          (serialization at capacity)
//! ```
//!
//! * Time is integer nanoseconds; the datapath view (`Ack.now`, RTT samples) is µs.
//! * All propagation sits after the bottleneck: a packet that leaves the link at `t` is
//!   acknowledged at `t + base RTT`. The minimum RTT is therefore base RTT + one packet's
//!   serialization time. With `link.whole_ms_delivery` a packet counts as delivered at the
//!   end of the millisecond in which the link serialized it, as at Mahimahi's and
//!   `ccp-emu`'s trace links (delivery opportunities at whole milliseconds), so RTT samples
//!   carry up to 1 ms of that rounding. One ACK per packet, never lost, never delayed; a
//!   CCP flow with stretch ACKs (`ack_every` n) hands its driver one sample per n packets,
//!   or at once when the ACK reveals a loss.
//! * Random loss (`link.random_loss`): a packet that crossed the bottleneck (and used its
//!   capacity) is lost on the way to the receiver with that probability, drawn from a seeded
//!   deterministic generator; it is detected like a drop.
//! * The queue holds packets waiting behind the one being serialized; a packet is dropped
//!   when the waiting bytes plus its own would exceed the buffer. With whole-ms delivery the
//!   buffer also holds the packet in service and those serialized but not yet handed over,
//!   as Mahimahi's queue holds every packet until a delivery opportunity takes it: a buffer
//!   smaller than a millisecond of the link then drops even a flow paced below the link.
//! * Loss detection: one flow's packets leave the FIFO in order, so the ACK of packet `n`
//!   reveals every earlier outstanding packet as lost (reported in `lost_pkts_sample`). No
//!   duplicate-ACK threshold, no retransmissions: a backlogged sender sends new data instead,
//!   which moves the same bytes.
//! * Timeout: nothing acknowledged for max(200 ms, 2 x srtt), or 1 s before the first RTT
//!   sample (doubled per consecutive timeout, up to 64x) with data outstanding; everything
//!   outstanding is then declared lost (`was_timeout`), and ACKs of packets sent before the
//!   timeout are ignored.
//! * Senders send while `bytes_in_flight + mss <= cwnd` (one packet is always allowed when
//!   nothing is in flight), paced at `rate` when one is set, and never hold more than the
//!   send buffer ([`send_buffer_bytes`]) unacknowledged.
//! * Ties: link departure, then ACK, then timers in the order they were set.
//!
//! The driver pulls [`SimEvent`]s for the CCP flows and answers with [`Sim::set_cwnd`] and
//! [`Sim::set_rate`] before pulling the next one; the sender acts on them before anything
//! else happens. Cross traffic runs inside the model.

use crate::aimd::Aimd;
use crate::loss::RandomLoss;
use crate::scenario::{CrossSpec, DEFAULT_INIT_CWND_PKTS, Scenario, ScenarioError};
use crate::summary::{DelayStats, FlowSummary, Summary, WindowFlow, WindowSummary};
use algs_core::Priority;
// The sample's fields are libccp primitives, u32 registers of the datapath program.
use algs_core::AckPrimitives;
use algs_core::register::clamp_to_register;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

const NS_PER_US: u64 = 1_000;
const NS_PER_MS: u64 = 1_000_000;
const NS_PER_SEC: f64 = 1e9;
/// Lower bound of the retransmission timeout (RFC 6298 §2.4 says 1 s; Linux uses 200 ms).
const MIN_RTO_NS: u64 = 200 * NS_PER_MS;
/// The timeout before the first RTT sample (RFC 6298 §2.1, Linux's `TCP_TIMEOUT_INIT`): on
/// a path of 200 ms or more the minimum would fire before the first ACK can arrive.
const INITIAL_RTO_NS: u64 = 1_000 * NS_PER_MS;
/// Largest exponential backoff of the timeout.
const MAX_RTO_BACKOFF: u64 = 64;
/// Smallest send buffer: Linux's default `tcp_wmem` maximum (4 MiB).
const MIN_SEND_BUFFER_BYTES: u64 = 4 << 20;

/// Index of a flow: the scenario's CCP flows first (in file order), then its cross traffic.
pub type FlowId = usize;

/// What one ACK (or a timeout) tells a flow's controller: libccp's primitives, with the
/// same units and conventions (docs/datapaths.md §4.2; the model counts no misordering,
/// and `bytes_pending` is capped at the send buffer for a backlogged application).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AckSample {
    /// Datapath time, µs since the start of the run.
    pub now_us: u64,
    pub prims: AckPrimitives,
}

/// Something the driver of the CCP flows must handle.
#[derive(Debug, Clone, PartialEq)]
pub enum SimEvent {
    /// The flow's application starts: the datapath creates the connection.
    Start { flow: FlowId },
    /// An ACK or a timeout (`sample.was_timeout`) arrived.
    Ack { flow: FlowId, sample: AckSample },
    /// The application asked for another priority.
    Priority { flow: FlowId, priority: Priority },
    /// The application stopped, or the run ended: the datapath closes the connection.
    Stop { flow: FlowId },
}

#[derive(Debug, Clone, Copy)]
struct Packet {
    flow: u32,
    /// Bytes.
    size: u32,
    /// Timeout epoch of the sender when sent.
    epoch: u32,
    seq: u64,
    /// Left the sender, ns.
    sent_ns: u64,
    /// Reached the bottleneck queue, ns.
    enq_ns: u64,
    /// Rate-sample snapshot at send time (the sender's delivered bytes, the time of the
    /// last delivery, the send time of the last delivered packet), as Linux tcp_rate.c.
    delivered: u64,
    delivered_ns: u64,
    first_tx_ns: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    Start(FlowId),
    Priority(FlowId, usize),
    Stop(FlowId),
    /// Pacing: the flow may send again (stale unless the generation matches).
    Wake(FlowId, u64),
    Rto(FlowId),
    /// The next packet of a constant-rate flow.
    Constant(FlowId),
}

#[derive(Debug)]
enum Kind {
    Ccp { alg: String },
    Aimd(Aimd),
    Constant { rate_bytes_per_sec: f64, sent: u64 },
}

#[derive(Debug, Default)]
struct FlowStats {
    packets_sent: u64,
    /// Bytes that left the bottleneck and reached the receiver.
    bytes: u64,
    /// Packets the queue refused.
    drops: u64,
    /// Packets lost on the link after the bottleneck (random loss).
    link_losses: u64,
    /// Packets the sender declared lost.
    losses: u64,
    timeouts: u64,
    /// Samples handed to the controller.
    acks: u64,
    /// Bytes that left the bottleneck and reached the receiver, per bin.
    bin_bytes: Vec<u64>,
    /// Window (bytes), rate (bytes/s) and srtt (ms) at every bin edge.
    cwnd: Vec<u64>,
    rate: Vec<u64>,
    srtt_ms: Vec<f64>,
    /// Bytes that left the bottleneck and reached the receiver, per report window.
    window_bytes: Vec<u64>,
}

#[derive(Debug)]
struct Sender {
    name: String,
    kind: Kind,
    /// When the application starts and stops sending, ns.
    start_ns: u64,
    stop_ns: Option<u64>,
    /// The application has data (started and not stopped).
    active: bool,
    /// Window, bytes.
    cwnd: u64,
    /// Pacing rate, bytes/s; `None` = not paced.
    rate: Option<u64>,
    /// Sequence number (in packets) of the next packet.
    next_seq: u64,
    /// (seq, size in bytes) of every packet sent and not yet acknowledged or declared lost.
    outstanding: VecDeque<(u64, u32)>,
    /// Sum of the sizes in `outstanding`, bytes.
    inflight_bytes: u64,
    /// Time of the last send, ns.
    last_send_ns: Option<u64>,
    /// Earliest time the pacer lets the next packet go, ns.
    next_send_ns: u64,
    /// Generation of the pending pacing wake-up (older ones are stale).
    wake_gen: u64,
    /// Time of the pending pacing wake-up, ns.
    wake_at: Option<u64>,
    /// Smoothed RTT, ns.
    srtt_ns: Option<u64>,
    /// The retransmission timeout fires at this time, ns, unless an ACK moves it.
    rto_deadline: Option<u64>,
    /// Time of the timer event in the heap for the timeout, ns (one at a time).
    rto_timer_at: Option<u64>,
    /// Timeout multiplier: doubles per consecutive timeout, 1 after an ACK.
    backoff: u64,
    /// Incremented at every timeout; ACKs of packets from older epochs are ignored.
    epoch: u32,
    /// Rate-sample state (tcp_rate.c): bytes delivered so far, time of the last delivery,
    /// send time of the last delivered packet, ns.
    delivered: u64,
    delivered_ns: u64,
    first_tx_ns: u64,
    /// Stretch ACKs: packets per sample handed to the driver (CCP flows; 1 = every packet).
    ack_every: u32,
    /// Packets (and their bytes) acknowledged but not yet handed to the driver.
    held_pkts: u32,
    held_bytes: u64,
    stats: FlowStats,
}

impl Sender {
    fn new(name: String, kind: Kind, start_ns: u64, stop_ns: Option<u64>, cwnd: u64) -> Self {
        Sender {
            name,
            kind,
            start_ns,
            stop_ns,
            active: false,
            cwnd,
            rate: None,
            next_seq: 0,
            outstanding: VecDeque::new(),
            inflight_bytes: 0,
            last_send_ns: None,
            next_send_ns: 0,
            wake_gen: 0,
            wake_at: None,
            srtt_ns: None,
            rto_deadline: None,
            rto_timer_at: None,
            backoff: 1,
            epoch: 0,
            delivered: 0,
            delivered_ns: 0,
            first_tx_ns: 0,
            ack_every: 1,
            held_pkts: 0,
            held_bytes: 0,
            stats: FlowStats::default(),
        }
    }

    fn rto_ns(&self) -> u64 {
        let base = self
            .srtt_ns
            .map_or(INITIAL_RTO_NS, |s| (2 * s).max(MIN_RTO_NS));
        base.saturating_mul(self.backoff)
    }

    fn kind_name(&self) -> &'static str {
        match self.kind {
            Kind::Ccp { .. } => "ccp",
            Kind::Aimd(_) => "aimd",
            Kind::Constant { .. } => "constant",
        }
    }
}

/// Model-wide invariants that a test can check at any point.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvariantViolation {
    #[error("queue holds {queue} bytes, more than the {buffer}-byte buffer")]
    QueueOverBuffer { queue: u64, buffer: u64 },
    #[error("{sent} packets sent but {accounted} departed, dropped or in the network")]
    Conservation { sent: u64, accounted: u64 },
    #[error("flow {flow}: {what}")]
    Decision { flow: String, what: String },
}

/// A running simulation. See the module documentation.
#[derive(Debug)]
pub struct Sim {
    scenario: Scenario,
    capacity_bytes_per_sec: f64,
    base_rtt_ns: u64,
    buffer: u64,
    mss: u32,
    send_buffer: u64,
    end_ns: u64,
    bin_ns: u64,
    n_bins: usize,
    now: u64,
    senders: Vec<Sender>,
    n_ccp: usize,
    queue: VecDeque<Packet>,
    queue_bytes: u64,
    max_queue_bytes: u64,
    in_service: Option<Packet>,
    service_done_ns: u64,
    /// With `whole_ms_delivery`: bytes the link serialized that wait for the end of the
    /// millisecond (`held_until_ns`) to be handed over; they still take buffer space.
    held_bytes: u64,
    held_until_ns: u64,
    /// Packets past the link, in ACK order (all share one fixed delay).
    pipe: VecDeque<(u64, Packet)>,
    timers: BinaryHeap<Reverse<(u64, u64, Timer)>>,
    timer_seq: u64,
    /// Flows whose sender must act on the driver's answer before anything else happens.
    pending_send: Vec<FlowId>,
    /// Flows still to be closed after the end of the run.
    ending: VecDeque<FlowId>,
    finished: bool,
    bins_recorded: usize,
    total_bytes: u64,
    drops: u64,
    dropped_packets: u64,
    /// Packets lost on the link after the bottleneck.
    link_losses: u64,
    loss: RandomLoss,
    /// (time ms, waiting µs) of every packet that entered service.
    delays: Vec<(u32, u32)>,
    bin_delay: Vec<(u64, u32, u32)>,
    window_bytes: Vec<u64>,
}

fn secs_to_ns(s: f64) -> u64 {
    (s * NS_PER_SEC).round().max(0.0) as u64
}

fn ns_to_secs(ns: u64) -> f64 {
    ns as f64 / NS_PER_SEC
}

fn mbps(bytes: u64, ns: u64) -> f64 {
    if ns == 0 {
        0.0
    } else {
        bytes as f64 * 8.0 / (ns as f64 / NS_PER_SEC) / 1e6
    }
}

/// The send buffer of every sender: at least Linux's 4 MiB, and large enough that it never
/// limits a flow that fills the pipe and the buffer twice over.
pub fn send_buffer_bytes(scenario: &Scenario) -> u64 {
    let pipe = scenario.bdp_bytes().max(0.0) as u64 + scenario.buffer_bytes();
    MIN_SEND_BUFFER_BYTES.max(pipe.saturating_mul(2))
}

impl Sim {
    /// A simulation of a validated scenario.
    pub fn new(scenario: &Scenario) -> Result<Sim, ScenarioError> {
        scenario.validate()?;
        let s = scenario;
        let mss = s.link.mss;
        let end_ns = secs_to_ns(s.link.duration_s);
        let bin_ns = s.bin_ms * NS_PER_MS;
        let n_bins = end_ns.div_ceil(bin_ns) as usize;
        let init =
            |pkts: Option<u32>| u64::from(pkts.unwrap_or(DEFAULT_INIT_CWND_PKTS)) * u64::from(mss);
        let mut senders = Vec::new();
        for f in &s.flows {
            let mut sender = Sender::new(
                f.name.clone(),
                Kind::Ccp { alg: f.alg.clone() },
                secs_to_ns(f.start_s),
                f.stop_s.map(secs_to_ns),
                init(f.init_cwnd_pkts),
            );
            sender.ack_every = f.ack_every.unwrap_or(1);
            senders.push(sender);
        }
        for c in &s.cross {
            let sender = match c {
                CrossSpec::Constant {
                    name,
                    rate_mbps,
                    start_s,
                    stop_s,
                } => Sender::new(
                    name.clone(),
                    Kind::Constant {
                        rate_bytes_per_sec: algs_core::BytesPerSec::from_mbps(*rate_mbps).0,
                        sent: 0,
                    },
                    secs_to_ns(*start_s),
                    stop_s.map(secs_to_ns),
                    0,
                ),
                CrossSpec::Aimd {
                    name,
                    start_s,
                    stop_s,
                    init_cwnd_pkts,
                } => {
                    let cwnd = init(*init_cwnd_pkts);
                    Sender::new(
                        name.clone(),
                        Kind::Aimd(Aimd::new(u64::from(mss), cwnd)),
                        secs_to_ns(*start_s),
                        stop_s.map(secs_to_ns),
                        cwnd,
                    )
                }
            };
            senders.push(sender);
        }
        for sd in &mut senders {
            sd.stats.window_bytes = vec![0; s.reports.len()];
            sd.stats.bin_bytes = vec![0; n_bins];
        }
        let mut sim = Sim {
            capacity_bytes_per_sec: s.capacity().0,
            base_rtt_ns: secs_to_ns(s.link.rtt_ms / 1e3),
            buffer: s.buffer_bytes(),
            mss,
            send_buffer: send_buffer_bytes(s),
            end_ns,
            bin_ns,
            n_bins,
            now: 0,
            senders,
            n_ccp: s.flows.len(),
            queue: VecDeque::new(),
            queue_bytes: 0,
            max_queue_bytes: 0,
            in_service: None,
            service_done_ns: 0,
            held_bytes: 0,
            held_until_ns: 0,
            pipe: VecDeque::new(),
            timers: BinaryHeap::new(),
            timer_seq: 0,
            pending_send: Vec::new(),
            ending: VecDeque::new(),
            finished: false,
            bins_recorded: 0,
            total_bytes: 0,
            drops: 0,
            dropped_packets: 0,
            link_losses: 0,
            loss: RandomLoss::new(s.link.random_loss, s.link.loss_seed),
            delays: Vec::new(),
            bin_delay: vec![(0, 0, 0); n_bins],
            window_bytes: vec![0; s.reports.len()],
            scenario: s.clone(),
        };
        // Starts first, then priority changes, then stops, so that equal times keep that
        // order.
        for f in 0..sim.senders.len() {
            let t = sim.senders[f].start_ns;
            sim.push_timer(t, Timer::Start(f));
        }
        for (f, spec) in s.flows.iter().enumerate() {
            let start = sim.senders[f].start_ns;
            for (i, p) in spec.priority.iter().enumerate() {
                sim.push_timer(secs_to_ns(p.at_s).max(start), Timer::Priority(f, i));
            }
        }
        for f in 0..sim.senders.len() {
            if let Some(t) = sim.senders[f].stop_ns {
                sim.push_timer(t, Timer::Stop(f));
            }
        }
        Ok(sim)
    }

    /// Current simulated time, µs since the start.
    pub fn now_us(&self) -> u64 {
        self.now / NS_PER_US
    }

    /// Current simulated time, ns since the start.
    pub fn now_ns(&self) -> u64 {
        self.now
    }

    /// The scenario this simulation runs.
    pub fn scenario(&self) -> &Scenario {
        &self.scenario
    }

    /// Number of CCP flows (their ids are `0..n`).
    pub fn ccp_flows(&self) -> usize {
        self.n_ccp
    }

    /// Window in force for a flow, bytes.
    pub fn cwnd(&self, flow: FlowId) -> u64 {
        self.senders.get(flow).map_or(0, |s| s.cwnd)
    }

    /// Pacing rate in force for a flow, bytes/s.
    pub fn rate(&self, flow: FlowId) -> Option<u64> {
        self.senders.get(flow).and_then(|s| s.rate)
    }

    /// Sets a CCP flow's window (bytes; 0 is ignored, as libccp never sets 0).
    pub fn set_cwnd(&mut self, flow: FlowId, bytes: u64) {
        if flow >= self.n_ccp || bytes == 0 {
            return;
        }
        self.senders[flow].cwnd = bytes;
        self.mark_pending(flow);
    }

    /// Sets a CCP flow's pacing rate (bytes/s; `None` or 0 = not paced).
    pub fn set_rate(&mut self, flow: FlowId, rate: Option<u64>) {
        if flow >= self.n_ccp {
            return;
        }
        let rate = rate.filter(|&r| r > 0);
        let s = &mut self.senders[flow];
        if s.rate == rate {
            return;
        }
        s.rate = rate;
        // The gap after the last packet follows the new rate at once.
        s.next_send_ns = match (rate, s.last_send_ns) {
            (Some(r), Some(last)) => last + gap_ns(u64::from(self.mss), r),
            _ => self.now,
        };
        s.wake_at = None;
        s.wake_gen += 1;
        self.mark_pending(flow);
    }

    fn mark_pending(&mut self, flow: FlowId) {
        if !self.pending_send.contains(&flow) {
            self.pending_send.push(flow);
        }
    }

    fn push_timer(&mut self, at: u64, t: Timer) {
        self.timer_seq += 1;
        self.timers.push(Reverse((at, self.timer_seq, t)));
    }

    /// Runs the model up to the next event for the driver; `None` once the run is over
    /// (after a `Stop` for every CCP flow still running).
    pub fn next_event(&mut self) -> Option<SimEvent> {
        for f in std::mem::take(&mut self.pending_send) {
            self.try_send(f);
        }
        loop {
            if self.finished {
                return self.ending.pop_front().map(|flow| SimEvent::Stop { flow });
            }
            let t_link = self.in_service.map(|_| self.service_done_ns);
            let t_ack = self.pipe.front().map(|p| p.0);
            let t_timer = self.timers.peek().map(|Reverse((t, _, _))| *t);
            let next = [t_link, t_ack, t_timer]
                .iter()
                .enumerate()
                .filter_map(|(i, t)| t.map(|t| (t, i)))
                .min();
            let Some((t, which)) = next.filter(|(t, _)| *t <= self.end_ns) else {
                self.finish();
                continue;
            };
            self.advance(t);
            let ev = match which {
                0 => {
                    self.depart();
                    None
                }
                1 => match self.pipe.pop_front() {
                    Some((_, p)) => self.on_ack(p),
                    None => None,
                },
                _ => match self.timers.pop() {
                    Some(Reverse((_, _, timer))) => self.on_timer(timer),
                    None => None,
                },
            };
            if ev.is_some() {
                return ev;
            }
        }
    }

    fn finish(&mut self) {
        self.advance(self.end_ns);
        self.finished = true;
        for f in 0..self.n_ccp {
            let s = &mut self.senders[f];
            if s.active {
                s.active = false;
                self.ending.push_back(f);
            }
        }
    }

    /// Moves the clock, recording the series at every bin edge passed.
    fn advance(&mut self, t: u64) {
        debug_assert!(t >= self.now, "time runs backwards: {} -> {t}", self.now);
        while self.bins_recorded < self.n_bins {
            let edge = ((self.bins_recorded as u64 + 1) * self.bin_ns).min(self.end_ns);
            if edge > t {
                break;
            }
            for s in &mut self.senders {
                let (cwnd, rate) = match (&s.kind, s.active) {
                    (_, false) => (0, 0),
                    (
                        Kind::Constant {
                            rate_bytes_per_sec, ..
                        },
                        true,
                    ) => (0, *rate_bytes_per_sec as u64),
                    (_, true) => (s.cwnd, s.rate.unwrap_or(0)),
                };
                s.stats.cwnd.push(cwnd);
                s.stats.rate.push(rate);
                s.stats
                    .srtt_ms
                    .push(s.srtt_ns.map_or(0.0, |r| r as f64 / NS_PER_MS as f64));
            }
            self.bins_recorded += 1;
        }
        self.now = self.now.max(t);
    }

    fn bin_of(&self, t: u64) -> usize {
        ((t / self.bin_ns) as usize).min(self.n_bins.saturating_sub(1))
    }

    fn ser_ns(&self, size: u32) -> u64 {
        (f64::from(size) * NS_PER_SEC / self.capacity_bytes_per_sec).round() as u64
    }

    fn on_timer(&mut self, timer: Timer) -> Option<SimEvent> {
        match timer {
            Timer::Start(f) => {
                let s = &mut self.senders[f];
                s.active = true;
                s.first_tx_ns = self.now;
                s.delivered_ns = self.now;
                match s.kind {
                    Kind::Ccp { .. } => {
                        self.mark_pending(f);
                        return Some(SimEvent::Start { flow: f });
                    }
                    Kind::Aimd(_) => self.try_send(f),
                    Kind::Constant { .. } => self.push_timer(self.now, Timer::Constant(f)),
                }
            }
            Timer::Stop(f) => {
                let s = &mut self.senders[f];
                let was = s.active;
                s.active = false;
                s.rto_deadline = None;
                if was && matches!(s.kind, Kind::Ccp { .. }) {
                    return Some(SimEvent::Stop { flow: f });
                }
            }
            Timer::Priority(f, i) => {
                if self.senders[f].active {
                    let priority = self.scenario.flows[f].priority[i].priority();
                    return Some(SimEvent::Priority { flow: f, priority });
                }
            }
            Timer::Wake(f, gen_) => {
                let s = &mut self.senders[f];
                if s.wake_gen == gen_ {
                    s.wake_at = None;
                    self.try_send(f);
                }
            }
            Timer::Rto(f) => return self.on_rto_timer(f),
            Timer::Constant(f) => self.send_constant(f),
        }
        None
    }

    fn send_constant(&mut self, f: FlowId) {
        let now = self.now;
        let mss = self.mss;
        let s = &mut self.senders[f];
        if !s.active {
            return;
        }
        let Kind::Constant {
            rate_bytes_per_sec,
            sent,
        } = &mut s.kind
        else {
            return;
        };
        *sent += 1;
        // The k-th packet goes at start + k x gap, computed from the start so that
        // rounding never drifts the rate.
        let next = s.start_ns
            + (*sent as f64 * f64::from(mss) * NS_PER_SEC / *rate_bytes_per_sec).round() as u64;
        let seq = s.next_seq;
        s.next_seq += 1;
        s.stats.packets_sent += 1;
        let p = Packet {
            flow: f as u32,
            size: mss,
            epoch: s.epoch,
            seq,
            sent_ns: now,
            enq_ns: now,
            delivered: 0,
            delivered_ns: now,
            first_tx_ns: now,
        };
        self.push_timer(next.max(now + 1), Timer::Constant(f));
        self.enqueue(p);
    }

    /// Sends what the window, the pacing rate and the send buffer allow.
    fn try_send(&mut self, f: FlowId) {
        let mss = u64::from(self.mss);
        loop {
            let now = self.now;
            let s = &mut self.senders[f];
            if !s.active || matches!(s.kind, Kind::Constant { .. }) {
                return;
            }
            let room = s.outstanding.is_empty()
                || (s.inflight_bytes + mss <= s.cwnd && s.inflight_bytes + mss <= self.send_buffer);
            if !room {
                return;
            }
            if s.rate.is_some() && s.next_send_ns > now {
                let at = s.next_send_ns;
                if s.wake_at != Some(at) {
                    s.wake_gen += 1;
                    s.wake_at = Some(at);
                    let g = s.wake_gen;
                    self.push_timer(at, Timer::Wake(f, g));
                }
                return;
            }
            self.send_one(f);
        }
    }

    fn send_one(&mut self, f: FlowId) {
        let now = self.now;
        let size = self.mss;
        let s = &mut self.senders[f];
        if s.outstanding.is_empty() {
            // Nothing in flight: the next rate sample starts here (tcp_rate.c).
            s.first_tx_ns = now;
            s.delivered_ns = now;
        }
        let seq = s.next_seq;
        s.next_seq += 1;
        s.outstanding.push_back((seq, size));
        s.inflight_bytes += u64::from(size);
        s.stats.packets_sent += 1;
        s.last_send_ns = Some(now);
        if let Some(r) = s.rate {
            s.next_send_ns = now + gap_ns(u64::from(size), r);
        }
        let p = Packet {
            flow: f as u32,
            size,
            epoch: s.epoch,
            seq,
            sent_ns: now,
            enq_ns: now,
            delivered: s.delivered,
            delivered_ns: s.delivered_ns,
            first_tx_ns: s.first_tx_ns,
        };
        if s.rto_deadline.is_none() {
            self.arm_rto(f);
        }
        self.enqueue(p);
    }

    fn arm_rto(&mut self, f: FlowId) {
        let now = self.now;
        let s = &mut self.senders[f];
        let deadline = now + s.rto_ns();
        s.rto_deadline = Some(deadline);
        if s.rto_timer_at.is_none() {
            s.rto_timer_at = Some(deadline);
            self.push_timer(deadline, Timer::Rto(f));
        }
    }

    fn on_rto_timer(&mut self, f: FlowId) -> Option<SimEvent> {
        let now = self.now;
        let s = &mut self.senders[f];
        s.rto_timer_at = None;
        match s.rto_deadline {
            None => None,
            Some(d) if d > now => {
                s.rto_timer_at = Some(d);
                self.push_timer(d, Timer::Rto(f));
                None
            }
            Some(_) => self.timeout(f),
        }
    }

    fn timeout(&mut self, f: FlowId) -> Option<SimEvent> {
        let s = &mut self.senders[f];
        s.rto_deadline = None;
        if !s.active || s.outstanding.is_empty() {
            return None;
        }
        let lost = s.outstanding.len() as u64;
        let (held_pkts, held_bytes) = (s.held_pkts, s.held_bytes);
        s.held_pkts = 0;
        s.held_bytes = 0;
        s.outstanding.clear();
        s.inflight_bytes = 0;
        s.epoch = s.epoch.wrapping_add(1);
        s.backoff = (s.backoff * 2).min(MAX_RTO_BACKOFF);
        s.stats.timeouts += 1;
        s.stats.losses += lost;
        let next_seq = s.next_seq;
        if let Kind::Aimd(a) = &mut s.kind {
            a.on_timeout(next_seq);
            s.cwnd = a.cwnd;
            self.try_send(f);
            return None;
        }
        s.stats.acks += 1;
        // Packets a stretch ACK still held are reported with the timeout.
        let sample = AckSample {
            now_us: self.now / NS_PER_US,
            prims: AckPrimitives {
                bytes_acked: clamp_to_register(held_bytes),
                packets_acked: held_pkts,
                lost_pkts_sample: clamp_to_register(lost),
                was_timeout: true,
                snd_cwnd: clamp_to_register(s.cwnd),
                snd_rate: s.rate.unwrap_or(0),
                bytes_pending: clamp_to_register(self.send_buffer),
                ..AckPrimitives::default()
            },
        };
        self.mark_pending(f);
        Some(SimEvent::Ack { flow: f, sample })
    }

    /// Bytes the buffer holds besides the waiting queue: none on a serializing link, where
    /// the packet in service is on the wire; with whole-ms delivery, as at Mahimahi's and
    /// `ccp-emu`'s links, every packet stays in the queue until a millisecond's delivery
    /// opportunities take it, so the one in service and those serialized but not yet handed
    /// over count too.
    fn held_in_buffer(&self) -> u64 {
        if !self.scenario.link.whole_ms_delivery {
            return 0;
        }
        let held = if self.now < self.held_until_ns {
            self.held_bytes
        } else {
            0
        };
        held + self.in_service.map_or(0, |p| u64::from(p.size))
    }

    fn enqueue(&mut self, p: Packet) {
        let full = self.queue_bytes + self.held_in_buffer() + u64::from(p.size) > self.buffer;
        // An idle serializing link puts any packet on the wire; else it needs buffer room.
        let onto_idle_wire = self.in_service.is_none() && !self.scenario.link.whole_ms_delivery;
        if full && !onto_idle_wire {
            self.drops += 1;
            self.dropped_packets += 1;
            self.senders[p.flow as usize].stats.drops += 1;
        } else if self.in_service.is_none() {
            self.start_service(p);
        } else {
            self.queue_bytes += u64::from(p.size);
            self.max_queue_bytes = self.max_queue_bytes.max(self.queue_bytes);
            self.queue.push_back(p);
        }
    }

    fn start_service(&mut self, p: Packet) {
        let wait_us = clamp_to_register((self.now - p.enq_ns) / NS_PER_US);
        let t_ms = clamp_to_register(self.now / NS_PER_MS);
        self.delays.push((t_ms, wait_us));
        let b = self.bin_of(self.now);
        if let Some(bd) = self.bin_delay.get_mut(b) {
            bd.0 += u64::from(wait_us);
            bd.1 += 1;
            bd.2 = bd.2.max(wait_us);
        }
        self.service_done_ns = self.now + self.ser_ns(p.size);
        self.in_service = Some(p);
    }

    fn depart(&mut self) {
        let Some(p) = self.in_service.take() else {
            return;
        };
        let size = u64::from(p.size);
        if self.scenario.link.whole_ms_delivery {
            let end = self.now.div_ceil(NS_PER_MS) * NS_PER_MS;
            if end != self.held_until_ns {
                (self.held_until_ns, self.held_bytes) = (end, 0);
            }
            self.held_bytes += size;
        }
        let b = self.bin_of(self.now);
        let t_s = ns_to_secs(self.now);
        // The link carried it either way (utilization); the flow delivered it only if the
        // lossy link let it through.
        let lost = self.loss.lose();
        self.total_bytes += size;
        let st = &mut self.senders[p.flow as usize].stats;
        for (i, w) in self.scenario.reports.iter().enumerate() {
            if t_s >= w.from_s && t_s < w.to_s {
                self.window_bytes[i] += size;
                if !lost {
                    st.window_bytes[i] += size;
                }
            }
        }
        if lost {
            st.link_losses += 1;
            self.link_losses += 1;
        } else {
            st.bytes += size;
            st.bin_bytes[b] += size;
            if !matches!(self.senders[p.flow as usize].kind, Kind::Constant { .. }) {
                let delivered = if self.scenario.link.whole_ms_delivery {
                    self.held_until_ns
                } else {
                    self.now
                };
                self.pipe.push_back((delivered + self.base_rtt_ns, p));
            }
        }
        if let Some(next) = self.queue.pop_front() {
            self.queue_bytes -= u64::from(next.size);
            self.start_service(next);
        }
    }

    fn on_ack(&mut self, p: Packet) -> Option<SimEvent> {
        let now = self.now;
        let f = p.flow as usize;
        let s = &mut self.senders[f];
        if !s.active || p.epoch != s.epoch {
            return None;
        }
        let mut lost = 0u64;
        let mut highest_lost = None;
        while let Some(&(seq, size)) = s.outstanding.front() {
            if seq >= p.seq {
                break;
            }
            s.outstanding.pop_front();
            s.inflight_bytes -= u64::from(size);
            lost += 1;
            highest_lost = Some(seq);
        }
        match s.outstanding.front() {
            Some(&(seq, size)) if seq == p.seq => {
                s.outstanding.pop_front();
                s.inflight_bytes -= u64::from(size);
            }
            _ => {
                debug_assert!(false, "ACK of packet {} that is not outstanding", p.seq);
                return None;
            }
        }
        let rtt = now - p.sent_ns;
        // RFC 6298 smoothing (gain 1/8).
        s.srtt_ns = Some(s.srtt_ns.map_or(rtt, |srtt| (7 * srtt + rtt) / 8));
        s.delivered += u64::from(p.size);
        s.delivered_ns = now;
        s.first_tx_ns = p.sent_ns;
        let delivered = s.delivered - p.delivered;
        let rate = |interval_ns: u64| {
            if interval_ns == 0 {
                0
            } else {
                (delivered as f64 * NS_PER_SEC / interval_ns as f64) as u64
            }
        };
        let rate_outgoing = rate(p.sent_ns - p.first_tx_ns);
        let rate_incoming = rate(now - p.delivered_ns);
        s.backoff = 1;
        s.stats.losses += lost;
        if s.outstanding.is_empty() {
            s.rto_deadline = None;
        } else {
            self.arm_rto(f);
        }
        let s = &mut self.senders[f];
        let next_seq = s.next_seq;
        if let Kind::Aimd(a) = &mut s.kind {
            a.on_ack(u64::from(p.size), highest_lost, next_seq);
            s.cwnd = a.cwnd;
            self.try_send(f);
            return None;
        }
        // Stretch ACKs: hold the packet back unless it completes a group or reveals a loss.
        s.held_pkts += 1;
        s.held_bytes += u64::from(p.size);
        if lost == 0 && s.held_pkts < s.ack_every {
            self.try_send(f);
            return None;
        }
        let (acked_pkts, acked_bytes) = (s.held_pkts, s.held_bytes);
        s.held_pkts = 0;
        s.held_bytes = 0;
        s.stats.acks += 1;
        let pending = if s.active {
            self.send_buffer
        } else {
            s.inflight_bytes
        };
        let sample = AckSample {
            now_us: now / NS_PER_US,
            prims: AckPrimitives {
                bytes_acked: clamp_to_register(acked_bytes),
                packets_acked: acked_pkts,
                lost_pkts_sample: clamp_to_register(lost),
                rtt_sample_us: (rtt / NS_PER_US).max(1),
                rate_outgoing,
                rate_incoming,
                bytes_in_flight: clamp_to_register(s.inflight_bytes),
                packets_in_flight: clamp_to_register(s.outstanding.len() as u64),
                snd_cwnd: clamp_to_register(s.cwnd),
                snd_rate: s.rate.unwrap_or(0),
                bytes_pending: clamp_to_register(pending),
                ..AckPrimitives::default()
            },
        };
        self.mark_pending(f);
        Some(SimEvent::Ack { flow: f, sample })
    }

    /// Checks the model's invariants: the queue within its buffer, and every packet sent
    /// either departed, dropped, queued or on the link.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        if self.queue_bytes > self.buffer || self.max_queue_bytes > self.buffer {
            return Err(InvariantViolation::QueueOverBuffer {
                queue: self.max_queue_bytes.max(self.queue_bytes),
                buffer: self.buffer,
            });
        }
        let sent: u64 = self.senders.iter().map(|s| s.stats.packets_sent).sum();
        let departed: u64 = self
            .senders
            .iter()
            .map(|s| s.stats.bytes / u64::from(self.mss))
            .sum();
        let accounted = departed
            + self.dropped_packets
            + self.link_losses
            + self.queue.len() as u64
            + u64::from(self.in_service.is_some());
        if sent != accounted {
            return Err(InvariantViolation::Conservation { sent, accounted });
        }
        Ok(())
    }

    /// The summary of the run so far (complete once `next_event` returned `None`).
    pub fn summary(&self) -> Summary {
        let duration_ns = self.end_ns;
        let cap_bytes = |ns: u64| self.capacity_bytes_per_sec * ns as f64 / NS_PER_SEC;
        let mut all: Vec<u32> = self.delays.iter().map(|d| d.1).collect();
        let flows = self
            .senders
            .iter()
            .map(|s| {
                let stop = s.stop_ns.unwrap_or(self.end_ns).min(self.end_ns);
                let span = stop.saturating_sub(s.start_ns);
                FlowSummary {
                    name: s.name.clone(),
                    kind: s.kind_name(),
                    alg: match &s.kind {
                        Kind::Ccp { alg } => Some(alg.clone()),
                        _ => None,
                    },
                    start_s: ns_to_secs(s.start_ns),
                    stop_s: ns_to_secs(stop),
                    mean_mbps: mbps(s.stats.bytes, span),
                    bytes: s.stats.bytes,
                    packets_sent: s.stats.packets_sent,
                    drops: s.stats.drops,
                    link_losses: s.stats.link_losses,
                    losses_detected: s.stats.losses,
                    timeouts: s.stats.timeouts,
                    acks: s.stats.acks,
                    throughput_mbps: s
                        .stats
                        .bin_bytes
                        .iter()
                        .enumerate()
                        .map(|(i, &b)| mbps(b, self.bin_width(i)))
                        .collect(),
                    cwnd_bytes: s.stats.cwnd.clone(),
                    rate_bytes_per_sec: s.stats.rate.clone(),
                    srtt_ms: s.stats.srtt_ms.clone(),
                }
            })
            .collect();
        let windows = self
            .scenario
            .reports
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let from = secs_to_ns(w.from_s);
                let to = secs_to_ns(w.to_s).min(self.end_ns).max(from);
                let (from_ms, to_ms) = (from / NS_PER_MS, to / NS_PER_MS);
                let mut d: Vec<u32> = self
                    .delays
                    .iter()
                    .filter(|(t, _)| u64::from(*t) >= from_ms && u64::from(*t) < to_ms)
                    .map(|(_, d)| *d)
                    .collect();
                WindowSummary {
                    name: w.name.clone(),
                    from_s: w.from_s,
                    to_s: ns_to_secs(to),
                    utilization: ratio(self.window_bytes[i] as f64, cap_bytes(to - from)),
                    queue_delay: DelayStats::from_us(&mut d),
                    flows: self
                        .senders
                        .iter()
                        .map(|s| WindowFlow {
                            name: s.name.clone(),
                            mean_mbps: mbps(s.stats.window_bytes[i], to - from),
                            bytes: s.stats.window_bytes[i],
                        })
                        .collect(),
                }
            })
            .collect();
        Summary {
            scenario: self.scenario.name.clone(),
            duration_s: ns_to_secs(duration_ns),
            link_rate_mbps: self.scenario.link.rate_mbps,
            base_rtt_ms: self.scenario.link.rtt_ms,
            buffer_bytes: self.buffer,
            mss: self.mss,
            utilization: ratio(self.total_bytes as f64, cap_bytes(duration_ns)),
            drops: self.drops,
            link_losses: self.link_losses,
            max_queue_bytes: self.max_queue_bytes,
            queue_delay: DelayStats::from_us(&mut all),
            bin_s: self.bin_ns as f64 / NS_PER_SEC,
            queue_delay_ms_series: self
                .bin_delay
                .iter()
                .map(|&(sum, n, _)| {
                    if n == 0 {
                        0.0
                    } else {
                        sum as f64 / f64::from(n) / 1e3
                    }
                })
                .collect(),
            queue_delay_max_ms_series: self
                .bin_delay
                .iter()
                .map(|&(_, _, m)| f64::from(m) / 1e3)
                .collect(),
            flows,
            windows,
        }
    }

    fn bin_width(&self, i: usize) -> u64 {
        let start = i as u64 * self.bin_ns;
        ((start + self.bin_ns).min(self.end_ns)).saturating_sub(start)
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

/// Time to send `bytes` at `rate` bytes/s, ns (at least 1 ns).
fn gap_ns(bytes: u64, rate: u64) -> u64 {
    ((bytes as f64 * NS_PER_SEC / rate as f64).round() as u64).max(1)
}
