//! Base delay: the minimum RTT over the last `n` one-minute buckets (RFC 6817 semantics,
//! docs/algorithms/ledbat-pp.md §1.2).

use crate::params::BASE_BUCKET;
use algs_core::Micros;
use std::collections::VecDeque;

/// Minimum RTT per "minute", the last `len` minutes.
///
/// A rollover happens only when a sample arrives, so several idle minutes count as one
/// rollover (RFC 6817 behaviour, kept for faithfulness; docs/algorithms/ledbat-pp.md §1.2). Minutes are counted
/// from the first sample, datapath time.
#[derive(Debug, Clone)]
pub struct BaseDelayHistory {
    /// Number of buckets kept.
    len: usize,
    /// Bucket minima in µs, oldest first; absent buckets are +∞.
    buckets: VecDeque<u64>,
    /// Datapath time of the first sample: minute 0 starts there.
    origin: Option<Micros>,
    /// Minute index (since `origin`) of the newest bucket.
    newest_minute: u64,
}

impl BaseDelayHistory {
    pub fn new(len: usize) -> Self {
        BaseDelayHistory {
            len: len.max(1),
            buckets: VecDeque::with_capacity(len.max(1)),
            origin: None,
            newest_minute: 0,
        }
    }

    /// Adds an RTT sample taken at `now`.
    pub fn update(&mut self, now: Micros, rtt: Micros) {
        let origin = *self.origin.get_or_insert(now);
        let minute = now.since(origin).0 / BASE_BUCKET.0;
        match self.buckets.back_mut() {
            Some(newest) if minute == self.newest_minute => *newest = (*newest).min(rtt.0),
            _ => {
                if self.buckets.len() == self.len {
                    self.buckets.pop_front();
                }
                self.buckets.push_back(rtt.0);
                self.newest_minute = minute;
            }
        }
    }

    /// The base delay, once a sample arrived.
    pub fn base(&self) -> Option<Micros> {
        self.buckets.iter().min().map(|&b| Micros(b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn at_minute(m: u64, extra_ms: u64) -> Micros {
        Micros(m * BASE_BUCKET.0 + extra_ms * 1_000)
    }

    #[test]
    fn no_base_before_a_sample() {
        assert_eq!(BaseDelayHistory::new(10).base(), None);
    }

    /// TV-3: a low sample lives for 10 buckets, then the next minute's first sample evicts it;
    /// a new low sample counts at once.
    #[test]
    fn tv3_base_history_evicts_after_ten_minutes() {
        let mut h = BaseDelayHistory::new(10);
        h.update(at_minute(0, 0), Micros::from_millis(30));
        for m in 1..=9 {
            h.update(at_minute(m, 5), Micros::from_millis(40));
            assert_eq!(h.base(), Some(Micros::from_millis(30)), "minute {m}");
        }
        h.update(at_minute(10, 0), Micros::from_millis(40));
        assert_eq!(h.base(), Some(Micros::from_millis(40)));
        h.update(at_minute(12, 0), Micros::from_millis(25));
        assert_eq!(h.base(), Some(Micros::from_millis(25)));
    }

    #[test]
    fn idle_minutes_count_as_one_rollover() {
        let mut h = BaseDelayHistory::new(2);
        h.update(at_minute(0, 0), Micros(10));
        h.update(at_minute(50, 0), Micros(20));
        // Two buckets kept: minute 0 is still one of them despite 50 idle minutes.
        assert_eq!(h.base(), Some(Micros(10)));
        h.update(at_minute(51, 0), Micros(30));
        assert_eq!(h.base(), Some(Micros(20)));
    }

    proptest! {
        /// The base is the minimum of the samples of the last `len` distinct minutes seen.
        #[test]
        fn equals_brute_force(
            len in 1usize..14,
            steps in proptest::collection::vec((0u64..3, 0u64..90_000_000, 1u64..500_000), 1..80),
        ) {
            let mut h = BaseDelayHistory::new(len);
            let mut t = 0u64;
            let mut origin = None;
            let mut seen: Vec<(u64, u64)> = Vec::new();
            for (jump_minutes, dt, rtt) in steps {
                t += jump_minutes * BASE_BUCKET.0 + dt;
                h.update(Micros(t), Micros(rtt));
                let origin = *origin.get_or_insert(t);
                seen.push(((t - origin) / BASE_BUCKET.0, rtt));
                let mut minutes: Vec<u64> = seen.iter().map(|&(m, _)| m).collect();
                minutes.dedup();
                let keep = &minutes[minutes.len().saturating_sub(len)..];
                let want = seen.iter().filter(|(m, _)| keep.contains(m)).map(|&(_, r)| r).min();
                prop_assert_eq!(h.base(), want.map(Micros));
            }
        }
    }
}
