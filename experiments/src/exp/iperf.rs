//! Reading `iperf3 -J --get-server-output` results: receiver-side intervals (from the
//! server's output), sender totals, retransmissions and RTT samples.

use serde_json::Value;

use super::metrics::Interval;

/// What one iperf3 client run says.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FlowResult {
    /// Receiver-side intervals, shifted to the run's clock by the flow's start offset
    /// (the sender's when the server's JSON is missing; see `receiver_side`).
    pub intervals: Vec<Interval>,
    /// Whether `intervals` come from the receiver (the server ran with -J).
    pub receiver_side: bool,
    /// Bytes the receiver got.
    pub received_bytes: f64,
    /// Bytes the sender sent.
    pub sent_bytes: f64,
    /// Retransmitted segments.
    pub retransmits: u64,
    /// Smoothed RTT samples from the sender's intervals, ms.
    pub rtt_ms: Vec<f64>,
    /// The congestion control iperf3 reports for the sender.
    pub congestion: Option<String>,
}

/// Why an iperf3 result could not be read.
#[derive(Debug, thiserror::Error)]
pub enum IperfError {
    #[error("not JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("iperf3 reported an error: {0}")]
    Reported(String),
    #[error("missing field {0}")]
    Missing(&'static str),
}

fn num(v: &Value, path: &[&str]) -> Option<f64> {
    path.iter().try_fold(v, |v, k| v.get(*k))?.as_f64()
}

fn intervals_of(v: &Value, offset_s: f64) -> Vec<Interval> {
    v.get("intervals")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|i| {
                    Some(Interval {
                        start_s: offset_s + num(i, &["sum", "start"])?,
                        end_s: offset_s + num(i, &["sum", "end"])?,
                        bytes: num(i, &["sum", "bytes"])?,
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

impl FlowResult {
    /// Parses a client's `-J` output; `offset_s` is when the flow started in the run.
    pub fn parse(text: &str, offset_s: f64) -> Result<Self, IperfError> {
        let v: Value = serde_json::from_str(text)?;
        if let Some(e) = v.get("error").and_then(Value::as_str) {
            return Err(IperfError::Reported(e.to_string()));
        }
        let end = v.get("end").ok_or(IperfError::Missing("end"))?;
        let server = v.get("server_output_json");
        let receiver_side = server.is_some();
        let intervals = match server {
            Some(s) => intervals_of(s, offset_s),
            None => intervals_of(&v, offset_s),
        };
        let rtt_ms = v
            .get("intervals")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|i| i.get("streams")?.get(0)?.get("rtt")?.as_f64())
                    .map(|us| us / 1000.0)
                    .collect()
            })
            .unwrap_or_default();
        Ok(Self {
            intervals,
            receiver_side,
            received_bytes: num(end, &["sum_received", "bytes"]).unwrap_or(0.0),
            sent_bytes: num(end, &["sum_sent", "bytes"]).unwrap_or(0.0),
            retransmits: num(end, &["sum_sent", "retransmits"]).unwrap_or(0.0) as u64,
            rtt_ms,
            congestion: end
                .get("sender_tcp_congestion")
                .and_then(Value::as_str)
                .map(String::from),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"{
      "start": {"timestamp": {"timesecs": 1}},
      "intervals": [
        {"streams": [{"rtt": 30500}], "sum": {"start": 0, "end": 1.0, "bytes": 5000000}},
        {"streams": [{"rtt": 41000}], "sum": {"start": 1.0, "end": 2.0, "bytes": 6000000}}
      ],
      "end": {"sum_sent": {"bytes": 11000000, "retransmits": 3},
              "sum_received": {"bytes": 10900000},
              "sender_tcp_congestion": "cubic"},
      "server_output_json": {"intervals": [
        {"sum": {"start": 0, "end": 1.05, "bytes": 4900000}},
        {"sum": {"start": 1.05, "end": 2.05, "bytes": 6000000}}
      ]}
    }"#;

    #[test]
    fn reads_receiver_intervals_shifted_by_the_start() {
        let r = FlowResult::parse(SAMPLE, 5.0).expect("valid");
        assert_eq!(r.intervals.len(), 2);
        assert_eq!(r.intervals[1].start_s, 6.05);
        assert_eq!(r.intervals[1].bytes, 6e6);
        assert!(r.receiver_side);
        assert_eq!(r.retransmits, 3);
        assert_eq!(r.rtt_ms, [30.5, 41.0]);
        assert_eq!(r.congestion.as_deref(), Some("cubic"));
    }

    #[test]
    fn reports_iperf_errors() {
        let e = FlowResult::parse(r#"{"error": "unable to connect to server"}"#, 0.0);
        assert!(matches!(e, Err(IperfError::Reported(m)) if m.contains("connect")));
        assert!(matches!(
            FlowResult::parse("{}", 0.0),
            Err(IperfError::Missing("end"))
        ));
    }
}
