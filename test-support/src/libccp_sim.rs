//! The real libccp in the bottleneck model, in the test's own process: the model's CCP
//! flows run the algorithm's datapath program in a hosted libccp datapath, and the
//! algorithm's [`CcpFlow`]s answer its reports, as in an agent but without one.
//!
//! Per model event ([`ccp_sim::SimEvent`]), at the event's simulated time:
//! * Start: `Connection::start` (libccp sends a Create), then the algorithm's `new_flow`
//!   with a [`LibccpDp`] (its ChangeProg goes straight into libccp);
//! * ACK or timeout: the sample as libccp's per-ACK primitives, `invoke`;
//! * priority change: the flow's `on_priority`;
//! * stop (or the end of the run): the flow's `close`, then the connection is dropped.
//!
//! After each, every report libccp sent goes to its flow (whose UpdateFields go back into
//! libccp), and the window and pacing rate libccp applied go back into the model. The model's
//! invariants are checked after every event.
//!
//! **Simulated time.** libccp reads the time through `clock_gettime(CLOCK_MONOTONIC)`
//! (docs/datapaths.md §5.6); `ccp_host::virtual_clock` answers it with simulated time once
//! the executable defines `clock_gettime` with its body. A test binary that uses this module
//! invokes [`virtual_clock!`](crate::virtual_clock) once for that. It replaces the clock for
//! the whole process (`std::time::Instant` included), so such a test binary runs without the
//! test harness (`harness = false`) and its scenarios one after the other; libccp keeps
//! global state anyway. Each run starts at the next multiple of [`ORIGIN_STEP_NS`] of the
//! virtual clock (which never runs backwards), so a scenario computes the same whether it
//! runs alone or after others.

use crate::libccp_host::{Knobs, LibccpDp, Outbox, install, start_datapath};
use algs_core::Bytes;
use algs_core::ccp::{CcpAlgorithm, CcpFlow, FlowStart, RawReport};
use algs_core::metrics::FlowMetrics;
use ccp_host::Host;
pub use ccp_host::virtual_clock;
use ccp_sim::{FlowId, Scenario, ScenarioError, Sim, SimEvent, Summary};
#[doc(hidden)]
pub use libc;
use portus::lang::Scope;
use std::collections::HashMap;
use std::rc::Rc;

/// Each run's simulated time 0 is the next multiple of this on the virtual clock (1000 s:
/// whole µs, so libccp's µs arithmetic is the same for every run).
pub const ORIGIN_STEP_NS: u64 = 1_000_000_000_000;

/// Defines `clock_gettime` in the test binary that invokes it (once, at the top level), so
/// that libccp reads `ccp_host::virtual_clock`. See the module documentation.
#[macro_export]
macro_rules! virtual_clock {
    () => {
        /// The C library's clock, replaced for this process: libccp reads simulated time.
        #[unsafe(no_mangle)]
        extern "C" fn clock_gettime(
            clk: $crate::libccp_sim::libc::clockid_t,
            tp: *mut $crate::libccp_sim::libc::timespec,
        ) -> $crate::libccp_sim::libc::c_int {
            // SAFETY: POSIX callers pass null or a valid, writable timespec, the contract of
            // `clock_gettime_body`.
            unsafe { $crate::libccp_sim::virtual_clock::clock_gettime_body(clk, tp) }
        }
    };
}

/// Starts a run: turns the virtual clock on, moves it to the next multiple of
/// [`ORIGIN_STEP_NS`] and returns that, the run's simulated time 0. Panics if the binary
/// did not invoke [`virtual_clock!`](crate::virtual_clock) (libccp would read the real
/// clock).
pub fn start_run() -> u64 {
    let now = virtual_clock::start().unwrap_or_else(|e| {
        panic!("{e}: invoke ccp_test_support::virtual_clock!() in the test binary")
    });
    virtual_clock::set((now / ORIGIN_STEP_NS + 1) * ORIGIN_STEP_NS)
}

/// One CCP flow of the model, running.
struct Flow {
    conn: libccp::Connection<'static, Knobs>,
    ctl: Box<dyn CcpFlow>,
    sid: u32,
}

/// A scenario run through libccp; see the module documentation.
pub struct LibccpSim<'a> {
    sim: Sim,
    /// The algorithm of every CCP flow, by flow id.
    algs: Vec<&'a dyn CcpAlgorithm<LibccpDp>>,
    host: Host<Outbox>,
    outbox: Outbox,
    programs: Rc<HashMap<&'static str, Scope>>,
    flows: Vec<Option<Flow>>,
    /// Virtual-clock value of simulated time 0.
    origin_ns: u64,
    lose_update: Option<u32>,
    trace_reports: bool,
    final_metrics: Vec<Option<FlowMetrics>>,
    invokes: u64,
    reports: u64,
}

impl std::fmt::Debug for LibccpSim<'_> {
    // libccp's connections and the flows' controllers have no Debug; the model is the state.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LibccpSim")
            .field("sim", &self.sim)
            .field("origin_ns", &self.origin_ns)
            .finish_non_exhaustive()
    }
}

/// What a run produced.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The model's summary.
    pub summary: Summary,
    /// Every CCP flow's controller state when it stopped, by flow id.
    pub final_metrics: Vec<Option<FlowMetrics>>,
    /// `invoke`s of libccp and reports handed to the flows, all flows.
    pub invokes: u64,
    pub reports: u64,
}

