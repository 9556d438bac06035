//! `ccp-testdp sim SCENARIO`: the bottleneck model of `ccp_sim` with its CCP
//! flows run through libccp and the agent.
//!
//! Per model event: virtual time := event time; Start → `Connection::start` (Create);
//! ACK → primitives, `invoke`, then the window and rate libccp applied go back into the
//! model; PRIORITY → the message; Stop → the connection is dropped (close). Each is
//! followed by the SYNC barrier, so the agent's answer is in libccp before the model moves.

use crate::datapath::{DpError, DpOptions, FlowSpec, TestDatapath};
use crate::link::AgentStats;
use ccp_sim::{Scenario, ScenarioError, Sim, SimEvent, Summary};
use serde::Serialize;
use std::fmt::Write as _;
use std::net::SocketAddrV4;
use thiserror::Error;

/// Why a simulation failed.
#[derive(Debug, Error)]
pub enum SimError {
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    #[error("the scenario has CCP flows ({0}) but no --agent was given")]
    NoAgent(String),
    #[error("at {at_us} µs: {source}")]
    Datapath { at_us: u64, source: DpError },
}

/// The datapath's side of one CCP flow.
#[derive(Debug, Clone, Serialize)]
pub struct CcpFlowStats {
    pub name: String,
    pub alg: String,
    pub sid: Option<u32>,
    pub invokes: u64,
    pub invoke_errors: u64,
    pub last_error: Option<String>,
    pub reports: u64,
    pub cwnd_updates: u64,
    pub rate_updates: u64,
}

/// The JSON output: the model's summary, plus what the datapath saw.
#[derive(Debug, Clone, Serialize)]
pub struct SimOutput {
    #[serde(flatten)]
    pub summary: Summary,
    /// Flows removed from the scenario with --without/--only.
    pub removed: Vec<String>,
    pub ccp: Vec<CcpFlowStats>,
    pub agent: Option<AgentStats>,
    /// The last agent message libccp refused (wording of libccp), if any.
    pub agent_refusal: Option<String>,
}

/// Runs a scenario; `opts` may be `None` only if it has no CCP flows.
pub fn run(
    scenario: &Scenario,
    opts: Option<&DpOptions>,
    removed: Vec<String>,
) -> Result<SimOutput, SimError> {
    let mut sim = Sim::new(scenario)?;
    let mut dp = match (scenario.flows.is_empty(), opts) {
        (true, _) => None,
        (false, Some(o)) => Some(
            TestDatapath::connect(o).map_err(|source| SimError::Datapath { at_us: 0, source })?,
        ),
        (false, None) => {
            let names: Vec<&str> = scenario.flows.iter().map(|f| f.name.as_str()).collect();
            return Err(SimError::NoAgent(names.join(", ")));
        }
    };
    // Model flow id → datapath flow index.
    let mut idx: Vec<Option<usize>> = vec![None; scenario.flows.len()];
    while let Some(ev) = sim.next_event() {
        let Some(dp) = dp.as_mut() else {
            continue;
        };
        dp.set_time(sim.now_ns());
        let at_us = sim.now_us();
        let fail = |source| SimError::Datapath { at_us, source };
        match ev {
            SimEvent::Start { flow } => {
                let spec = &scenario.flows[flow];
                let port =
                    40_000u16.saturating_add(u16::try_from(flow).unwrap_or(u16::MAX - 40_000));
                let i = dp
                    .create(&FlowSpec {
                        name: spec.name.clone(),
                        alg: spec.alg.clone(),
                        init_cwnd: algs_core::register::clamp_to_register(sim.cwnd(flow)),
                        mss: scenario.link.mss,
                        src: SocketAddrV4::new([10, 0, 0, 1].into(), port),
                        dst: SocketAddrV4::new([10, 0, 0, 2].into(), 5_201),
                    })
                    .map_err(fail)?;
                idx[flow] = Some(i);
            }
            SimEvent::Ack { flow, sample } => {
                let Some(i) = idx[flow] else { continue };
                dp.ack(i, &sample).map_err(fail)?;
                let st = dp.status(i);
                sim.set_cwnd(flow, u64::from(st.cwnd));
                sim.set_rate(flow, Some(u64::from(st.rate)));
            }
            SimEvent::Priority { flow, priority } => {
                if let Some(i) = idx[flow] {
                    dp.priority(i, priority).map_err(fail)?;
                }
            }
            SimEvent::Stop { flow } => {
                if let Some(i) = idx[flow] {
                    dp.close(i).map_err(fail)?;
                }
            }
        }
    }
    let ccp = dp
        .as_ref()
        .map(|dp| {
            dp.statuses()
                .map(|s| CcpFlowStats {
                    name: s.flow.clone(),
                    alg: s.alg.clone(),
                    sid: s.sid,
                    invokes: s.invokes,
                    invoke_errors: s.invoke_errors,
                    last_error: s.last_error.clone(),
                    reports: s.reports,
                    cwnd_updates: s.cwnd_updates,
                    rate_updates: s.rate_updates,
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(SimOutput {
        summary: sim.summary(),
        removed,
        ccp,
        agent: dp.as_ref().map(TestDatapath::agent_stats),
        agent_refusal: dp.as_ref().and_then(TestDatapath::last_refusal),
    })
}

/// The per-bin series as CSV: `t_s` (end of the bin), queueing delay mean and max, then
/// per flow its throughput, window, rate and smoothed RTT.
pub fn series_csv(s: &Summary) -> String {
    let mut out = String::from("t_s,queue_delay_ms,queue_delay_max_ms");
    for f in &s.flows {
        let n = &f.name;
        let _ = write!(
            out,
            ",{n}_mbps,{n}_cwnd_bytes,{n}_rate_bytes_per_sec,{n}_srtt_ms"
        );
    }
    out.push('\n');
    for b in 0..s.queue_delay_ms_series.len() {
        let t = ((b + 1) as f64 * s.bin_s).min(s.duration_s);
        let _ = write!(
            out,
            "{t:.3},{:.3},{:.3}",
            s.queue_delay_ms_series[b], s.queue_delay_max_ms_series[b]
        );
        for f in &s.flows {
            let get = |v: &[f64]| v.get(b).copied().unwrap_or(0.0);
            let _ = write!(
                out,
                ",{:.4},{},{},{:.3}",
                get(&f.throughput_mbps),
                f.cwnd_bytes.get(b).copied().unwrap_or(0),
                f.rate_bytes_per_sec.get(b).copied().unwrap_or(0),
                get(&f.srtt_ms)
            );
        }
        out.push('\n');
    }
    out
}
