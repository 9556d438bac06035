//! The agent's event handling: datapath messages in, algorithm calls and datapath messages
//! out (docs/architecture.md §4).
//!
//! portus' own runtime panics on some message types and drops unknown ones (docs/datapaths.md
//! §3.1), so this one is built from its public pieces. Per datagram:
//!
//! ```text
//!  Ready ─────────► forget the datapath's flows, send every Install
//!  Create ────────► (unknown datapath: Install first) → select algorithm → new flow
//!  Measure ───────► flow.on_report; no fields = close
//!  PRIORITY ──────► flow.on_priority → Applied | HandOff → close + start target algorithm
//!  SYNC ──────────► echo (after everything before it); sid 0xffffffff: the datapath
//!                   reads batches, so what each datagram causes goes out packed
//!  anything else ─► counted and logged; the loop goes on
//! ```
//! Each datapath (a bound socket address) has its own flow table; a datapath that cannot be
//! reached is forgotten without disturbing the others.

mod counters;
mod handle;
mod netlink;
mod transport;
mod unix;

pub use counters::Counters;
pub use handle::DpHandle;
pub use netlink::NetlinkSocket;
pub use transport::{IpcTransport, Receive, Recorder, Transport, Unreachable};
pub use unix::{BindError, UnixSocket};

use crate::policy::{FlowTuple, Policy};
use crate::programs::ProgramSet;
use crate::registry::Algorithms;
use crate::trace::{FlowTrace, TraceEvent};
use algs_core::ccp::{CcpFlow, FlowStart, PriorityOutcome, RawReport, ReportError};
use algs_core::{Bytes, BytesPerSec, CarriedState, Priority};
use ccp_wire::{
    CreateMsg, DatapathMsg, DecodeError, Frames, MeasureMsg, PriorityClass, PriorityMsg,
};
use serde_json::json;
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::rc::Rc;
use tracing::{debug, info, warn};

/// How a datapath writes addresses and ports into Create.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum TupleOrder {
    /// Network byte order inside the u32, as ccp-kernel (and this project's datapaths) do.
    #[default]
    Network,
    /// Host integers.
    Host,
}

impl TupleOrder {
    fn addr(self, v: u32) -> Ipv4Addr {
        match self {
            TupleOrder::Network => Ipv4Addr::from(v.to_le_bytes()),
            TupleOrder::Host => Ipv4Addr::from(v),
        }
    }

    fn port(self, v: u32) -> u16 {
        match self {
            TupleOrder::Network => u16::from_be_bytes([v as u8, (v >> 8) as u8]),
            TupleOrder::Host => v as u16,
        }
    }

    fn tuple(self, c: &CreateMsg) -> FlowTuple {
        FlowTuple {
            local_addr: self.addr(c.src_ip),
            local_port: self.port(c.src_port),
            remote_addr: self.addr(c.dst_ip),
            remote_port: self.port(c.dst_port),
        }
    }
}

/// Settings of the runtime that are not algorithms, programs or policy.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Algorithm for flows that neither name a registered one nor match a rule.
    pub default_algorithm: String,
    /// Algorithm a flow is handed to when it asks for primary priority and its own algorithm
    /// cannot do that (a rule's `primary` overrides it).
    pub primary_algorithm: String,
    pub tuple_order: TupleOrder,
    /// Serve a Create from a datapath that never said Ready. Only where every sender is the
    /// datapath itself (netlink: ccp-kernel, which says Ready once, at load); on a unix
    /// socket any local process could otherwise make itself a datapath mid-stream.
    pub accept_unannounced: bool,
}

struct FlowEntry {
    algorithm: &'static str,
    /// The algorithm first chosen for the flow; a flow handed to a primary goes back to it
    /// when its application asks for scavenger priority again.
    origin: &'static str,
    /// Hand-off target for a switch to primary.
    primary: String,
    /// The policy named `primary`: a switch to primary hands off even where the algorithm
    /// could switch in place.
    hand_off_to_primary: bool,
    flow: Box<dyn CcpFlow>,
    init_cwnd: Bytes,
    mss: Bytes,
}

#[derive(Default)]
struct DatapathState {
    flows: HashMap<u32, FlowEntry>,
    /// Priorities that arrived before their flow's Create.
    pending_priority: HashMap<u32, Priority>,
}