impl<'a> LibccpSim<'a> {
    /// A run of `scenario` whose CCP flow `i` runs `algs[i]`; every algorithm's programs are
    /// installed in a fresh libccp datapath.
    pub fn new(
        scenario: &Scenario,
        algs: &[&'a dyn CcpAlgorithm<LibccpDp>],
    ) -> Result<Self, ScenarioError> {
        assert_eq!(
            algs.len(),
            scenario.flows.len(),
            "one algorithm per CCP flow of the scenario"
        );
        let sim = Sim::new(scenario)?;
        let origin_ns = start_run();
        let outbox = Outbox::default();
        let host = start_datapath(&outbox);
        let mut programs = HashMap::new();
        for alg in algs {
            for (name, text) in alg.programs() {
                if !programs.contains_key(name) {
                    programs.insert(name, install(host.datapath(), &text));
                }
            }
        }
        Ok(LibccpSim {
            sim,
            algs: algs.to_vec(),
            host,
            outbox,
            programs: Rc::new(programs),
            flows: (0..algs.len()).map(|_| None).collect(),
            origin_ns,
            lose_update: None,
            trace_reports: false,
            final_metrics: vec![None; algs.len()],
            invokes: 0,
            reports: 0,
        })
    }

    /// Loses the `n`th UpdateFields of every flow (1 = the first), as a socket that drops a
    /// datagram would.
    pub fn losing_update(self, n: Option<u32>) -> Self {
        LibccpSim {
            lose_update: n,
            ..self
        }
    }

    /// Prints one line per report (time, sid, the controller's state and metrics) to stderr.
    pub fn tracing_reports(self, on: bool) -> Self {
        LibccpSim {
            trace_reports: on,
            ..self
        }
    }

    /// Runs the scenario to its end. Panics if libccp refuses something, a flow refuses a
    /// report, or the model breaks an invariant: a test failure with the time it happened.
    pub fn run(mut self) -> Outcome {
        while let Some(ev) = self.sim.next_event() {
            virtual_clock::set(self.origin_ns + self.sim.now_ns());
            let flow = match ev {
                SimEvent::Start { flow } => {
                    self.start(flow);
                    flow
                }
                SimEvent::Ack { flow, sample } => {
                    if let Some(f) = self.flows[flow].as_mut() {
                        f.conn
                            .load_primitives(ccp_host::primitives::to_libccp(sample.prims));
                        if let Err(e) = f.conn.invoke() {
                            panic!(
                                "flow {flow} at {} µs: the program failed: {e:?}",
                                self.sim.now_us()
                            );
                        }
                        self.invokes += 1;
                    }
                    flow
                }
                SimEvent::Priority { flow, priority } => {
                    if let Some(f) = self.flows[flow].as_mut() {
                        f.ctl.on_priority(priority).unwrap_or_else(|e| {
                            panic!("flow {flow}: priority {priority:?} refused: {e:?}")
                        });
                    }
                    flow
                }
                SimEvent::Stop { flow } => {
                    if let Some(mut f) = self.flows[flow].take() {
                        self.final_metrics[flow] = Some(f.ctl.metrics());
                        f.ctl.close();
                    }
                    flow
                }
            };
            self.deliver_reports();
            if let Some(f) = &self.flows[flow] {
                // libccp never sets a window of 0; a rate of 0 means "not paced".
                self.sim.set_cwnd(flow, u64::from(f.conn.cwnd));
                self.sim.set_rate(flow, Some(u64::from(f.conn.rate)));
            }
            if let Err(v) = self.sim.check_invariants() {
                panic!("at {} µs: {v}", self.sim.now_us());
            }
        }
        Outcome {
            summary: self.sim.summary(),
            final_metrics: self.final_metrics,
            invokes: self.invokes,
            reports: self.reports,
        }
    }

    fn start(&mut self, flow: FlowId) {
        let mss = self.sim.scenario().link.mss;
        let init_cwnd = algs_core::register::clamp_to_register(self.sim.cwnd(flow));
        let conn = libccp::Connection::start(
            self.host.datapath(),
            Knobs::default(),
            libccp::FlowInfo::default()
                .with_init_cwnd(init_cwnd)
                .with_mss(mss),
        )
        .unwrap_or_else(|e| panic!("flow {flow}: libccp refused the connection: {e:?}"));
        let sid = self
            .host
            .take_create_sid()
            .unwrap_or_else(|| panic!("flow {flow}: libccp sent no Create"));
        let dp = LibccpDp::new(self.host.datapath(), sid, self.programs.clone())
            .losing_update(self.lose_update);
        let alg = self.algs[flow];
        let ctl = alg
            .new_flow(
                dp,
                FlowStart {
                    sid,
                    init_cwnd: Bytes(u64::from(init_cwnd)),
                    mss: Bytes(u64::from(mss)),
                    priority: alg.default_priority(),
                    carried: None,
                    hand_off_to_primary: false,
                },
            )
            .unwrap_or_else(|e| panic!("flow {flow}: {} refused to start: {e:?}", alg.name()));
        self.flows[flow] = Some(Flow { conn, ctl, sid });
    }

    /// Hands every report libccp sent to its flow.
    fn deliver_reports(&mut self) {
        for m in self.outbox.take_reports() {
            let Some(f) = self.flows.iter_mut().flatten().find(|f| f.sid == m.sid) else {
                continue;
            };
            f.ctl
                .on_report(&RawReport {
                    program_uid: m.program_uid,
                    fields: &m.fields,
                })
                .unwrap_or_else(|e| panic!("sid {}: report refused: {e:?}", m.sid));
            self.reports += 1;
            if self.trace_reports {
                let x = f.ctl.metrics();
                let extra: Vec<String> =
                    x.extra.iter().map(|(k, v)| format!("{k}={v:.4}")).collect();
                eprintln!(
                    "report t={:.3}s sid={} {} rate={:.2}Mbps {}",
                    self.sim.now_ns() as f64 / 1e9,
                    m.sid,
                    x.state,
                    x.rate_bytes_per_sec.unwrap_or(0.0) * 8e-6,
                    extra.join(" ")
                );
            }
        }
    }
}
