//! `ccp-exp`: scenario plans (TOML) expanded into runs over `ccp-emu` or Mahimahi, results
//! (iperf3 JSON, summaries), standalone re-run scripts and plots.

pub mod backends;
pub mod check;
pub mod control_lag;
pub mod diff;
pub mod host_cpu;
pub mod iperf;
pub mod metrics;
pub mod plan;
pub mod plot;
pub mod ports;
pub mod probe;
pub mod report;
pub mod runner;
pub mod schedule;
pub mod script;
pub mod shared;
pub mod stale;