/// The agent's state: datapaths, their flows, and what is needed to start new ones.
pub struct Runtime<T: Transport> {
    transport: Rc<T>,
    programs: Rc<ProgramSet>,
    algorithms: Algorithms<DpHandle<T>>,
    policy: Policy,
    config: RuntimeConfig,
    datapaths: HashMap<T::Addr, DatapathState>,
    counters: Counters,
    trace: Option<FlowTrace>,
}

impl<T: Transport> std::fmt::Debug for Runtime<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("datapaths", &self.datapaths.len())
            .field("counters", &self.counters)
            .finish()
    }
}

impl<T: Unreachable> Runtime<T> {
    pub fn new(
        transport: Rc<T>,
        programs: Rc<ProgramSet>,
        algorithms: Algorithms<DpHandle<T>>,
        policy: Policy,
        config: RuntimeConfig,
    ) -> Self {
        Runtime {
            transport,
            programs,
            algorithms,
            policy,
            config,
            datapaths: HashMap::new(),
            counters: Counters::default(),
            trace: None,
        }
    }

    pub fn with_trace(mut self, trace: FlowTrace) -> Self {
        self.trace = Some(trace);
        self
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Number of live flows over all datapaths.
    pub fn flow_count(&self) -> usize {
        self.datapaths.values().map(|d| d.flows.len()).sum()
    }

    pub fn flush_trace(&mut self) {
        if let Some(t) = self.trace.as_mut() {
            if let Err(e) = t.flush() {
                warn!(error = %e, "cannot write the flow trace");
            }
        }
    }

    /// Handles one received datagram from `from`. Never panics on its content.
    pub fn handle_datagram(&mut self, datagram: &[u8], from: &T::Addr) {
        self.counters.datagrams += 1;
        for frame in Frames::new(datagram) {
            match frame.and_then(ccp_wire::decode) {
                Ok(msg) => self.handle_message(msg, from),
                Err(e) => self.bad_message(&e, from),
            }
        }
        // Everything this datagram caused leaves now, in as few datagrams as the
        // datapaths read.
        self.transport.flush();
        for lost in self.transport.take_unreachable() {
            self.counters.send_errors += 1;
            if let Some(dp) = self.datapaths.remove(&lost) {
                self.counters.datapaths_lost += 1;
                warn!(datapath = ?lost, flows = dp.flows.len(), "datapath unreachable; forgetting its flows");
                for (_, mut entry) in dp.flows {
                    entry.flow.close();
                }
            }
        }
    }

    /// Closes every flow (agent shutdown).
    pub fn close_all(&mut self) {
        for (_, dp) in self.datapaths.drain() {
            for (_, mut entry) in dp.flows {
                entry.flow.close();
            }
        }
        self.flush_trace();
    }

    /// A message from an address that never said Ready: rejected, counted, and logged at
    /// the 1st, 2nd, 4th, 8th, ... such message, so a flood cannot flood the log.
    fn unannounced(&mut self, from: &T::Addr, what: &'static str) {
        self.counters.unknown_datapath += 1;
        let n = self.counters.unknown_datapath;
        if n.is_power_of_two() {
            warn!(datapath = ?from, message = what, rejected = n, "message from a datapath that never said Ready, ignored");
        }
    }

    fn bad_message(&mut self, e: &DecodeError, from: &T::Addr) {
        let reason = match e {
            DecodeError::ShortHeader { .. } => "short_header",
            DecodeError::LengthMismatch { .. } | DecodeError::LengthBelowHeader { .. } => {
                "bad_length"
            }
            DecodeError::WrongSize { .. } | DecodeError::FieldCount { .. } => "bad_size",
            DecodeError::TooManyFields(_) => "too_many_fields",
            DecodeError::AgentOnlyType(_) => "agent_only_type",
            DecodeError::UnknownType(_) => "unknown_type",
            DecodeError::NameNotUtf8 => "name_not_utf8",
            DecodeError::UnknownPriority(_) => "unknown_priority",
        };
        self.counters.bad(reason);
        warn!(datapath = ?from, error = %e, "ignoring malformed message");
    }

    fn handle_message(&mut self, msg: DatapathMsg, from: &T::Addr) {
        match msg {
            DatapathMsg::Ready { datapath_id } => {
                self.counters.ready += 1;
                info!(datapath = ?from, id = datapath_id, "datapath ready");
                self.reset_datapath(from);
            }
            DatapathMsg::Create(c) => self.on_create(c, from),
            DatapathMsg::Measure(m) if m.is_close() => self.on_close(m.sid, from),
            DatapathMsg::Measure(m) => self.on_report(m, from),
            DatapathMsg::Priority(p) => self.on_priority(p, from),
            DatapathMsg::Sync { sid, token } => {
                self.counters.syncs += 1;
                if sid == ccp_wire::SYNC_SID_READS_BATCHES {
                    self.transport.batch_to(from);
                }
                // A datapath this agent has no Ready from (the agent restarted under it)
                // learns so from the echo, and sends Ready and its Creates again.
                let sid = if self.datapaths.contains_key(from) || self.config.accept_unannounced {
                    sid
                } else {
                    self.unannounced(from, "sync");
                    ccp_wire::SYNC_SID_UNKNOWN_DATAPATH
                };
                // Ignore the result: an unreachable sender is noticed through the transport.
                let _ = self
                    .transport
                    .send(&ccp_wire::encode_sync(sid, token), from);
            }
        }
    }

    /// A (re)starting datapath: its old flows are gone, and it needs every program.
    fn reset_datapath(&mut self, from: &T::Addr) {
        if let Some(old) = self
            .datapaths
            .insert(from.clone(), DatapathState::default())
        {
            for (_, mut entry) in old.flows {
                entry.flow.close();
            }
        }
        for p in self.programs.iter() {
            if self.transport.send(&p.install, from).is_err() {
                return;
            }
            self.counters.installs_sent += 1;
        }
    }

    fn on_create(&mut self, c: CreateMsg, from: &T::Addr) {
        self.counters.creates += 1;
        if !self.datapaths.contains_key(from) {
            if !self.config.accept_unannounced {
                self.unannounced(from, "create");
                return;
            }
            // ccp-kernel loaded before this agent: it never sent us Ready.
            info!(datapath = ?from, "create from unknown datapath, installing programs");
            self.reset_datapath(from);
        }
        let tuple = self.config.tuple_order.tuple(&c);
        let requested = c.cong_alg.as_deref().filter(|name| *name != "reno");
        let by_name = requested.and_then(|n| self.algorithms.index_of(n));
        if let (Some(name), None) = (requested, by_name) {
            self.counters.unknown_algorithm += 1;
            info!(
                sid = c.sid,
                requested = name,
                "requested algorithm is not registered"
            );
        }
        let rule = self.policy.choose(&tuple);
        let (index, why) = match (by_name, &rule) {
            (Some(i), _) => (Some(i), "requested"),
            (None, Some(r)) => (self.algorithms.index_of(&r.algorithm), "policy"),
            (None, None) => (
                self.algorithms.index_of(&self.config.default_algorithm),
                "default",
            ),
        };
        let Some(index) = index else {
            warn!(sid = c.sid, "no algorithm available for flow");
            return;
        };
        let alg = self.algorithms.get(index);
        let mss = Bytes(u64::from(c.mss.max(1)));
        // libccp datapaths send bytes; some send packets (docs/datapaths.md §1.3).
        let init_cwnd = match u64::from(c.init_cwnd) {
            0 => Bytes(10 * mss.0),
            w if w < mss.0 => Bytes(w * mss.0),
            w => Bytes(w),
        };
        let pending = self
            .datapaths
            .get_mut(from)
            .and_then(|d| d.pending_priority.remove(&c.sid));
        let rule_priority = rule
            .as_ref()
            .filter(|_| why != "requested")
            .and_then(|r| r.priority);
        let priority = pending
            .or(rule_priority)
            .unwrap_or_else(|| alg.default_priority());
        let named_primary = rule.as_ref().and_then(|r| r.primary.clone());
        let hand_off_to_primary = named_primary.is_some();
        let primary = named_primary.unwrap_or_else(|| self.config.primary_algorithm.clone());
        info!(
            datapath = ?from, sid = c.sid, algorithm = alg.name(), selected_by = why,
            priority = priority.name(), local = %format!("{}:{}", tuple.local_addr, tuple.local_port),
            remote = %format!("{}:{}", tuple.remote_addr, tuple.remote_port), "new flow"
        );
        let start = FlowStart {
            sid: c.sid,
            init_cwnd,
            mss,
            priority,
            carried: None,
            hand_off_to_primary,
        };
        // The 4-tuple in the trace lets a reader pick one experiment's flows out of a trace
        // shared by many.
        let addresses = [
            (
                "local",
                serde_json::json!(format!("{}:{}", tuple.local_addr, tuple.local_port)),
            ),
            (
                "remote",
                serde_json::json!(format!("{}:{}", tuple.remote_addr, tuple.remote_port)),
            ),
        ];
        self.start_flow(from, index, start, primary, None, &addresses);
    }

    /// Starts `algorithm` for a flow, replacing whatever ran under that sid; `trace_extra`
    /// goes into the flow trace's create line.
    fn start_flow(
        &mut self,
        from: &T::Addr,
        index: usize,
        start: FlowStart,
        primary: String,
        origin: Option<&'static str>,
        trace_extra: &[(&str, serde_json::Value)],
    ) -> bool {
        let alg = self.algorithms.get(index);
        let name = alg.name();
        let handle = DpHandle::new(
            start.sid,
            from.clone(),
            self.transport.clone(),
            self.programs.clone(),
        );
        let sid = start.sid;
        let (init_cwnd, mss) = (start.init_cwnd, start.mss);
        let hand_off_to_primary = start.hand_off_to_primary;
        let flow = match alg.new_flow(handle, start) {
            Ok(f) => f,
            Err(e) => {
                self.counters.flow_errors += 1;
                warn!(sid, algorithm = name, error = %e, "algorithm could not start the flow");
                return false;
            }
        };
        let entry = FlowEntry {
            algorithm: name,
            origin: origin.unwrap_or(name),
            primary,
            hand_off_to_primary,
            flow,
            init_cwnd,
            mss,
        };
        self.trace_flow(from, sid, TraceEvent::Create, &entry, trace_extra);
        let dp = self.datapaths.entry(from.clone()).or_default();
        if let Some(mut old) = dp.flows.insert(sid, entry) {
            // libccp reuses a sid at once after a close; a Create on a live sid means the
            // close was lost.
            old.flow.close();
        }
        true
    }

    fn on_report(&mut self, m: MeasureMsg, from: &T::Addr) {
        self.counters.reports += 1;
        let Some(dp) = self.datapaths.get_mut(from) else {
            self.unannounced(from, "report");
            return;
        };
        let Some(entry) = dp.flows.get_mut(&m.sid) else {
            self.counters.unknown_flow += 1;
            debug!(datapath = ?from, sid = m.sid, "report for unknown flow");
            return;
        };
        let report = RawReport {
            program_uid: m.program_uid,
            fields: &m.fields,
        };
        match entry.flow.on_report(&report) {
            Ok(()) => {}
            Err(algs_core::ccp::FlowError::Report(ReportError::Stale { .. })) => {
                self.counters.stale_reports += 1;
                return;
            }
            Err(e) => {
                self.counters.flow_errors += 1;
                warn!(sid = m.sid, algorithm = entry.algorithm, error = %e, "report not used");
                return;
            }
        }
        if self.trace.is_some() {
            self.trace_sid(from, m.sid, TraceEvent::Report, &[]);
        }
    }

    fn on_close(&mut self, sid: u32, from: &T::Addr) {
        self.counters.closes += 1;
        let Some(dp) = self.datapaths.get_mut(from) else {
            self.unannounced(from, "close");
            return;
        };
        dp.pending_priority.remove(&sid);
        match dp.flows.remove(&sid) {
            Some(mut entry) => {
                entry.flow.close();
                debug!(sid, algorithm = entry.algorithm, "flow closed");
                self.trace_flow(from, sid, TraceEvent::Close, &entry, &[]);
            }
            None => self.counters.unknown_flow += 1,
        }
    }

    fn on_priority(&mut self, p: PriorityMsg, from: &T::Addr) {
        self.counters.priorities += 1;
        let priority = match p.class {
            PriorityClass::Primary => Priority::Primary,
            PriorityClass::Scavenger => Priority::Scavenger,
            PriorityClass::Hybrid => Priority::Hybrid {
                threshold: (p.hybrid_threshold_bytes_per_sec > 0)
                    .then_some(BytesPerSec(p.hybrid_threshold_bytes_per_sec as f64)),
            },
        };
        let Some(dp) = self.datapaths.get_mut(from) else {
            self.unannounced(from, "priority");
            return;
        };
        let Some(entry) = dp.flows.get_mut(&p.sid) else {
            // It may overtake its Create; keep it for the flow (a close drops it).
            dp.pending_priority.insert(p.sid, priority);
            self.counters.unknown_flow += 1;
            debug!(sid = p.sid, "priority before create; kept for the flow");
            return;
        };
        info!(
            sid = p.sid,
            algorithm = entry.algorithm,
            priority = priority.name(),
            "priority change"
        );
        match entry.flow.on_priority(priority) {
            Ok(PriorityOutcome::Applied) => {
                self.trace_sid(from, p.sid, TraceEvent::Priority, &[]);
            }
            Ok(PriorityOutcome::HandOff(state)) => self.hand_off(from, p.sid, priority, state),
            Err(e) => {
                self.counters.flow_errors += 1;
                warn!(sid = p.sid, error = %e, "priority change failed");
            }
        }
    }

    /// The flow's algorithm cannot run at `priority`: close it and start the target from the
    /// carried state (docs/architecture.md §8).
    fn hand_off(&mut self, from: &T::Addr, sid: u32, priority: Priority, state: CarriedState) {
        let Some(dp) = self.datapaths.get_mut(from) else {
            return;
        };
        let Some(entry) = dp.flows.get(&sid) else {
            return;
        };
        let target = match priority {
            Priority::Primary => entry.primary.clone(),
            Priority::Scavenger | Priority::Hybrid { .. } => entry.origin.to_owned(),
        };
        let Some(index) = self
            .algorithms
            .index_of(&target)
            .filter(|&i| self.algorithms.get(i).name() != entry.algorithm)
        else {
            let algorithm = entry.algorithm;
            warn!(
                sid,
                algorithm,
                priority = priority.name(),
                "no algorithm to hand the flow to; it stays"
            );
            let requested = [("requested", json!(priority.name())), ("kept", json!(true))];
            self.trace_sid(from, sid, TraceEvent::Priority, &requested);
            return;
        };
        let Some(mut old) = dp.flows.remove(&sid) else {
            return;
        };
        old.flow.close();
        let from_alg = old.algorithm;
        let start = FlowStart {
            sid,
            init_cwnd: old.init_cwnd,
            mss: old.mss,
            priority,
            carried: Some(state),
            hand_off_to_primary: old.hand_off_to_primary,
        };
        if self.start_flow(
            from,
            index,
            start,
            old.primary.clone(),
            Some(old.origin),
            &[],
        ) {
            self.counters.handoffs += 1;
            let to = self.algorithms.get(index).name();
            info!(
                sid,
                from = from_alg,
                to,
                cwnd = state.cwnd.0,
                "flow handed over"
            );
            self.trace_sid(
                from,
                sid,
                TraceEvent::HandOff,
                &[("from", json!(from_alg)), ("carried", json!(state))],
            );
        }
    }

    fn trace_sid(
        &mut self,
        from: &T::Addr,
        sid: u32,
        event: TraceEvent,
        extra: &[(&str, serde_json::Value)],
    ) {
        if self.trace.is_none() {
            return;
        }
        let Some(entry) = self.datapaths.get(from).and_then(|d| d.flows.get(&sid)) else {
            return;
        };
        let metrics = entry.flow.metrics();
        let algorithm = entry.algorithm;
        self.write_trace(from, sid, event, algorithm, &metrics, extra);
    }

    fn trace_flow(
        &mut self,
        from: &T::Addr,
        sid: u32,
        event: TraceEvent,
        entry: &FlowEntry,
        extra: &[(&str, serde_json::Value)],
    ) {
        if self.trace.is_some() {
            let metrics = entry.flow.metrics();
            self.write_trace(from, sid, event, entry.algorithm, &metrics, extra);
        }
    }

    fn write_trace(
        &mut self,
        from: &T::Addr,
        sid: u32,
        event: TraceEvent,
        algorithm: &str,
        metrics: &algs_core::metrics::FlowMetrics,
        extra: &[(&str, serde_json::Value)],
    ) {
        let Some(trace) = self.trace.as_mut() else {
            return;
        };
        if let Err(e) = trace.record(
            format!("{from:?}").trim_matches('"'),
            sid,
            event,
            algorithm,
            metrics,
            extra,
        ) {
            warn!(error = %e, "cannot write the flow trace; tracing stops");
            self.trace = None;
        }
    }
}

#[cfg(test)]
mod tests;
