//! Mahimahi packet-delivery traces (docs/mahimahi.md §2).
//!
//! A trace is a list of millisecond timestamps; each line is one delivery opportunity of
//! [`OPPORTUNITY_BYTES`]. The list repeats with a period equal to its last timestamp, so
//! `N` lines of `1` give `N x 12` Mbit/s.

use std::path::Path;

/// The largest IP packet a link carries (the TUN devices' MTU), bytes.
pub const IP_PACKET_BYTES: u64 = 1500;

/// The header the TUN devices put before each packet (flags and protocol), bytes.
pub const TUN_HEADER_BYTES: u64 = 4;

/// Bytes one delivery opportunity carries: a 1500-byte IP packet plus the 4-byte TUN header
/// (docs/mahimahi.md §2).
pub const OPPORTUNITY_BYTES: u64 = IP_PACKET_BYTES + TUN_HEADER_BYTES;

/// Microseconds in a millisecond (trace and log timestamps are in ms, the emulator in µs).
pub const MICROS_PER_MILLI: u64 = 1000;

/// Why a trace was refused.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("reading trace {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("trace line {line}: {text:?} is not a millisecond timestamp")]
    BadLine { line: usize, text: String },
    #[error("trace line {line}: timestamp {ts} is smaller than the one before")]
    NotSorted { line: usize, ts: u64 },
    #[error("trace is empty")]
    Empty,
    #[error("trace's last timestamp is 0: it would repeat with a zero period")]
    ZeroPeriod,
}

/// A parsed trace: sorted opportunity timestamps in ms, repeating with period `last`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    /// Opportunity timestamps within one period, ms, non-decreasing.
    stamps_ms: Vec<u64>,
}

impl Trace {
    /// Parses trace text (one integer per line; blank lines are ignored).
    pub fn parse(text: &str) -> Result<Self, TraceError> {
        let mut stamps_ms = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let t = raw.trim();
            if t.is_empty() {
                continue;
            }
            let ts: u64 = t.parse().map_err(|_| TraceError::BadLine {
                line: i + 1,
                text: t.to_string(),
            })?;
            if stamps_ms.last().is_some_and(|&prev| ts < prev) {
                return Err(TraceError::NotSorted { line: i + 1, ts });
            }
            stamps_ms.push(ts);
        }
        Self::from_stamps(stamps_ms)
    }

    /// Reads and parses a trace file.
    pub fn load(path: &Path) -> Result<Self, TraceError> {
        let text = std::fs::read_to_string(path).map_err(|source| TraceError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text)
    }

    fn from_stamps(stamps_ms: Vec<u64>) -> Result<Self, TraceError> {
        match stamps_ms.last() {
            None => Err(TraceError::Empty),
            Some(0) => Err(TraceError::ZeroPeriod),
            Some(_) => Ok(Self { stamps_ms }),
        }
    }

    /// A constant-rate trace of `mbps` Mbit/s (10^6 bit/s), exact over one period.
    ///
    /// Each opportunity is 1504 bytes = 12.032 kbit, so 12 Mbit/s (Mahimahi's convention, which
    /// treats 1504 bytes as "12 kbit") is one line per ms. The period is the shortest whole
    /// number of ms in which `mbps / 12` opportunities per ms come out whole, capped at 1000 ms
    /// (then the rate is exact to 1 opportunity per second).
    pub fn constant(mbps: f64) -> Result<Self, TraceError> {
        let per_ms = mbps / 12.0;
        if !per_ms.is_finite() || per_ms <= 0.0 {
            return Err(TraceError::Empty);
        }
        let mut period = 1u64;
        while period < 1000 {
            let n = per_ms * period as f64;
            if (n - n.round()).abs() < 1e-9 {
                break;
            }
            period += 1;
        }
        let total = (per_ms * period as f64).round() as u64;
        if total == 0 {
            return Err(TraceError::Empty);
        }
        // Spread `total` opportunities evenly over ms 1..=period.
        let stamps_ms = (0..total)
            .map(|k| (k + 1) * period / total)
            .map(|ms| ms.max(1))
            .collect();
        Self::from_stamps(stamps_ms)
    }

    /// The trace as file text (one timestamp per line).
    pub fn to_text(&self) -> String {
        let mut s = String::with_capacity(self.stamps_ms.len() * 4);
        for t in &self.stamps_ms {
            s.push_str(&t.to_string());
            s.push('\n');
        }
        s
    }

    /// Repetition period, ms.
    pub fn period_ms(&self) -> u64 {
        // from_stamps refuses an empty trace, so last() exists.
        self.stamps_ms.last().copied().unwrap_or(1)
    }

    /// Number of opportunities per period.
    pub fn len(&self) -> usize {
        self.stamps_ms.len()
    }

    /// Always false: an empty trace is refused at parse time.
    pub fn is_empty(&self) -> bool {
        self.stamps_ms.is_empty()
    }

    /// Time of the `k`-th opportunity (0-based, counting across periods), ms after link start.
    pub fn opportunity_ms(&self, k: u64) -> u64 {
        let n = self.stamps_ms.len() as u64;
        (k / n) * self.period_ms() + self.stamps_ms[(k % n) as usize]
    }

    /// Index of the first opportunity at or after `t_ms`.
    pub fn first_at_or_after(&self, t_ms: u64) -> u64 {
        let n = self.stamps_ms.len() as u64;
        let period = self.period_ms();
        // Stamps equal to the period end one cycle where the next begins: start a cycle
        // early and walk forward (at most two periods of lines).
        let mut k = (t_ms / period).saturating_sub(1) * n;
        while self.opportunity_ms(k) < t_ms {
            k += 1;
        }
        k
    }
}

