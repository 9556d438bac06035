//! The daemon's loop: ring buffer → libccp per ACK → agent; agent → libccp → control slots.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use algs_core::AckPrimitives;
use ccp_host::{AfterFlush, Decided, Flushed, Incoming, Liveness, Loss, Received, Timing};
use ccp_wire::{PriorityClass, PriorityMsg, msg_type};
use libbpf_rs::RingBufferBuilder;

use crate::ack_trace::{self, AckTrace};
use crate::bpf::Loaded;
use crate::prims::{self, FlowCounters};
use crate::shard::Shard;
use crate::shared::{
    CCP_CTL_SLOTS, ccp_event, ccp_event_kind_CCP_EV_ACK, ccp_event_kind_CCP_EV_CLOSE,
    ccp_event_kind_CCP_EV_CREATE, ccp_event_kind_CCP_EV_PRIORITY, ccp_event_kind_CCP_EV_TIMEOUT,
};

/// How long the loop sleeps between ring-buffer drains (docs/datapaths.md §7.3: 1 ms batching).
/// Also how soon messages held back by a full agent queue are retried.
const POLL_TIMEOUT_MS: i32 = 1;
/// SYNC probes every 100 ms; an agent that echoes them is lost after 500 ms of silence.
const AGENT_TIMING: Timing = Timing {
    probe_interval_ns: 100_000_000,
    silence_ns: 500_000_000,
};
/// An ACK the loop reads this long after the kernel wrote it is late: its measurements, and
/// the decisions they lead to, reach the flow that much later than the 1 ms batching allows.
/// On the 2-core VM the slowest ACK of one 180 Mbit/s run alone waited 4 ms, of three such
/// runs at once 459 ms.
const LATE_ACK_NS: u64 = 10_000_000;
/// Loop turns (1 ms apart) that the closes sent at shutdown may wait for the agent to read.
const SHUTDOWN_FLUSH_TURNS: usize = 100;

/// Daemon settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// The agent's socket, /tmp/ccp/<name>.
    pub agent: PathBuf,
    /// Shard i binds `<sock_prefix>-<i>`.
    pub sock_prefix: PathBuf,
    /// Connections per libccp datapath (at most 1024).
    pub flows_per_shard: usize,
    /// The control socket for `status` and `set-priority`.
    pub control: PathBuf,
    /// Group that shares the shard sockets with the agent (mode 0660), if any.
    pub socket_group: Option<u32>,
}

struct Flow {
    shard: usize,
    /// libccp's sid, known once its Create went out: libccp holds back the Create of a
    /// connection that reuses a slot within 100 ms (docs/datapaths.md §5.4) and sends
    /// it from a later invoke.
    sid: Option<u32>,
    /// A priority that arrived before the sid was known.
    pending_prio: Option<crate::shared::ccp_priority_opt>,
    conn: libccp::Connection<'static, Decided>,
    counters: FlowCounters,
    last: AckPrimitives,
    src: (Ipv4Addr, u16),
    dst: (Ipv4Addr, u16),
    /// Last decision written to the control slot (cwnd bytes, rate bytes/s).
    cwnd_bytes: u32,
    rate_bytes_per_sec: u32,
    acks: u64,
}

/// Counters shown by `status`.
#[derive(Debug, Default)]
struct Stats {
    events: u64,
    acks: u64,
    /// ACKs the BPF fallback controlled (no fresh decision for the flow).
    fallback_acks: u64,
    /// Of those, ACKs of flows the agent had decided for before: control lost, not the
    /// fallback a new flow runs until the agent's first answer.
    fallback_acks_decided: u64,
    /// ACKs read over `LATE_ACK_NS` after the kernel wrote them: the daemon was not
    /// scheduled in time, so the flows ran on stale decisions.
    late_acks: u64,
    /// The longest such wait, ns.
    max_ack_age_ns: u64,
    invoke_errors: u64,
    start_errors: u64,
    unknown_flow_events: u64,
    resyncs: u64,
    /// Datagrams on a shard socket not from the agent (its address and its user), dropped unread.
    rejected: u64,
    /// Control commands refused for the caller's credentials.
    rejected_commands: u64,
}

