//! The priority an application gives its connection, and its PRIORITY message (docs/wire.md).

use algs_core::BytesPerSec;
use ccp_wire::{PriorityClass, PriorityMsg};

/// A connection's priority, as an application asks for it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Priority {
    /// Competes for its fair share.
    Primary,
    /// Uses spare capacity only and yields to primary traffic.
    Scavenger,
    /// Primary below `threshold_mbps` (Mbit/s), scavenger above it (Proteus-H);
    /// `None` keeps the threshold the agent's policy gives.
    Hybrid { threshold_mbps: Option<f64> },
}

impl Priority {
    /// The PRIORITY message for libccp's `sid`; the threshold travels in bytes/s.
    pub fn message(self, sid: u32) -> PriorityMsg {
        let (class, threshold) = match self {
            Priority::Primary => (PriorityClass::Primary, 0),
            Priority::Scavenger => (PriorityClass::Scavenger, 0),
            Priority::Hybrid { threshold_mbps } => (
                PriorityClass::Hybrid,
                threshold_mbps.map_or(0, |t| BytesPerSec::from_mbps(t).to_wire_threshold()),
            ),
        };
        PriorityMsg {
            sid,
            class,
            flags: 0,
            hybrid_threshold_bytes_per_sec: threshold,
        }
    }
}

impl std::str::FromStr for Priority {
    type Err = String;

    /// `primary`, `scavenger`, `hybrid` or `hybrid=MBPS`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once('=') {
            None if s == "primary" => Ok(Priority::Primary),
            None if s == "scavenger" => Ok(Priority::Scavenger),
            None if s == "hybrid" => Ok(Priority::Hybrid {
                threshold_mbps: None,
            }),
            Some(("hybrid", mbps)) => match mbps.parse::<f64>() {
                Ok(t) if t.is_finite() && t > 0.0 => Ok(Priority::Hybrid {
                    threshold_mbps: Some(t),
                }),
                _ => Err(format!("hybrid threshold {mbps:?}: want Mbit/s above 0")),
            },
            _ => Err(format!(
                "priority {s:?}: want primary, scavenger, hybrid or hybrid=MBPS"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hybrid_threshold_travels_in_bytes_per_second() {
        let m = Priority::Hybrid {
            threshold_mbps: Some(20.0),
        }
        .message(7);
        assert_eq!(m.sid, 7);
        assert_eq!(m.class, PriorityClass::Hybrid);
        assert_eq!(m.hybrid_threshold_bytes_per_sec, 2_500_000);
        assert_eq!(
            Priority::Scavenger
                .message(1)
                .hybrid_threshold_bytes_per_sec,
            0
        );
    }

    #[test]
    fn priorities_parse_from_their_names() {
        assert_eq!("scavenger".parse(), Ok(Priority::Scavenger));
        assert_eq!(
            "hybrid=12.5".parse(),
            Ok(Priority::Hybrid {
                threshold_mbps: Some(12.5)
            })
        );
        assert!("hybrid=0".parse::<Priority>().is_err());
        assert!("bulk".parse::<Priority>().is_err());
    }
}
