//! The flow trace: one JSON line per algorithm decision and per flow event
//! (`--trace-flows FILE`), for plots and for checking behaviour after a run.
//!
//! ```json
//! {"time":1.204,"datapath":"/tmp/ccp/dp1","sid":3,"event":"report","algorithm":"ledbat++",
//!  "priority":"scavenger","cwnd":90000,"rate":null,"state":"avoidance","queueing_delay_us":41000.0}
//! ```
//! `event` is one of create, report, priority, handoff, close.

use algs_core::metrics::FlowMetrics;
use serde_json::{Map, Value, json};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::time::Instant;

/// Flow events worth a trace line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceEvent {
    Create,
    Report,
    Priority,
    HandOff,
    Close,
}

impl TraceEvent {
    fn name(self) -> &'static str {
        match self {
            TraceEvent::Create => "create",
            TraceEvent::Report => "report",
            TraceEvent::Priority => "priority",
            TraceEvent::HandOff => "handoff",
            TraceEvent::Close => "close",
        }
    }
}

/// Writes trace lines to a file.
#[derive(Debug)]
pub struct FlowTrace {
    out: BufWriter<File>,
    started: Instant,
}

impl FlowTrace {
    pub fn create(path: &Path) -> io::Result<Self> {
        Ok(FlowTrace {
            out: BufWriter::new(File::create(path)?),
            started: Instant::now(),
        })
    }

    /// One line; `extra` adds event-specific fields (e.g. the hand-off's source algorithm).
    pub fn record(
        &mut self,
        datapath: &str,
        sid: u32,
        event: TraceEvent,
        algorithm: &str,
        metrics: &FlowMetrics,
        extra: &[(&str, Value)],
    ) -> io::Result<()> {
        let mut line = Map::new();
        line.insert("time".into(), json!(self.started.elapsed().as_secs_f64()));
        line.insert("datapath".into(), json!(datapath));
        line.insert("sid".into(), json!(sid));
        line.insert("event".into(), json!(event.name()));
        line.insert("algorithm".into(), json!(algorithm));
        line.insert("priority".into(), json!(metrics.priority.name()));
        if let algs_core::Priority::Hybrid { threshold: Some(t) } = metrics.priority {
            line.insert("hybrid_threshold_bytes_per_sec".into(), json!(t.0));
        }
        line.insert("cwnd".into(), json!(metrics.cwnd_bytes));
        line.insert("rate".into(), json!(metrics.rate_bytes_per_sec));
        line.insert("state".into(), json!(metrics.state));
        for (k, v) in &metrics.extra {
            line.insert((*k).into(), json!(v));
        }
        for (k, v) in extra {
            line.insert((*k).into(), v.clone());
        }
        serde_json::to_writer(&mut self.out, &Value::Object(line))?;
        self.out.write_all(b"\n")
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}