/// Where each opportunity falls inside its millisecond when a link spreads a millisecond's
/// opportunities evenly over it (the j-th of n at j/n ms), µs. A millisecond's group can
/// straddle two periods, so the first period, whose group has no earlier part, has offsets of
/// its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpreadOffsets {
    first: Vec<u64>,
    later: Vec<u64>,
}

impl SpreadOffsets {
    /// The offsets of `trace`'s opportunities.
    pub fn of(trace: &Trace) -> Self {
        let n = trace.len() as u64;
        // Three periods: every group that touches the second lies wholly inside them.
        let ms: Vec<u64> = (0..3 * n).map(|k| trace.opportunity_ms(k)).collect();
        let mut offsets = vec![0; ms.len()];
        let mut start = 0;
        while start < ms.len() {
            let end = start + ms[start..].iter().take_while(|&&m| m == ms[start]).count();
            let count = (end - start) as u64;
            for (rank, offset) in offsets[start..end].iter_mut().enumerate() {
                *offset = rank as u64 * MICROS_PER_MILLI / count;
            }
            start = end;
        }
        let n = n as usize;
        Self {
            first: offsets[..n].to_vec(),
            later: offsets[n..2 * n].to_vec(),
        }
    }

    /// Offset of the `k`-th opportunity (0-based, counting across periods), µs.
    pub fn at(&self, k: u64) -> u64 {
        let n = self.later.len() as u64;
        if k < n {
            self.first[k as usize]
        } else {
            self.later[(k % n) as usize]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_lines_of_one_is_48_mbps_mahimahi_style() {
        let t = Trace::parse("1\n1\n1\n1\n").expect("valid");
        assert_eq!(t.period_ms(), 1);
        assert_eq!(t.opportunity_ms(0), 1);
        assert_eq!(t.opportunity_ms(3), 1);
        assert_eq!(t.opportunity_ms(4), 2);
        assert_eq!(Trace::constant(48.0).expect("valid"), t);
    }

    #[test]
    fn constant_traces_have_the_requested_opportunity_count() {
        for (mbps, per_second) in [(12.0, 1000), (24.0, 2000), (50.0, 4167), (192.0, 16000)] {
            let t = Trace::constant(mbps).expect("valid");
            let per_period = t.len() as f64;
            let got = per_period * 1000.0 / t.period_ms() as f64;
            assert!(
                (got - per_second as f64).abs() <= 1.0,
                "{mbps} Mbps: {got} opportunities/s"
            );
        }
        // 50 Mbps = 25/6 per ms: exact with a 6 ms period.
        assert_eq!(Trace::constant(50.0).expect("valid").period_ms(), 6);
    }

    #[test]
    fn refuses_bad_traces() {
        assert!(matches!(Trace::parse(""), Err(TraceError::Empty)));
        assert!(matches!(
            Trace::parse("0\n0\n"),
            Err(TraceError::ZeroPeriod)
        ));
        assert!(matches!(
            Trace::parse("3\n2\n"),
            Err(TraceError::NotSorted { line: 2, ts: 2 })
        ));
        assert!(matches!(
            Trace::parse("1\nx\n"),
            Err(TraceError::BadLine { line: 2, .. })
        ));
    }

    #[test]
    fn first_at_or_after_finds_the_next_opportunity() {
        let t = Trace::parse("2\n5\n5\n10\n").expect("valid");
        assert_eq!(t.first_at_or_after(0), 0);
        assert_eq!(t.first_at_or_after(3), 1);
        assert_eq!(t.first_at_or_after(5), 1);
        assert_eq!(t.first_at_or_after(6), 3);
        assert_eq!(t.first_at_or_after(10), 3);
        assert_eq!(t.first_at_or_after(11), 4);
        assert_eq!(t.opportunity_ms(4), 12);
        assert_eq!(
            t.first_at_or_after(100_000),
            39_999,
            "the line at 10 ends cycle 9999"
        );
    }

    #[test]
    fn spread_offsets_divide_each_millisecond_evenly() {
        // 50 Mbit/s: 25 opportunities in 6 ms, four or five a millisecond.
        let t = Trace::constant(50.0).expect("valid");
        let o = SpreadOffsets::of(&t);
        for k in 0..100u64 {
            let ms = t.opportunity_ms(k);
            let same: Vec<u64> = (0..200u64).filter(|&j| t.opportunity_ms(j) == ms).collect();
            let rank = same
                .iter()
                .position(|&j| j == k)
                .expect("k is in its own group") as u64;
            assert_eq!(o.at(k), rank * 1000 / same.len() as u64, "opportunity {k}");
        }
        // A group that straddles two periods: stamps 0, 5, 5 repeat every 5 ms, so ms 5 has
        // the two lines of the first period and the 0 of the second, ms 10 likewise.
        let t = Trace::parse("0\n5\n5\n").expect("valid");
        let o = SpreadOffsets::of(&t);
        assert_eq!((o.at(0), o.at(1), o.at(2), o.at(3)), (0, 0, 333, 666));
        assert_eq!((o.at(4), o.at(5), o.at(6)), (0, 333, 666));
    }
}
