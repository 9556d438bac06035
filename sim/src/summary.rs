//! What a simulation produced: the JSON summary the test datapath prints and tests assert on.

use serde::Serialize;

/// Nearest-rank percentiles of a delay distribution, ms.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct DelayStats {
    pub samples: u64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl DelayStats {
    /// From delays in µs; sorts its argument.
    pub(crate) fn from_us(delays: &mut [u32]) -> Self {
        if delays.is_empty() {
            return DelayStats::default();
        }
        delays.sort_unstable();
        let n = delays.len();
        let rank = |p: f64| -> f64 {
            // Nearest rank: the smallest value with at least p of the samples at or below it.
            let idx = ((p * n as f64).ceil() as usize).clamp(1, n) - 1;
            f64::from(delays[idx]) / 1e3
        };
        let sum: u64 = delays.iter().map(|&d| u64::from(d)).sum();
        DelayStats {
            samples: n as u64,
            mean_ms: sum as f64 / n as f64 / 1e3,
            p50_ms: rank(0.50),
            p95_ms: rank(0.95),
            p99_ms: rank(0.99),
            max_ms: f64::from(delays[n - 1]) / 1e3,
        }
    }
}

/// The whole run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub scenario: Option<String>,
    pub duration_s: f64,
    pub link_rate_mbps: f64,
    pub base_rtt_ms: f64,
    pub buffer_bytes: u64,
    pub mss: u32,
    /// Bytes that left the bottleneck / (capacity x duration).
    pub utilization: f64,
    /// Packets the droptail queue refused, all flows.
    pub drops: u64,
    /// Packets lost on the link after the bottleneck (`link.random_loss`), all flows.
    pub link_losses: u64,
    /// Largest queue seen, bytes (never above `buffer_bytes`).
    pub max_queue_bytes: u64,
    /// Waiting time in the queue of every packet that crossed the link.
    pub queue_delay: DelayStats,
    /// Width of every series bin, s.
    pub bin_s: f64,
    /// Mean queueing delay per bin, ms (0 in a bin with no departures).
    pub queue_delay_ms_series: Vec<f64>,
    /// Largest queueing delay per bin, ms.
    pub queue_delay_max_ms_series: Vec<f64>,
    pub flows: Vec<FlowSummary>,
    /// One entry per `[[report]]` window of the scenario, in order.
    pub windows: Vec<WindowSummary>,
}

/// One flow of the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlowSummary {
    pub name: String,
    /// "ccp", "aimd" or "constant".
    pub kind: &'static str,
    /// Algorithm asked for in Create (CCP flows).
    pub alg: Option<String>,
    pub start_s: f64,
    /// When the application stopped, or the end of the run.
    pub stop_s: f64,
    /// Bytes that left the bottleneck and reached the receiver / (stop_s - start_s).
    pub mean_mbps: f64,
    pub bytes: u64,
    pub packets_sent: u64,
    /// Packets this flow lost at the droptail queue.
    pub drops: u64,
    /// Packets of this flow lost on the link after the bottleneck (random loss).
    pub link_losses: u64,
    /// Losses the sender detected (reported as `lost_pkts_sample`, timeouts included).
    pub losses_detected: u64,
    pub timeouts: u64,
    /// ACKs (and timeouts) handed to the flow's controller.
    pub acks: u64,
    /// Throughput per bin, Mbit/s.
    pub throughput_mbps: Vec<f64>,
    /// Window at the end of each bin, bytes (0 while the flow is not running).
    pub cwnd_bytes: Vec<u64>,
    /// Pacing rate at the end of each bin, bytes/s (0 = not paced).
    pub rate_bytes_per_sec: Vec<u64>,
    /// Smoothed RTT at the end of each bin, ms (0 before the first sample).
    pub srtt_ms: Vec<f64>,
}

/// One `[[report]]` window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WindowSummary {
    pub name: Option<String>,
    pub from_s: f64,
    pub to_s: f64,
    pub utilization: f64,
    pub queue_delay: DelayStats,
    /// Mean throughput of every flow in the window (over the whole window, whether or not
    /// the flow ran all of it), Mbit/s, in the order of `Summary::flows`.
    pub flows: Vec<WindowFlow>,
}

/// One flow in one window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WindowFlow {
    pub name: String,
    pub mean_mbps: f64,
    pub bytes: u64,
}

impl Summary {
    /// The flow of that name.
    pub fn flow(&self, name: &str) -> Option<&FlowSummary> {
        self.flows.iter().find(|f| f.name == name)
    }

