//! The whole machine's CPU time counters (`/proc/stat`): how much of it was free for another
//! run, and how much the hypervisor took. On a VM whose host is busy, the emulator, the
//! datapath's daemon and the endpoints all wait for CPUs they were promised, and a run's
//! numbers move with that wait (BBR's ratio beside Proteus-P moved by more between a late
//! sitting and an on-time one than under any change of the algorithm): a run's summary keeps
//! the share taken, so that a reader can tell a slow host from a slow algorithm.

use super::metrics::percentile;

/// The median share of the runs' CPU time taken by the hypervisor above which `ccp-exp run`
/// says so (and does not repeat a late run: `runner`). The test suite's quick subsets once
/// ran with 7-25 % taken (median 18 %) and delivered 3-11 % of their packets over 1 ms late,
/// on a VM whose runs deliver 0.05-0.3 % late on quieter days.
pub const NOTABLE_STEAL_SHARE: f64 = 0.05;

/// What to tell the user when the hypervisor took a notable share of the runs' CPU time
/// (`shares`, one per run); none otherwise.
pub fn steal_notice(shares: &[f64]) -> Option<String> {
    let median = percentile(shares, 50.0).filter(|&m| m >= NOTABLE_STEAL_SHARE)?;
    let most = percentile(shares, 100.0)?;
    Some(format!(
        "the hypervisor took {:.0} % of this machine's CPU time during the median run \
         (up to {:.0} %; `steal_share` in the summary): runs fall behind real time on such \
         a host, and what they measure moves with it; compare sittings with care",
        median * 100.0,
        most * 100.0
    ))
}

/// CPU time counters summed over the machine's CPUs, in ticks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTimes {
    /// Time a run's normal-priority processes could have had: idle, waiting for I/O, and
    /// niced work (which they preempt).
    pub idle: u64,
    /// Time the hypervisor ran something else while this machine had work ("steal").
    pub steal: u64,
    /// All of it: user, nice, system, idle, iowait, irq, softirq and steal (the guest
    /// columns after them are already counted in user and nice).
    pub total: u64,
}

impl CpuTimes {
    /// The counters now; none where `/proc/stat` cannot be read.
    pub fn read() -> Option<Self> {
        Self::parse(&std::fs::read_to_string("/proc/stat").ok()?)
    }

    /// From the text of `/proc/stat` (its first line: `cpu  user nice system idle ...`).
    fn parse(text: &str) -> Option<Self> {
        let mut words = text.lines().next()?.split_whitespace();
        if words.next()? != "cpu" {
            return None;
        }
        let fields: Vec<u64> = words.map_while(|f| f.parse().ok()).collect();
        // Kernels before 2.6.11 have no steal column: they were never guests that knew.
        let at = |i: usize| fields.get(i).copied();
        Some(CpuTimes {
            idle: at(1)? + at(3)? + at(4).unwrap_or(0),
            steal: at(7).unwrap_or(0),
            total: fields.iter().take(8).sum(),
        })
    }

    /// The share of the CPU time since `earlier` that was free (`idle`); none if no time
    /// passed or the counters went back.
    pub fn idle_share_since(self, earlier: CpuTimes) -> Option<f64> {
        share(self.idle.checked_sub(earlier.idle)?, self, earlier)
    }

    /// The share of the CPU time since `earlier` that the hypervisor took (`steal`).
    pub fn steal_share_since(self, earlier: CpuTimes) -> Option<f64> {
        share(self.steal.checked_sub(earlier.steal)?, self, earlier)
    }
}

/// Runs `work`; returns what it returned and the share of the CPU time the hypervisor took
/// meanwhile (none where `/proc/stat` cannot be read).
pub fn with_steal_share<T>(work: impl FnOnce() -> T) -> (T, Option<f64>) {
    let before = CpuTimes::read();
    let out = work();
    let share = CpuTimes::read()
        .zip(before)
        .and_then(|(now, before)| now.steal_share_since(before));
    (out, share)
}

fn share(part: u64, now: CpuTimes, earlier: CpuTimes) -> Option<f64> {
    let total = now.total.checked_sub(earlier.total)?;
    (total > 0).then(|| part as f64 / total as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    // The first lines of /proc/stat of a 2-core VM five seconds apart.
    const BEFORE: &str = "cpu  3486277 0 1441222 5569806 18707 0 223992 338583 0 0\n\
                          cpu0 1743138 0 720611 2784903 9353 0 111996 169291 0 0\n";
    const AFTER: &str = "cpu  3486767 0 1441232 5570301 18708 0 223992 338592 0 0\n";

    #[test]
    fn reads_the_machine_line() {
        let t = CpuTimes::parse(BEFORE).expect("parses");
        assert_eq!(t.idle, 5569806 + 18707);
        assert_eq!(t.steal, 338583);
        assert_eq!(
            t.total,
            3486277 + 1441222 + 5569806 + 18707 + 223992 + 338583
        );
    }

    #[test]
    fn shares_over_an_interval() {
        let (a, b) = (
            CpuTimes::parse(BEFORE).expect("parses"),
            CpuTimes::parse(AFTER).expect("parses"),
        );
        // 490 + 10 + 495 + 1 + 9 = 1005 ticks: two cores for about five seconds.
        assert_eq!(b.total - a.total, 1005);
        assert_eq!(b.steal_share_since(a), Some(9.0 / 1005.0));
        assert_eq!(b.idle_share_since(a), Some(496.0 / 1005.0));
        // Counters that went back (another boot) and no time passed say nothing.
        assert_eq!(a.steal_share_since(b), None);
        assert_eq!(a.idle_share_since(a), None);
    }

    #[test]
    fn a_notable_steal_is_told_with_its_median_and_its_most() {
        assert_eq!(steal_notice(&[]), None);
        assert_eq!(steal_notice(&[0.01, 0.02, 0.30]), None);
        let told = steal_notice(&[0.15, 0.24, 0.19, 0.02]).expect("notable");
        assert!(told.contains("took 15 %"), "{told}");
        assert!(told.contains("up to 24 %"), "{told}");
    }

    #[test]
    fn refuses_what_is_not_the_machine_line() {
        assert_eq!(CpuTimes::parse("cpu0 1 2 3 4\n"), None);
        assert_eq!(CpuTimes::parse("intr 1 2 3\n"), None);
        assert_eq!(CpuTimes::parse("cpu  1 2\n"), None);
        assert_eq!(CpuTimes::parse(""), None);
        // An old kernel without the steal column: nothing stolen.
        let old = CpuTimes::parse("cpu  10 0 5 80 5\n").expect("parses");
        assert_eq!((old.steal, old.total), (0, 100));
    }
}
