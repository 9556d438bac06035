//! How late the shared eBPF datapath read the flows' ACKs. Its daemon and the agent run at
//! normal priority beside the emulators (real-time) and the endpoints; on a saturated
//! machine the daemon reads ACKs hundreds of milliseconds late, and once it has not
//! refreshed its heartbeat for 200 ms the kernel runs every flow on the Reno fallback. The
//! emulator stays on time through all of it, so its lateness cannot show this.

use std::path::Path;
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

/// The daemon's ACK counters (`ccp-ebpf status`), or their growth over a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AckLag {
    /// ACKs of `ccp:` flows the daemon read.
    pub acks: u64,
    /// Of those, ACKs it read over 10 ms after the kernel wrote them.
    pub late_acks: u64,
}

impl AckLag {
    /// The counters of the datapath running from `ccp_bin`, if one answers.
    pub fn read(ccp_bin: &Path) -> Option<Self> {
        let out = Command::new(ccp_bin.join("ccp-ebpf"))
            .arg("status")
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| Self::parse(&String::from_utf8_lossy(&out.stdout)))
            .flatten()
    }

    /// Reads the counters from the status text (`... acks N ... late_acks N ...`).
    fn parse(status: &str) -> Option<Self> {
        let line = status.lines().find(|l| l.starts_with("events "))?;
        let words: Vec<&str> = line.split_whitespace().collect();
        let counter = |name: &str| {
            words
                .windows(2)
                .find(|w| w[0] == name)
                .and_then(|w| w[1].parse().ok())
        };
        Some(AckLag {
            acks: counter("acks")?,
            late_acks: counter("late_acks")?,
        })
    }

    /// The growth since `earlier`; none if the counters went back (another daemon).
    pub fn since(self, earlier: AckLag) -> Option<AckLag> {
        Some(AckLag {
            acks: self.acks.checked_sub(earlier.acks)?,
            late_acks: self.late_acks.checked_sub(earlier.late_acks)?,
        })
    }

    /// The share of the ACKs read late.
    pub fn late_share(self) -> Option<f64> {
        (self.acks > 0).then(|| self.late_acks as f64 / self.acks as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counters_are_read_from_the_status_and_compared_over_a_run() {
        let status = "running\npid 7\nagent /tmp/ccp/a alive\nagent_echoes_sync true\n\
            events 2000 acks 1990 fallback_acks 40 fallback_acks_decided 12 late_acks 210 \
            max_ack_age_us 459032 invoke_errors 0 ring_dropped 0\nshard 0 flows 2 acks 5\n";
        let end = AckLag::parse(status).expect("counters");
        assert_eq!(
            end,
            AckLag {
                acks: 1990,
                late_acks: 210
            }
        );
        let start = AckLag {
            acks: 990,
            late_acks: 10,
        };
        let run = end.since(start).expect("growth");
        assert_eq!(run.late_share(), Some(0.2));
        // A daemon that restarted between the two readings has no growth to give.
        assert_eq!(start.since(end), None);
        assert_eq!(AckLag::default().late_share(), None);
        // A datapath too old to count late ACKs, or none at all.
        assert_eq!(
            AckLag::parse("running\nevents 5 acks 5 ring_dropped 0\n"),
            None
        );
        assert_eq!(AckLag::parse("not running\n"), None);
    }
}
