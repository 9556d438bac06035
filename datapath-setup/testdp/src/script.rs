//! `ccp-testdp script FILE`: flows driven step by step from a TOML script.
//!
//! After every step, one JSON line per flow that was open at the start of the step (see
//! [`StepLine`]); the README documents the format.

use crate::datapath::{DpError, FlowSpec, FlowStatus, TestDatapath};
use algs_core::AckPrimitives;
use ccp_sim::{AckSample, PriorityChange, PriorityClassName};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::net::SocketAddrV4;
use thiserror::Error;

const NS_PER_US: u64 = 1_000;
const NS_PER_MS: u64 = 1_000_000;

/// A whole script.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    #[serde(rename = "step")]
    pub steps: Vec<Step>,
}

/// One step.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(tag = "op", rename_all = "lowercase", deny_unknown_fields)]
pub enum Step {
    /// Start a connection: libccp sends Create with `alg`.
    Create {
        flow: String,
        #[serde(default)]
        alg: String,
        /// Bytes; default 10 x mss.
        #[serde(default)]
        init_cwnd: Option<u32>,
        #[serde(default = "default_mss")]
        mss: u32,
        #[serde(default = "default_src")]
        src: SocketAddrV4,
        #[serde(default = "default_dst")]
        dst: SocketAddrV4,
    },
    /// Feed ACKs: load these primitives and invoke, `repeat` times, moving the clock by
    /// `every_us` before each.
    Ack {
        flow: String,
        #[serde(default)]
        bytes_acked: u32,
        #[serde(default)]
        packets_acked: u32,
        #[serde(default)]
        lost_pkts_sample: u32,
        #[serde(default)]
        was_timeout: bool,
        /// µs; omitted = no sample.
        #[serde(default = "no_rtt_sample")]
        rtt_sample_us: u64,
        #[serde(default)]
        rate_outgoing: u64,
        #[serde(default)]
        rate_incoming: u64,
        #[serde(default)]
        bytes_in_flight: u32,
        #[serde(default)]
        packets_in_flight: u32,
        #[serde(default)]
        bytes_pending: u32,
        /// Default: the window libccp last applied.
        #[serde(default)]
        snd_cwnd: Option<u32>,
        /// Default: the rate libccp last applied.
        #[serde(default)]
        snd_rate: Option<u64>,
        #[serde(default = "one")]
        repeat: u32,
        #[serde(default)]
        every_us: u64,
    },
    /// Move the virtual clock forward.
    Advance {
        #[serde(default)]
        us: u64,
        #[serde(default)]
        ms: u64,
    },
    /// Send a PRIORITY message.
    Priority {
        flow: String,
        class: PriorityClassName,
        /// Hybrid threshold, Mbit/s; absent or 0 = keep the configured one.
        #[serde(default)]
        threshold_mbps: Option<f64>,
    },
    /// Close the connection (libccp sends the close Measure).
    Close { flow: String },
}

fn default_mss() -> u32 {
    ccp_sim::DEFAULT_MSS
}

fn default_src() -> SocketAddrV4 {
    SocketAddrV4::new([10, 0, 0, 1].into(), 40_000)
}

fn default_dst() -> SocketAddrV4 {
    SocketAddrV4::new([10, 0, 0, 2].into(), 5_201)
}

fn one() -> u32 {
    1
}

fn no_rtt_sample() -> u64 {
    AckPrimitives::default().rtt_sample_us
}

impl Step {
    fn op(&self) -> &'static str {
        match self {
            Step::Create { .. } => "create",
            Step::Ack { .. } => "ack",
            Step::Advance { .. } => "advance",
            Step::Priority { .. } => "priority",
            Step::Close { .. } => "close",
        }
    }
}

/// One output line: a flow's status after a step.
#[derive(Debug, Serialize)]
pub struct StepLine<'a> {
    /// Step number, from 0.
    pub step: usize,
    pub op: &'static str,
    /// Virtual time since libccp's init, µs (what `Ack.now` reads).
    pub now_us: u64,
    #[serde(flatten)]
    pub status: &'a FlowStatus,
}

