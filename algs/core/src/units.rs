//! Units used inside the controllers. Raw integers at the datapath boundary carry their unit in
//! their name instead (`rtt_us`, `acked_bytes`).

use serde::Serialize;
use std::ops::{Add, Sub};

/// Bits in a byte, for rate conversions.
pub const BITS_PER_BYTE: f64 = 8.0;
/// Bits per second in one Mbit/s (10^6-based, as docs/algorithms/proteus.md §1.4 recommends).
pub const BITS_PER_SEC_PER_MBPS: f64 = 1e6;
/// Microseconds in one second.
pub const MICROS_PER_SEC: u64 = 1_000_000;

/// A count of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize)]
pub struct Bytes(pub u64);

/// A point in datapath time or a duration, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize)]
pub struct Micros(pub u64);

/// A rate in bytes per second.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default, Serialize)]
pub struct BytesPerSec(pub f64);

impl Micros {
    pub const ZERO: Micros = Micros(0);

    pub fn from_millis(ms: u64) -> Self {
        Micros(ms.saturating_mul(1_000))
    }

    pub fn from_secs_f64(s: f64) -> Self {
        Micros((s * MICROS_PER_SEC as f64).max(0.0) as u64)
    }

    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / MICROS_PER_SEC as f64
    }

    /// `self - earlier`, or zero if `earlier` is later (clocks of a datapath never run
    /// backwards, but a restarted one starts again at zero).
    pub fn since(self, earlier: Micros) -> Micros {
        Micros(self.0.saturating_sub(earlier.0))
    }
}

impl Add for Micros {
    type Output = Micros;
    fn add(self, rhs: Micros) -> Micros {
        Micros(self.0.saturating_add(rhs.0))
    }
}

impl Sub for Micros {
    type Output = Micros;
    fn sub(self, rhs: Micros) -> Micros {
        self.since(rhs)
    }
}

impl Bytes {
    pub fn as_f64(self) -> f64 {
        self.0 as f64
    }
}

impl Add for Bytes {
    type Output = Bytes;
    fn add(self, rhs: Bytes) -> Bytes {
        Bytes(self.0.saturating_add(rhs.0))
    }
}

impl BytesPerSec {
    pub fn from_mbps(mbps: f64) -> Self {
        BytesPerSec(mbps * BITS_PER_SEC_PER_MBPS / BITS_PER_BYTE)
    }

    pub fn from_bits_per_sec(bps: f64) -> Self {
        BytesPerSec(bps / BITS_PER_BYTE)
    }

    /// Mbit/s, 10^6-based.
    pub fn as_mbps(self) -> f64 {
        self.0 * BITS_PER_BYTE / BITS_PER_SEC_PER_MBPS
    }

    pub fn as_bits_per_sec(self) -> f64 {
        self.0 * BITS_PER_BYTE
    }

    /// Bytes sent at this rate during `d`.
    pub fn bytes_in(self, d: Micros) -> f64 {
        self.0 * d.as_secs_f64()
    }

    /// The rate that moves `bytes` in `d`; `None` for an empty interval.
    pub fn over(bytes: Bytes, d: Micros) -> Option<Self> {
        (d.0 > 0).then(|| BytesPerSec(bytes.as_f64() / d.as_secs_f64()))
    }

    /// The value a datapath's u32 `Rate` register can hold (libccp's `set_rate_abs` takes a
    /// u32 of bytes/s, about 34 Gbit/s at most; docs/datapaths.md §4.3).
    pub fn to_rate_register(self) -> u32 {
        if self.0.is_finite() && self.0 > 0.0 {
            self.0.min(u32::MAX as f64) as u32
        } else {
            0
        }
    }

    /// The u64 of bytes/s a PRIORITY message carries as its hybrid threshold (docs/wire.md),
    /// rounded; anything not positive is 0, "the agent's default".
    pub fn to_wire_threshold(self) -> u64 {
        if self.0 > 0.0 {
            self.0.round() as u64
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_threshold_is_rounded_bytes_per_sec_and_never_negative() {
        assert_eq!(BytesPerSec::from_mbps(10.0).to_wire_threshold(), 1_250_000);
        assert_eq!(BytesPerSec(0.6).to_wire_threshold(), 1);
        assert_eq!(BytesPerSec(-5.0).to_wire_threshold(), 0);
        assert_eq!(BytesPerSec(f64::NAN).to_wire_threshold(), 0);
    }

    #[test]
    fn mbps_round_trip() {
        let r = BytesPerSec::from_mbps(48.0);
        assert_eq!(r.0, 6_000_000.0);
        assert!((r.as_mbps() - 48.0).abs() < 1e-12);
    }

    #[test]
    fn rate_register_saturates_and_refuses_nonsense() {
        assert_eq!(BytesPerSec(1e12).to_rate_register(), u32::MAX);
        assert_eq!(BytesPerSec(f64::NAN).to_rate_register(), 0);
        assert_eq!(BytesPerSec(-5.0).to_rate_register(), 0);
        assert_eq!(BytesPerSec(1500.7).to_rate_register(), 1500);
    }

    #[test]
    fn time_never_goes_negative() {
        assert_eq!(Micros(5).since(Micros(9)), Micros(0));
        assert_eq!(Micros(u64::MAX) + Micros(1), Micros(u64::MAX));
    }
}