/// Whether the control socket's peer is root or the daemon's own user (`SO_PEERCRED`).
fn caller_is_privileged(stream: &UnixStream) -> bool {
    let mut cred = libc::ucred {
        pid: 0,
        uid: u32::MAX,
        gid: u32::MAX,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` is a writable ucred of the length passed.
    let ok = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            std::ptr::from_mut(&mut cred).cast(),
            &mut len,
        )
    } == 0;
    // SAFETY: geteuid cannot fail.
    ok && (cred.uid == 0 || cred.uid == unsafe { libc::geteuid() })
}

/// The running daemon.
pub struct Daemon {
    cfg: Config,
    bpf: Loaded,
    shards: Vec<Shard>,
    flows: HashMap<u32, Flow>,
    stats: Stats,
    agent: Liveness,
    control: UnixListener,
    ack_trace: Option<AckTrace>,
}

impl std::fmt::Debug for Daemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Daemon")
            .field("flows", &self.flows.len())
            .field("shards", &self.shards.len())
            .finish()
    }
}

/// CLOCK_MONOTONIC in ns: the clock of `bpf_ktime_get_ns`.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write into.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// Copy one ring-buffer record out, if it has the right size.
fn parse_event(data: &[u8]) -> Option<ccp_event> {
    if data.len() < std::mem::size_of::<ccp_event>() {
        return None;
    }
    // SAFETY: `data` holds at least size_of::<ccp_event>() bytes; ccp_event is plain
    // integers, valid for any bit pattern; read_unaligned does not need alignment.
    Some(unsafe { std::ptr::read_unaligned(data.as_ptr().cast::<ccp_event>()) })
}

fn priority_class(code: u32) -> Option<PriorityClass> {
    PriorityClass::from_code(code)
}

impl Daemon {
    pub fn new(cfg: Config, bpf: Loaded) -> std::io::Result<Self> {
        let _ = std::fs::remove_file(&cfg.control);
        let control = UnixListener::bind(&cfg.control)?;
        control.set_nonblocking(true)?;
        // Anyone may ask for `status`; `answer` checks who asks for more.
        ccp_rundir::set_owner_mode(&cfg.control, 0o666, None).map_err(std::io::Error::other)?;
        Ok(Daemon {
            cfg,
            bpf,
            shards: Vec::new(),
            flows: HashMap::new(),
            stats: Stats::default(),
            agent: Liveness::new(monotonic_ns(), AGENT_TIMING),
            control,
            ack_trace: None,
        })
    }

    /// Writes every ACK record to `trace` as well.
    pub fn with_ack_trace(mut self, trace: AckTrace) -> Self {
        self.ack_trace = Some(trace);
        self
    }

    /// One line of the ACK trace, if there is one, for a flow the daemon knows. Without a
    /// trace it costs the ACK path nothing beyond the check.
    fn trace_ack(&mut self, ev: &ccp_event, event: ack_trace::Event) {
        let Some(t) = self.ack_trace.as_mut() else {
            return;
        };
        let Some(f) = self.flows.get(&ev.flow_id) else {
            return;
        };
        let ctl = ack_trace::Control {
            cwnd_bytes: f.cwnd_bytes,
            rate_bytes_per_sec: f.rate_bytes_per_sec,
        };
        t.record(ev, event, (f.src.1, f.dst.1), ctl);
    }

    fn shard_for_new_flow(&mut self) -> Option<usize> {
        if let Some(i) = self
            .shards
            .iter()
            .position(|s| s.flows < self.cfg.flows_per_shard)
        {
            return Some(i);
        }
        let id = self.shards.len();
        let path = PathBuf::from(format!("{}-{id}", self.cfg.sock_prefix.display()));
        match Shard::new(id as u32, &path, &self.cfg.agent, self.cfg.socket_group) {
            Ok(s) => {
                if !self.agent.alive() {
                    s.mark_lost();
                }
                self.shards.push(s);
                Some(id)
            }
            Err(e) => {
                eprintln!("ccp-ebpf: cannot add datapath shard {id}: {e}");
                None
            }
        }
    }

    fn ctl_write(&mut self, flow_id: u32, cwnd_bytes: u32, rate: u32) {
        let Some(bss) = self.bpf.skel.maps.bss_data.as_deref_mut() else {
            return;
        };
        let slot = &mut bss.ctl[flow_id as usize % CCP_CTL_SLOTS as usize];
        let cw = u64::from(flow_id) | (u64::from(cwnd_bytes) << 32);
        let rw = u64::from(flow_id) | (u64::from(rate) << 32);
        // SAFETY: both are valid, aligned u64s inside the mmapped .bss; volatile because
        // the kernel reads them concurrently (each 8-byte store is atomic).
        unsafe {
            std::ptr::write_volatile(&mut slot.rate_word, rw);
            std::ptr::write_volatile(&mut slot.cwnd_word, cw);
        }
    }

    fn set_heartbeat(&mut self, now_ns: u64) {
        if let Some(bss) = self.bpf.skel.maps.bss_data.as_deref_mut() {
            // SAFETY: an aligned u64 in the mmapped .bss, read concurrently by the kernel.
            unsafe { std::ptr::write_volatile(&mut bss.daemon_heartbeat_ns, now_ns) };
        }
    }

    fn events_dropped(&self) -> u64 {
        self.bpf
            .skel
            .maps
            .bss_data
            .as_deref()
            .map(|b| {
                // SAFETY: an aligned u64 in the mmapped .bss, written by the kernel.
                unsafe { std::ptr::read_volatile(&b.events_dropped) }
            })
            .unwrap_or(0)
    }

    /// Handles one ring-buffer record, read at `read_ns`.
    fn on_event(&mut self, ev: &ccp_event, read_ns: u64) {
        self.stats.events += 1;
        match ev.kind {
            k if k == ccp_event_kind_CCP_EV_CREATE => {
                self.on_create(ev);
                self.trace_ack(ev, ack_trace::Event::Create);
            }
            k if k == ccp_event_kind_CCP_EV_ACK => {
                self.stats.acks += 1;
                self.stats.fallback_acks += u64::from(ev.in_fallback);
                let age = read_ns.saturating_sub(ev.now_ns);
                self.stats.late_acks += u64::from(age > LATE_ACK_NS);
                self.stats.max_ack_age_ns = self.stats.max_ack_age_ns.max(age);
                self.trace_ack(ev, ack_trace::Event::Ack);
                let Some(f) = self.flows.get_mut(&ev.flow_id) else {
                    self.stats.unknown_flow_events += 1;
                    return;
                };
                if f.cwnd_bytes != 0 {
                    self.stats.fallback_acks_decided += u64::from(ev.in_fallback);
                }
                f.acks += 1;
                f.last = prims::from_ack(ev, &mut f.counters, f.cwnd_bytes);
                let p = f.last;
                self.invoke(ev.flow_id, p);
            }
            k if k == ccp_event_kind_CCP_EV_TIMEOUT => {
                self.trace_ack(ev, ack_trace::Event::Timeout);
                let Some(f) = self.flows.get(&ev.flow_id) else {
                    return;
                };
                let p = prims::on_timeout(&f.last);
                self.invoke(ev.flow_id, p);
            }
            k if k == ccp_event_kind_CCP_EV_CLOSE => {
                if let Some(f) = self.flows.remove(&ev.flow_id) {
                    self.shards[f.shard].flows -= 1;
                    // Dropping the connection sends libccp's close to the agent.
                    drop(f);
                    self.ctl_write(ev.flow_id, 0, 0);
                }
            }
            k if k == ccp_event_kind_CCP_EV_PRIORITY => {
                if let Some(f) = self.flows.get_mut(&ev.flow_id) {
                    match f.sid {
                        Some(sid) => {
                            let shard = f.shard;
                            self.send_priority(shard, sid, &ev.prio);
                        }
                        None => f.pending_prio = Some(ev.prio),
                    }
                }
            }
            _ => {}
        }
    }

    fn send_priority(&self, shard: usize, sid: u32, p: &crate::shared::ccp_priority_opt) {
        let Some(class) = priority_class(p.class_code) else {
            return;
        };
        let msg = ccp_wire::encode_priority(&PriorityMsg {
            sid,
            class,
            flags: p.flags,
            hybrid_threshold_bytes_per_sec: p.hybrid_threshold_bytes_per_sec,
        });
        self.shards[shard].send(&msg);
    }

    fn on_create(&mut self, ev: &ccp_event) {
        let Some(shard) = self.shard_for_new_flow() else {
            self.stats.start_errors += 1;
            return;
        };
        let mss = ev.mss_bytes.max(1);
        // Like ccp-kernel: init_cwnd in bytes, addresses and ports in network byte order
        // (docs/datapaths.md §1.3), so the agent treats both datapaths alike.
        let info = libccp::FlowInfo::default()
            .with_init_cwnd(ev.snd_cwnd_pkts.saturating_mul(mss))
            .with_mss(mss)
            .with_four_tuple(
                ev.src_ip4.to_be(),
                u32::from(ev.src_port.to_be()),
                ev.dst_ip4.to_be(),
                u32::from(ev.dst_port.to_be()),
            );
        let host = &self.shards[shard].host;
        let conn = match host.start(Decided::default(), info) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("ccp-ebpf: libccp refused flow {}: {e:?}", ev.flow_id);
                self.stats.start_errors += 1;
                return;
            }
        };
        let sid = host.take_create_sid();
        self.shards[shard].flows += 1;
        self.flows.insert(
            ev.flow_id,
            Flow {
                shard,
                sid,
                pending_prio: (ev.prio_set != 0).then_some(ev.prio),
                conn,
                counters: FlowCounters::default(),
                last: AckPrimitives::default(),
                src: (Ipv4Addr::from(ev.src_ip4), ev.src_port),
                dst: (Ipv4Addr::from(ev.dst_ip4), ev.dst_port),
                cwnd_bytes: 0,
                rate_bytes_per_sec: 0,
                acks: 0,
            },
        );
        self.flush_pending_priority(ev.flow_id);
    }

    /// Send a priority held back until the flow's sid was known.
    fn flush_pending_priority(&mut self, flow_id: u32) {
        let Some(f) = self.flows.get_mut(&flow_id) else {
            return;
        };
        if let (Some(sid), Some(p)) = (f.sid, f.pending_prio) {
            f.pending_prio = None;
            let shard = f.shard;
            self.send_priority(shard, sid, &p);
        }
    }

    fn invoke(&mut self, flow_id: u32, p: AckPrimitives) {
        let Some(f) = self.flows.get_mut(&flow_id) else {
            return;
        };
        f.conn.load_primitives(ccp_host::primitives::to_libccp(p));
        if f.conn.invoke().is_err() {
            // No program yet (agent down or Create lost): the BPF fallback runs the flow.
            self.stats.invoke_errors += 1;
        }
        if f.sid.is_none() {
            // A held-back Create goes out from invoke.
            f.sid = self.shards[f.shard].host.take_create_sid();
            if f.sid.is_some() {
                self.flush_pending_priority(flow_id);
            }
        }
        self.invoke_decisions(flow_id);
    }

    /// Write the decisions libccp made during the last invoke.
    fn invoke_decisions(&mut self, flow_id: u32) {
        let Some(f) = self.flows.get_mut(&flow_id) else {
            return;
        };
        let cwnd = f.conn.cwnd_bytes.take();
        let rate = f.conn.rate_bytes_per_sec.take();
        if cwnd.is_none() && rate.is_none() {
            return;
        }
        if let Some(c) = cwnd {
            f.cwnd_bytes = c;
        }
        if let Some(r) = rate {
            f.rate_bytes_per_sec = r;
        }
        let (c, r) = (f.cwnd_bytes, f.rate_bytes_per_sec);
        // A dead agent's program keeps echoing the window: only a live agent controls.
        if self.agent.alive() {
            self.ctl_write(flow_id, c, r);
        }
    }

    fn agent_lost(&mut self, why: Loss) {
        if !self.agent.alive() {
            return;
        }
        self.agent.lose(why);
        for s in &self.shards {
            s.mark_lost();
        }
        // Old decisions must not come back when the agent does: every flow runs the
        // fallback until the new agent decides.
        let ids: Vec<u32> = self.flows.keys().copied().collect();
        for id in ids {
            self.ctl_write(id, 0, 0);
        }
        eprintln!("ccp-ebpf: agent lost ({why:?}); flows run the BPF fallback");
    }

    /// The agent is back: Ready and every live flow's Create go out again on each shard
    /// that missed something.
    fn agent_found(&mut self) {
        eprintln!("ccp-ebpf: agent answered");
        for s in &self.shards {
            if s.agent_lost() {
                self.stats.resyncs += 1;
                s.resync();
            }
        }
    }

    fn drain_agent(&mut self, now_ns: u64) {
        let mut buf = vec![0u8; 64 * 1024];
        for i in 0..self.shards.len() {
            while let Some(got) = self.shards[i].recv(&mut buf) {
                let n = match got {
                    Received::Agent(n) => n,
                    Received::Rejected(why) => {
                        self.stats.rejected += 1;
                        // Logged at 1, 2, 4, 8, ...: a flood cannot flood the log.
                        if self.stats.rejected.is_power_of_two() {
                            eprintln!(
                                "ccp-ebpf: {} message(s) rejected so far; the latest {why} ({})",
                                self.stats.rejected,
                                self.cfg.agent.display()
                            );
                        }
                        continue;
                    }
                };
                let (mut heard, mut sync_echo, mut refused) = (false, false, 0);
                let mut forgot = false;
                let agent = &self.agent;
                let mut changed = Vec::new();
                self.shards[i].host.receive(&mut buf[..n], |m| match m {
                    Incoming::Sync { sid, token } => {
                        (heard, sync_echo) = (true, true);
                        forgot |= agent.forgot_by(sid, token);
                    }
                    Incoming::Delivered(h) | Incoming::Refused(h, _) => {
                        heard = true;
                        refused += u64::from(matches!(m, Incoming::Refused(..)));
                        if h.typ == msg_type::CHANGE_PROG {
                            changed.push(h.sid);
                        }
                    }
                    Incoming::Malformed(_) => {}
                });
                self.stats.invoke_errors += refused;
                for sid in changed {
                    self.program_changed(i, sid);
                }
                if forgot {
                    // A restarted agent knows none of the flows: their old decisions go,
                    // and Ready and the Creates go out again at once (below).
                    self.agent_lost(Loss::Forgot);
                }
                // Any message is a sign of life, not only a SYNC echo (a stock agent never
                // sends one).
                if heard && self.agent.heard(now_ns, sync_echo) {
                    self.agent_found();
                }
            }
        }
    }

    /// A new program for a flow is a new controller (the agent handed the flow to another
    /// algorithm): the old one's pacing rate goes, and the kernel paces from the window
    /// until the new program sets a rate. libccp only calls `set_rate_abs` for a non-zero
    /// `Rate`, so a window-based successor would otherwise keep its predecessor's rate.
    fn program_changed(&mut self, shard: usize, sid: u32) {
        if let Some(f) = self
            .flows
            .values_mut()
            .find(|f| f.shard == shard && f.sid == Some(sid))
        {
            f.rate_bytes_per_sec = 0;
        }
    }

    fn probe(&mut self, now_ns: u64) {
        if !self.agent.probe_due(now_ns) {
            return;
        }
        if let Some(t) = self.ack_trace.as_mut() {
            t.flush();
        }
        if let Some(token) = self.agent.probe(now_ns) {
            // The sid tells an agent that this datapath reads batches (docs/wire.md).
            let msg = ccp_wire::encode_sync(ccp_wire::SYNC_SID_READS_BATCHES, token);
            for s in &self.shards {
                s.send(&msg);
            }
        }
        if self.agent.silent(now_ns) {
            self.agent_lost(Loss::Silence);
        }
    }

    /// Send what every shard has waiting; batched for an agent that echoes SYNC (ours
    /// reads several messages per datagram, a stock portus agent only the first).
    fn flush(&mut self, now_ns: u64) {
        let batch = self.agent.echoes_sync();
        // Every shard flushes; together they are lost if any send failed, emptied only if
        // every queue is.
        let outcome = self
            .shards
            .iter()
            .map(|s| s.flush(now_ns, batch))
            .fold(Flushed::All, Ord::max);
        match self.agent.flushed(now_ns, outcome) {
            AfterFlush::Lost => self.agent_lost(Loss::SendFailed),
            AfterFlush::Found => self.agent_found(),
            AfterFlush::Unchanged => {}
        }
    }

    fn status_text(&self) -> String {
        let mut out = String::new();
        out.push_str(&format!("pid {}\n", std::process::id()));
        out.push_str(&format!(
            "agent {} {}\n",
            self.cfg.agent.display(),
            if self.agent.alive() { "alive" } else { "lost" }
        ));
        out.push_str(&format!("agent_echoes_sync {}\n", self.agent.echoes_sync()));
        out.push_str(&format!(
            "events {} acks {} fallback_acks {} fallback_acks_decided {} late_acks {} max_ack_age_us {} invoke_errors {} start_errors {} unknown_flow_events {} resyncs {} rejected {} rejected_commands {} ring_dropped {}\n",
            self.stats.events,
            self.stats.acks,
            self.stats.fallback_acks,
            self.stats.fallback_acks_decided,
            self.stats.late_acks,
            self.stats.max_ack_age_ns / 1000,
            self.stats.invoke_errors,
            self.stats.start_errors,
            self.stats.unknown_flow_events,
            self.stats.resyncs,
            self.stats.rejected,
            self.stats.rejected_commands,
            self.events_dropped()
        ));
        for (i, s) in self.shards.iter().enumerate() {
            let (waiting, o, send_errors) = s.outbox();
            out.push_str(&format!(
                "shard {i} flows {} creates {} send_errors {} deferred {} coalesced {} waiting {} max_waiting {} messages {} datagrams {}\n",
                s.flows,
                s.host.live_flows(),
                send_errors,
                o.deferred,
                o.merged,
                waiting,
                o.max_waiting,
                o.messages,
                o.datagrams
            ));
        }
        let mut ids: Vec<&u32> = self.flows.keys().collect();
        ids.sort();
        for id in ids {
            let f = &self.flows[id];
            out.push_str(&format!(
                "flow {id} shard {} sid {} {}:{} -> {}:{} acks {} cwnd {} rate {}\n",
                f.shard,
                f.sid.map_or("-".to_string(), |s| s.to_string()),
                f.src.0,
                f.src.1,
                f.dst.0,
                f.dst.1,
                f.acks,
                f.cwnd_bytes,
                f.rate_bytes_per_sec
            ));
        }
        out
    }

    /// `prio SRC_IP:PORT DST_IP:PORT CLASS THRESHOLD` from `set-priority`.
    fn set_priority_cmd(&self, args: &[&str]) -> String {
        let parse_ep = |s: &str| -> Option<(Ipv4Addr, u16)> {
            let (ip, port) = s.rsplit_once(':')?;
            Some((ip.parse().ok()?, port.parse().ok()?))
        };
        let [src, dst, class, thr] = args else {
            return "error usage: prio SRC:PORT DST:PORT CLASS THRESHOLD\n".into();
        };
        let (Some(src), Some(dst), Ok(class), Ok(thr)) = (
            parse_ep(src),
            parse_ep(dst),
            class.parse::<u32>(),
            thr.parse::<u64>(),
        ) else {
            return "error bad arguments\n".into();
        };
        if priority_class(class).is_none() {
            return "error unknown class\n".into();
        }
        let Some(f) = self.flows.values().find(|f| f.src == src && f.dst == dst) else {
            return "error no such flow\n".into();
        };
        let opt = crate::shared::ccp_priority_opt {
            class_code: class,
            flags: 0,
            hybrid_threshold_bytes_per_sec: thr,
        };
        let Some(sid) = f.sid else {
            return "error the flow's Create is still held back by libccp; retry\n".into();
        };
        self.send_priority(f.shard, sid, &opt);
        format!("ok sid {sid}\n")
    }

    fn serve_control(&mut self) {
        while let Ok((stream, _)) = self.control.accept() {
            let _ = self.answer(stream);
        }
    }

    fn answer(&mut self, mut stream: UnixStream) -> std::io::Result<()> {
        stream.set_nonblocking(false)?;
        stream.set_read_timeout(Some(Duration::from_millis(200)))?;
        let mut line = String::new();
        BufReader::new(&stream).read_line(&mut line)?;
        let words: Vec<&str> = line.split_whitespace().collect();
        let reply = match words.split_first() {
            Some((&"status", _)) => self.status_text(),
            // An application changes its own flow's priority with setsockopt; changing
            // any flow by its 4-tuple is for root (or the daemon's own user).
            Some((&"prio", _)) if !caller_is_privileged(&stream) => {
                self.stats.rejected_commands += 1;
                "error permission denied: set-priority needs root\n".into()
            }
            Some((&"prio", rest)) => self.set_priority_cmd(rest),
            _ => "error unknown command\n".into(),
        };
        stream.write_all(reply.as_bytes())
    }

    /// Run until `stop` is set; then unregister everything.
    pub fn run(mut self, stop: Arc<AtomicBool>) -> Result<(), libbpf_rs::Error> {
        // Shard 0 exists from the start so that the agent sees Ready at once.
        self.agent = Liveness::new(monotonic_ns(), AGENT_TIMING);
        let _ = self.shard_for_new_flow();

        let queue: Rc<RefCell<Vec<ccp_event>>> = Rc::new(RefCell::new(Vec::new()));
        let q = queue.clone();
        let mut rbb = RingBufferBuilder::new();
        rbb.add(self.bpf.events(), move |data: &[u8]| {
            if let Some(ev) = parse_event(data) {
                q.borrow_mut().push(ev);
            }
            0
        })?;
        let rb = rbb.build()?;
        let mut batch = Vec::new();

        while !stop.load(Ordering::Relaxed) {
            let mut fds: Vec<libc::pollfd> = Vec::with_capacity(self.shards.len() + 2);
            fds.push(libc::pollfd {
                fd: rb.epoll_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
            fds.push(libc::pollfd {
                fd: self.control.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
            for s in &self.shards {
                fds.push(libc::pollfd {
                    fd: s.fd(),
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
            // SAFETY: `fds` is a valid array of pollfd of the given length.
            unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, POLL_TIMEOUT_MS) };

            let now_ns = monotonic_ns();
            self.drain_agent(now_ns);
            let _ = rb.consume();
            let read_ns = monotonic_ns();
            std::mem::swap(&mut batch, &mut *queue.borrow_mut());
            for ev in batch.drain(..) {
                self.on_event(&ev, read_ns);
            }
            self.probe(now_ns);
            self.serve_control();
            self.flush(now_ns);
            if self.agent.alive() {
                self.set_heartbeat(now_ns);
            }
        }

        drop(rb);
        // Closing every connection tells the agent the flows are gone from CCP; give it a
        // moment to read them.
        self.flows.clear();
        for _ in 0..SHUTDOWN_FLUSH_TURNS {
            self.flush(monotonic_ns());
            if !self.agent.alive() || self.shards.iter().all(|s| s.outbox().0 == 0) {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        for s in &self.shards {
            s.remove_socket();
        }
        let _ = std::fs::remove_file(&self.cfg.control);
        self.bpf.unregister();
        Ok(())
    }
}