/// Why a script failed.
#[derive(Debug, Error)]
pub enum ScriptError {
    #[error("step {step} ({op}): {source}")]
    Step {
        step: usize,
        op: &'static str,
        source: DpError,
    },
    #[error("writing the output: {0}")]
    Output(#[from] std::io::Error),
}

/// Runs a script, writing the JSON lines to `out`.
pub fn run(
    script: &Script,
    dp: &mut TestDatapath,
    out: &mut impl Write,
) -> Result<(), ScriptError> {
    for (i, step) in script.steps.iter().enumerate() {
        let open_before: Vec<bool> = dp.statuses().map(|s| !s.closed).collect();
        let wrap = |source| ScriptError::Step {
            step: i,
            op: step.op(),
            source,
        };
        run_step(step, dp).map_err(wrap)?;
        let now_us = dp.now_ns() / NS_PER_US;
        for (j, status) in dp.statuses().enumerate() {
            if open_before.get(j).copied().unwrap_or(true) {
                let line = StepLine {
                    step: i,
                    op: step.op(),
                    now_us,
                    status,
                };
                serde_json::to_writer(&mut *out, &line).map_err(std::io::Error::from)?;
                writeln!(out)?;
            }
        }
        out.flush()?;
    }
    Ok(())
}

fn run_step(step: &Step, dp: &mut TestDatapath) -> Result<(), DpError> {
    match step {
        Step::Create {
            flow,
            alg,
            init_cwnd,
            mss,
            src,
            dst,
        } => {
            dp.create(&FlowSpec {
                name: flow.clone(),
                alg: alg.clone(),
                init_cwnd: init_cwnd.unwrap_or(mss.saturating_mul(ccp_sim::DEFAULT_INIT_CWND_PKTS)),
                mss: *mss,
                src: *src,
                dst: *dst,
            })?;
        }
        Step::Ack {
            flow,
            bytes_acked,
            packets_acked,
            lost_pkts_sample,
            was_timeout,
            rtt_sample_us,
            rate_outgoing,
            rate_incoming,
            bytes_in_flight,
            packets_in_flight,
            bytes_pending,
            snd_cwnd,
            snd_rate,
            repeat,
            every_us,
        } => {
            let f = dp.flow_index(flow)?;
            for _ in 0..*repeat {
                let t = dp.now_ns() + every_us * NS_PER_US;
                dp.set_time(t);
                let st = dp.status(f);
                let sample = AckSample {
                    now_us: t / NS_PER_US,
                    prims: AckPrimitives {
                        bytes_acked: *bytes_acked,
                        packets_acked: *packets_acked,
                        lost_pkts_sample: *lost_pkts_sample,
                        was_timeout: *was_timeout,
                        rtt_sample_us: *rtt_sample_us,
                        rate_outgoing: *rate_outgoing,
                        rate_incoming: *rate_incoming,
                        bytes_in_flight: *bytes_in_flight,
                        packets_in_flight: *packets_in_flight,
                        snd_cwnd: snd_cwnd.unwrap_or(st.cwnd),
                        snd_rate: snd_rate.unwrap_or(u64::from(st.rate)),
                        bytes_pending: *bytes_pending,
                        ..AckPrimitives::default()
                    },
                };
                dp.ack(f, &sample)?;
            }
        }
        Step::Advance { us, ms } => {
            let t = dp.now_ns() + us * NS_PER_US + ms * NS_PER_MS;
            dp.set_time(t);
        }
        Step::Priority {
            flow,
            class,
            threshold_mbps,
        } => {
            let f = dp.flow_index(flow)?;
            let change = PriorityChange {
                at_s: 0.0,
                class: *class,
                threshold_mbps: *threshold_mbps,
            };
            dp.priority(f, change.priority())?;
        }
        Step::Close { flow } => {
            let f = dp.flow_index(flow)?;
            dp.close(f)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_step_kind_with_defaults() {
        let s: Script = toml::from_str(
            r#"
            [[step]]
            op = "create"
            flow = "a"
            alg = "cubic"
            src = "192.168.1.2:1234"

            [[step]]
            op = "ack"
            flow = "a"
            bytes_acked = 1448
            rtt_sample_us = 30000
            repeat = 5
            every_us = 100

            [[step]]
            op = "advance"
            ms = 30

            [[step]]
            op = "priority"
            flow = "a"
            class = "hybrid"
            threshold_mbps = 8.0

            [[step]]
            op = "close"
            flow = "a"
            "#,
        )
        .expect("valid script");
        assert_eq!(s.steps.len(), 5);
        match &s.steps[0] {
            Step::Create { mss, src, dst, .. } => {
                assert_eq!(*mss, 1448);
                assert_eq!(src.port(), 1234);
                assert_eq!(*dst, default_dst());
            }
            other => panic!("{other:?}"),
        }
        match &s.steps[1] {
            Step::Ack {
                repeat, snd_cwnd, ..
            } => {
                assert_eq!(*repeat, 5);
                assert_eq!(*snd_cwnd, None);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn refuses_misspelled_fields() {
        let r: Result<Script, _> = toml::from_str(
            r#"
            [[step]]
            op = "ack"
            flow = "a"
            rtt_us = 5
            "#,
        );
        assert!(r.is_err());
    }
}
