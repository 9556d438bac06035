//! A time-windowed minimum: the smallest sample seen within the last `window` of time,
//! kept as a monotone deque so each update is amortised O(1).

use crate::units::Micros;
use std::collections::VecDeque;

/// The minimum of the samples taken within the last `window` microseconds.
#[derive(Debug, Clone)]
pub struct WindowedMin {
    window: Micros,
    /// (time, value), values strictly increasing from front to back.
    samples: VecDeque<(Micros, u64)>,
}

impl WindowedMin {
    pub fn new(window: Micros) -> Self {
        WindowedMin {
            window,
            samples: VecDeque::new(),
        }
    }

    /// Adds a sample taken at `now`; returns the minimum over the window ending at `now`.
    pub fn update(&mut self, now: Micros, value: u64) -> u64 {
        while self.samples.back().is_some_and(|&(_, v)| v >= value) {
            self.samples.pop_back();
        }
        self.samples.push_back((now, value));
        self.expire(now);
        self.samples.front().map_or(value, |&(_, v)| v)
    }

    /// The current minimum, if any sample is still inside the window at `now`.
    pub fn get(&mut self, now: Micros) -> Option<u64> {
        self.expire(now);
        self.samples.front().map(|&(_, v)| v)
    }

    fn expire(&mut self, now: Micros) {
        // Keep the newest sample even if it is older than the window: a stale minimum is
        // better than none for a flow that went idle.
        while self.samples.len() > 1
            && self
                .samples
                .front()
                .is_some_and(|&(t, _)| now.since(t) > self.window)
        {
            self.samples.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn old_minimum_expires() {
        let mut f = WindowedMin::new(Micros(10));
        assert_eq!(f.update(Micros(0), 5), 5);
        assert_eq!(f.update(Micros(5), 9), 5);
        assert_eq!(f.update(Micros(11), 8), 8);
        assert_eq!(f.get(Micros(30)), Some(8));
    }

    proptest! {
        #[test]
        fn equals_brute_force(samples in proptest::collection::vec((0u64..5, 0u64..100), 1..60)) {
            let window = Micros(7);
            let mut f = WindowedMin::new(window);
            let mut t = 0u64;
            let mut seen: Vec<(u64, u64)> = Vec::new();
            for (dt, v) in samples {
                t += dt;
                seen.push((t, v));
                let got = f.update(Micros(t), v);
                let want = seen.iter().filter(|&&(st, _)| t - st <= window.0).map(|&(_, v)| v).min().expect("non-empty");
                prop_assert_eq!(got, want);
            }
        }
    }
}