    /// Mean throughput of the named flow over `[from_s, to_s)`, Mbit/s, from the bins that
    /// lie wholly inside it (exact when the edges are multiples of `bin_s`), whether or not
    /// the flow ran all of it. For windows chosen after the run; `[[report]]` windows are
    /// exact at any edge.
    pub fn mbps(&self, name: &str, from_s: f64, to_s: f64) -> Option<f64> {
        let f = self.flow(name)?;
        if to_s <= from_s {
            return Some(0.0);
        }
        // Bin i spans [i, i + 1) x bin_s, the last one cut by the end of the run; a little
        // slack for edges that are multiples of the width only up to rounding.
        let slack = 1e-9 * self.bin_s;
        let megabits: f64 = f
            .throughput_mbps
            .iter()
            .enumerate()
            .filter_map(|(i, m)| {
                let start = i as f64 * self.bin_s;
                let end = (start + self.bin_s).min(self.duration_s);
                (start >= from_s - slack && end <= to_s + slack).then_some(m * (end - start))
            })
            .sum();
        Some(megabits / (to_s - from_s))
    }

    /// A trace with one line per `step_s` of the run: every flow's Mbit/s in that step,
    /// in the order of `flows`.
    pub fn trace(&self, step_s: f64) -> Vec<String> {
        let steps = (self.duration_s / step_s).floor() as usize;
        (0..steps)
            .map(|k| {
                let (from, to) = (k as f64 * step_s, (k + 1) as f64 * step_s);
                let per: Vec<String> = self
                    .flows
                    .iter()
                    .map(|f| format!("{:7.2}", self.mbps(&f.name, from, to).unwrap_or(0.0)))
                    .collect();
                format!("t={from:6.1}s  Mbit/s per flow: {}", per.join(" "))
            })
            .collect()
    }
}

impl WindowSummary {
    /// Mean throughput of the named flow in this window, Mbit/s.
    pub fn mbps(&self, name: &str) -> Option<f64> {
        self.flows
            .iter()
            .find(|f| f.name == name)
            .map(|f| f.mean_mbps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one_flow(throughput_mbps: Vec<f64>, bin_s: f64, duration_s: f64) -> Summary {
        let flow = FlowSummary {
            name: "a".into(),
            kind: "ccp",
            alg: None,
            start_s: 0.0,
            stop_s: duration_s,
            mean_mbps: 0.0,
            bytes: 0,
            packets_sent: 0,
            drops: 0,
            link_losses: 0,
            losses_detected: 0,
            timeouts: 0,
            acks: 0,
            throughput_mbps,
            cwnd_bytes: vec![],
            rate_bytes_per_sec: vec![],
            srtt_ms: vec![],
        };
        Summary {
            scenario: None,
            duration_s,
            link_rate_mbps: 10.0,
            base_rtt_ms: 10.0,
            buffer_bytes: 0,
            mss: 1448,
            utilization: 0.0,
            drops: 0,
            link_losses: 0,
            max_queue_bytes: 0,
            queue_delay: DelayStats::default(),
            bin_s,
            queue_delay_ms_series: vec![],
            queue_delay_max_ms_series: vec![],
            flows: vec![flow],
            windows: vec![],
        }
    }

    #[test]
    fn throughput_over_a_window_chosen_after_the_run() {
        // Bins of 0.5 s; the last one is cut to 0.25 s by the end of the run.
        let s = one_flow(vec![2.0, 4.0, 6.0, 8.0, 10.0], 0.5, 2.25);
        assert_eq!(s.mbps("a", 0.0, 1.0), Some(3.0));
        assert_eq!(s.mbps("a", 0.5, 2.0), Some(6.0));
        // The cut last bin counts for its own width only.
        assert_eq!(s.mbps("a", 2.0, 2.25), Some(10.0));
        // Bins partly outside the window are left out: [0.5, 1.0) only.
        assert_eq!(s.mbps("a", 0.3, 1.2), Some(4.0 * 0.5 / 0.9));
        assert_eq!(s.mbps("b", 0.0, 1.0), None);
        assert_eq!(
            s.trace(1.0),
            vec![
                "t=   0.0s  Mbit/s per flow:    3.00",
                "t=   1.0s  Mbit/s per flow:    7.00"
            ]
        );
    }

    #[test]
    fn nearest_rank_percentiles() {
        let mut d: Vec<u32> = (1..=100).map(|i| i * 1000).collect();
        let s = DelayStats::from_us(&mut d);
        assert_eq!(s.p50_ms, 50.0);
        assert_eq!(s.p95_ms, 95.0);
        assert_eq!(s.max_ms, 100.0);
        assert!((s.mean_ms - 50.5).abs() < 1e-9);
        assert_eq!(DelayStats::from_us(&mut []).samples, 0);
    }
}
