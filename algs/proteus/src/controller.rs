//! The per-flow Proteus controller: MI reports in, schedules out (docs/algorithms/proteus.md §2,
//! §3, §4). Pure: no clock (time comes from the reports), no I/O, a seeded generator for
//! the probing order.

use crate::datapath::{MAX_SCHEDULE, MI_EPOCH_STRIDE};
use crate::monitor_interval::{InvalidMi, MiMeasurement, MiReport, ReportKind, RttStats};
use crate::params::{
    CWND_RATE_RTT_GAIN, Config, INITIAL_RATE_BPS, INITIAL_RATE_RTT_US, MIN_CWND_SEGMENTS, SRTT_GAIN,
};
use crate::rate_control::{Direction, Mode, Outcome, RateControl, Scored};
use crate::tolerance::{self, NoiseFilter};
use crate::utility::{UtilityFn, UtilityInputs};
use algs_core::metrics::FlowMetrics;
use algs_core::units::BITS_PER_BYTE;
use algs_core::{Bytes, BytesPerSec, CarriedState, Micros, Priority};

/// Epochs wrap below this, so `epoch · 8` fits the u32 control register.
const EPOCH_MODULUS: u32 = 1 << 28;

/// What the datapath must run next.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    /// Identifies this schedule's reports.
    pub epoch: u32,
    /// Rate of each MI, in order.
    pub rates: Vec<BytesPerSec>,
    /// Rate after the last MI, until the next schedule.
    pub hold: BytesPerSec,
    /// Shortest MI (1 × min RTT, §2.2).
    pub mi_duration: Micros,
    /// Window: a safety net that never limits the paced sender.
    pub cwnd: Bytes,
}

/// The flow's state for the trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Snapshot {
    pub state: &'static str,
    pub rate: BytesPerSec,
    pub cwnd: Bytes,
    /// The last evaluated MI: rate x (Mbit/s), utility, raw gradient and deviation (µs).
    pub last_mi: Option<LastMi>,
    pub rounds: u32,
    pub k: u32,
    pub min_rtt: Option<Micros>,
    /// A batch was discarded because an MI could not be evaluated.
    pub discarded_batches: u64,
    /// A scavenger's batch ended early on a swamped MI over a queue
    /// (`RateControl::on_swamped_mi`).
    pub swamped_retreats: u64,
}

/// The last evaluated MI, for the trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LastMi {
    pub x_mbps: f64,
    pub utility: f64,
    pub gradient: f64,
    pub rtt_dev_us: f64,
    /// Loss rate, fraction of the MI's resolved packets.
    pub loss: f64,
    /// RTT samples and their mean, µs.
    pub samples: u64,
    pub rtt_mean_us: f64,
    /// The noise-tolerance rules that found something (§1.6).
    pub rules: tolerance::Rules,
}

/// SplitMix64: a small deterministic generator for the probing order (§2.4).
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_bool(&mut self) -> bool {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) & 1 == 1
    }
}

/// One flow's controller.
#[derive(Debug, Clone)]
pub struct Controller {
    cfg: Config,
    utility: UtilityFn,
    rate: RateControl<UtilityInputs>,
    filter: NoiseFilter,
    /// The schedule in force.
    schedule: Schedule,
    /// Evaluated MIs of the batch in progress.
    pending: Vec<Scored<UtilityInputs>>,
    /// Packet size, bytes.
    mss: u64,
    /// Before the first report the rate is a guess (§2.3).
    initial: bool,
    /// Lifetime minimum RTT, µs (UDT never expires it; §2.2).
    min_rtt_us: Option<u64>,
    /// Smoothed mean RTT of the MIs, µs, for the window.
    srtt_us: Option<f64>,
    /// Datapath time of the last report.
    now: Micros,
    rng: SplitMix64,
    last_mi: Option<LastMi>,
    discarded_batches: u64,
    swamped_retreats: u64,
    /// The priority in force (for hybrid, with the threshold in force); `utility` is the
    /// function it selects.
    priority: Priority,
}

/// Not in UDT: whether an MI's RTT spread is the flow's own slowdown draining the queue,
/// so its RTT deviation is not penalised: the MI is a step of a move down (§2.6) and its
/// RTT falls by more than its own noise (the significance test of §1.6a, with the sign).
/// UDT penalises that spread like any other (§1.6a–c). On the eBPF datapath beside CUBIC
/// each step down then scored below the probe it was compared with, the reversal undid the
/// step (10 % down, 10 % up), and CUBIC kept 0.38 of its alone throughput. Probing MIs keep
/// UDT's rule for their own RTT slope: penalising a drain there is what makes scavengers
/// yield to each other and to Proteus-P on a clean path. (A falling six-MI trend is the
/// noise filter's to judge: `tolerance::NoiseFilter::evaluate`, §1.6b.)
fn own_drain(stats: &RttStats, error: f64, stepping_down: bool) -> bool {
    stepping_down && stats.gradient < -error
}

impl Controller {
    /// A new flow, starting at the initial rate (§2.3). `init_cwnd` is the window until the
    /// first RTT is known.
    pub fn new(cfg: Config, priority: Priority, mss: Bytes, init_cwnd: Bytes, seed: u64) -> Self {
        Controller::build(cfg, priority, mss, init_cwnd, seed, None)
    }

    /// A flow handed over from another algorithm: it starts probing at the carried rate (a
    /// window-based predecessor's window over its RTT), with the carried RTTs and time.
    pub fn start_from(
        cfg: Config,
        priority: Priority,
        mss: Bytes,
        init_cwnd: Bytes,
        seed: u64,
        carried: &CarriedState,
    ) -> Self {
        Controller::build(cfg, priority, mss, init_cwnd, seed, Some(carried))
    }

    /// The constructor of [`Controller::new`] and [`Controller::start_from`].
    fn build(
        cfg: Config,
        priority: Priority,
        mss: Bytes,
        init_cwnd: Bytes,
        seed: u64,
        carried: Option<&CarriedState>,
    ) -> Self {
        let utility = UtilityFn::of(priority);
        let mss = mss.0.max(1);
        // A window-based predecessor (CUBIC) carries no rate: its window over its RTT.
        let carried_rate = carried
            .and_then(|c| {
                c.rate.or_else(|| {
                    let rtt = c.srtt.or(c.min_rtt).filter(|r| r.0 > 0)?;
                    BytesPerSec::over(c.cwnd, rtt)
                })
            })
            .filter(|r| r.0 > 0.0);
        let rate = match carried_rate {
            Some(r) => RateControl::probing(r.as_bits_per_sec(), &utility),
            None => RateControl::new(INITIAL_RATE_BPS),
        };
        let mut c = Controller {
            rng: SplitMix64(cfg.rng_seed() ^ seed),
            cfg,
            utility,
            rate,
            filter: NoiseFilter::default(),
            schedule: Schedule {
                epoch: 0,
                rates: Vec::new(),
                hold: BytesPerSec(0.0),
                mi_duration: Micros::ZERO,
                cwnd: init_cwnd,
            },
            pending: Vec::new(),
            mss,
            initial: carried_rate.is_none(),
            min_rtt_us: carried.and_then(|c| c.min_rtt).map(|m| m.0),
            srtt_us: carried.and_then(|c| c.srtt).map(|s| s.0 as f64),
            now: carried.map_or(Micros::ZERO, |c| c.at),
            last_mi: None,
            discarded_batches: 0,
            swamped_retreats: 0,
            priority,
        };
        c.schedule = c.plan(0, init_cwnd);
        c
    }

    /// The schedule to install with the program.
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    pub fn utility(&self) -> UtilityFn {
        self.utility
    }

    /// Datapath time of the last report.
    pub fn now(&self) -> Micros {
        self.now
    }

    /// The priority in force (for hybrid, with the threshold in force).
    pub fn priority(&self) -> Priority {
        self.priority
    }

    /// One report of the datapath program. Returns a new schedule to write, if any.
    pub fn on_report(&mut self, report: &MiReport) -> Option<Schedule> {
        self.now = self.now.max(report.now);
        if let Some(rtt) = report.min_rtt_us {
            self.min_rtt_us = Some(self.min_rtt_us.map_or(rtt, |m| m.min(rtt)));
        }
        if report.kind == ReportKind::Idle {
            return Some(if report.epoch == self.schedule.epoch {
                // The batch's last report never arrived: run the batch again.
                self.discard_batch()
            } else {
                // Our last schedule never arrived: send it again (idempotent).
                self.schedule.clone()
            });
        }
        if report.epoch != self.schedule.epoch {
            return None; // from a schedule we aborted
        }
        if report.timeout {
            self.rate.on_timeout(&self.utility);
            return Some(self.reschedule());
        }
        if report.kind == ReportKind::Truncated {
            // The MI goes on; it is evaluated on the window its final report covers.
            return None;
        }
        let index = report.index as usize;
        if index != self.pending.len() || index >= self.schedule.rates.len() {
            // A report went missing: the batch cannot be matched to its rates.
            return Some(self.discard_batch());
        }
        if self.initial {
            // Everything before the first RTT sample is one non-useful MI; the first RTT
            // scales the initial rate (§2.3).
            self.initial = false;
            if let Some(rtt) = self.min_rtt_us.filter(|&r| r > 0) {
                self.rate
                    .scale_starting_rate(INITIAL_RATE_RTT_US / rtt as f64);
            }
            return Some(self.reschedule());
        }
        let target_bps = self.schedule.rates[index].as_bits_per_sec();
        let m = match MiMeasurement::new(report, target_bps, self.mss) {
            Ok(m) => m,
            Err(InvalidMi::NoRegression(_)) => return Some(self.discard_batch()),
        };
        let (rate_bps, loss) = (m.target_bps, m.loss);
        let min_rtt_us = self.min_rtt_us.map(|r| r as f64);
        let queued = self.evaluate(m, min_rtt_us);
        if queued && self.rate.on_swamped_mi(rate_bps, loss, &self.utility) {
            self.swamped_retreats += 1;
            return Some(self.reschedule());
        }
        if self.pending.len() < self.rate.batch_len() {
            return None;
        }
        self.rate
            .set_over_primary_queue(self.filter.over_lasting_queue(min_rtt_us));
        let batch = std::mem::take(&mut self.pending);
        let f = self.utility;
        if self.rate.on_batch(&batch, &f, f) == Outcome::Dropped {
            self.discarded_batches += 1;
        }
        Some(self.reschedule())
    }

    /// Noise tolerance and utility inputs of one MI (§1.1, §1.6), in report order. Returns
    /// whether the MI's mean RTT stood over a queue above `min_rtt_us`.
    fn evaluate(&mut self, m: MiMeasurement, min_rtt_us: Option<f64>) -> bool {
        let starting = matches!(self.rate.mode(), Mode::Starting { .. });
        let error = m.stats.error(self.cfg.gradient_error());
        let verdict = self.filter.evaluate(&m, error, starting, min_rtt_us);
        let stepping_down = matches!(
            self.rate.mode(),
            Mode::Moving {
                dir: Direction::Down,
                ..
            }
        );
        let inputs = UtilityInputs {
            x_mbps: m.x_mbps,
            gradient: verdict.gradient,
            loss: verdict.loss,
            rtt_dev_us: if own_drain(&m.stats, error, stepping_down) {
                0.0
            } else {
                verdict.rtt_dev_us
            },
            // A STARTING MI's loss is already cut to what stands out of its noise.
            resolved: if starting { 0 } else { m.resolved },
        };
        self.srtt_us = Some(match self.srtt_us {
            Some(s) => s + SRTT_GAIN * (m.stats.mean_us - s),
            None => m.stats.mean_us,
        });
        self.last_mi = Some(LastMi {
            x_mbps: m.x_mbps,
            utility: self.utility.utility(&inputs),
            gradient: m.stats.gradient,
            rtt_dev_us: m.stats.dev_us,
            loss: m.loss,
            samples: m.stats.n,
            rtt_mean_us: m.stats.mean_us,
            rules: verdict.rules,
        });
        self.pending.push(Scored {
            rate_bps: m.target_bps,
            mi: inputs,
        });
        verdict.queued
    }

    /// UDT discards the whole batch when one MI is invalid (§2.2) and runs it again.
    fn discard_batch(&mut self) -> Schedule {
        self.discarded_batches += 1;
        self.reschedule()
    }

    /// The application changed the flow's priority (§4). Returns a schedule when the batch
    /// in progress was aborted.
    pub fn on_priority_change(&mut self, priority: Priority) -> Option<Schedule> {
        self.priority = priority;
        let utility = UtilityFn::of(priority);
        if utility == self.utility {
            return None;
        }
        self.utility = utility;
        // Tolerance state, min RTT, the rate and the MOVING/STARTING reference (kept as raw
        // inputs, re-scored under the new function) all carry over.
        self.rate
            .on_utility_change(&utility)
            .then(|| self.reschedule())
    }

    fn reschedule(&mut self) -> Schedule {
        self.pending.clear();
        let epoch = (self.schedule.epoch + 1) % EPOCH_MODULUS;
        self.schedule = self.plan(epoch, self.schedule.cwnd);
        self.schedule.clone()
    }

    fn plan(&mut self, epoch: u32, fallback_cwnd: Bytes) -> Schedule {
        let rng = &mut self.rng;
        let (rates, hold) = self.rate.plan(|| rng.next_bool());
        debug_assert!(rates.len() <= MAX_SCHEDULE && (MAX_SCHEDULE as u32) <= MI_EPOCH_STRIDE);
        let top_bps = rates.iter().copied().fold(hold, f64::max);
        let cwnd = match self.srtt_us {
            Some(srtt) => {
                let bytes = CWND_RATE_RTT_GAIN * top_bps / BITS_PER_BYTE * srtt / 1e6;
                Bytes((bytes as u64).max(MIN_CWND_SEGMENTS * self.mss))
            }
            None => Bytes(fallback_cwnd.0.max(MIN_CWND_SEGMENTS * self.mss)),
        };
        Schedule {
            epoch,
            rates: rates
                .into_iter()
                .map(BytesPerSec::from_bits_per_sec)
                .collect(),
            hold: BytesPerSec::from_bits_per_sec(hold),
            mi_duration: Micros(self.min_rtt_us.unwrap_or(0)),
            cwnd,
        }
    }

    /// The state for the trace.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            state: match self.rate.mode() {
                Mode::Starting { .. } => "starting",
                Mode::Probing { .. } => "probing",
                Mode::Moving { .. } => "moving",
            },
            rate: BytesPerSec::from_bits_per_sec(self.rate.rate_bps()),
            cwnd: self.schedule.cwnd,
            last_mi: self.last_mi,
            rounds: self.rate.rounds(),
            k: self.rate.k(),
            min_rtt: self.min_rtt_us.map(Micros),
            discarded_batches: self.discarded_batches,
            swamped_retreats: self.swamped_retreats,
        }
    }

    /// The controller's state for the flow trace.
    pub fn metrics(&self) -> FlowMetrics {
        let snap = self.snapshot();
        let mut extra = vec![
            ("rounds", f64::from(snap.rounds)),
            ("boundary_k", f64::from(snap.k)),
            ("discarded_batches", snap.discarded_batches as f64),
            ("swamped_retreats", snap.swamped_retreats as f64),
        ];
        if let Some(m) = snap.min_rtt {
            extra.push(("min_rtt_us", m.0 as f64));
        }
        extra.push(("lasting_queue", self.filter.queue_persistence()));
        extra.push(("loss_memory_us", self.filter.loss_memory_us()));
        if let Some(mi) = snap.last_mi {
            extra.extend([
                ("mi_rate_mbps", mi.x_mbps),
                ("utility", mi.utility),
                ("rtt_gradient", mi.gradient),
                ("rtt_dev_us", mi.rtt_dev_us),
                ("rtt_mean_us", mi.rtt_mean_us),
                ("mi_loss", mi.loss),
                ("mi_samples", mi.samples as f64),
                ("significant", f64::from(u8::from(mi.rules.significant))),
                (
                    "trending_outlier",
                    f64::from(u8::from(mi.rules.trending_outlier)),
                ),
                (
                    "deviation_outlier",
                    f64::from(u8::from(mi.rules.deviation_outlier)),
                ),
            ]);
        }
        if let UtilityFn::Hybrid { threshold_mbps } = self.utility {
            extra.push(("hybrid_threshold_mbps", threshold_mbps));
        }
        FlowMetrics {
            priority: self.priority,
            cwnd_bytes: Some(snap.cwnd.0),
            rate_bytes_per_sec: Some(snap.rate.0),
            state: snap.state,
            extra,
        }
    }

    /// The state a flow hands over when it leaves Proteus.
    pub fn carried_state(&self) -> CarriedState {
        CarriedState {
            cwnd: self.schedule.cwnd,
            ssthresh: None,
            rate: Some(BytesPerSec::from_bits_per_sec(self.rate.rate_bps())),
            srtt: self.srtt_us.map(|s| Micros(s as u64)),
            min_rtt: self.min_rtt_us.map(Micros),
            at: self.now,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::monitor_interval::MiSums;
    use crate::params::{LOSS_MEMORY_US, MIN_RATE_BPS};
    use crate::utility::ProbingRule;
    use proptest::prelude::*;

    const MSS: u64 = 1448;

    fn controller(p: Priority) -> Controller {
        Controller::new(Config::default(), p, Bytes(MSS), Bytes(10 * MSS), 1)
    }

    /// A hybrid priority with its threshold in Mbit/s.
    fn hybrid(mbps: f64) -> Priority {
        Priority::Hybrid {
            threshold: Some(BytesPerSec::from_bits_per_sec(mbps * 1e6)),
        }
    }

    /// Sums of `n` samples, ~`spacing_us` apart in send time, RTTs `base + g·s + jitter`.
    fn sums(n: u64, spacing_us: u64, base_us: u64, g: f64, jitter_us: u64) -> MiSums {
        let mut m = MiSums::default();
        for i in 0..n {
            let s = (1 << 22) + i * spacing_us;
            let wobble = if i % 2 == 0 { jitter_us } else { 0 };
            let r = (base_us as f64 + g * (i * spacing_us) as f64) as u64 + wobble;
            m.n += 1;
            m.sum_s += s;
            m.sum_r += r;
            m.sum_ss += s * s;
            m.sum_sr += s * r;
            m.sum_rr += r * r;
        }
        m
    }

    /// A report for MI `index` of the current schedule: sent at its target rate for one
    /// 30 ms RTT, with RTT gradient `g`.
    fn report(c: &Controller, index: u32, g: f64, now: u64) -> MiReport {
        report_over(c, index, g, 30_000, now)
    }

    /// The same over a path whose RTTs start at `base_us` (30 ms is the flow's minimum).
    fn report_over(c: &Controller, index: u32, g: f64, base_us: u64, now: u64) -> MiReport {
        let rate = c.schedule().rates[index as usize];
        let pkts = (rate.0 * 0.03 / MSS as f64).ceil() as u64 + 1;
        MiReport {
            epoch: c.schedule().epoch,
            index,
            pkts_sent: pkts,
            tx_dur: Micros(30_000),
            acked: pkts,
            lost: 0,
            sums: sums(
                pkts.clamp(4, 64),
                30_000 / pkts.clamp(4, 64),
                base_us,
                g,
                50,
            ),
            min_rtt_us: Some(30_000),
            timeout: false,
            kind: ReportKind::Complete,
            now: Micros(now),
        }
    }

    /// Feeds the whole current schedule, each MI with gradient `g`.
    fn run_batch(c: &mut Controller, g: f64, now: &mut u64) -> Option<Schedule> {
        let len = c.schedule().rates.len() as u32;
        let mut out = None;
        for i in 0..len {
            *now += 30_000;
            out = c.on_report(&report(c, i, g, *now));
        }
        out
    }

    /// A scavenger that doubled through STARTING until an MI queued, and now probes; with
    /// the datapath time of its last report.
    fn probing_scavenger() -> (Controller, u64) {
        let mut c = controller(Priority::Scavenger);
        let mut now = 0;
        for g in [0.0, 0.0, 0.0, 0.0, 0.2] {
            run_batch(&mut c, g, &mut now);
        }
        (c, now)
    }

    #[test]
    fn first_report_scales_initial_rate_by_rtt() {
        let mut c = controller(Priority::Primary);
        assert_eq!(c.schedule().rates.len(), 1);
        assert_eq!(
            c.schedule().rates[0],
            BytesPerSec::from_bits_per_sec(1.12e6)
        );
        let s = c
            .on_report(&report(&c, 0, 0.0, 30_000))
            .expect("new schedule");
        // 1.12 Mbit/s × 100 ms / 30 ms.
        assert!((s.rates[0].as_bits_per_sec() - 3_733_333.3).abs() < 1.0);
        assert_eq!(s.epoch, 1);
        assert_eq!(s.mi_duration, Micros(30_000));
    }

    #[test]
    fn starting_doubles_then_probes_when_queue_builds() {
        let mut c = controller(Priority::Scavenger);
        let mut now = 0;
        run_batch(&mut c, 0.0, &mut now);
        let mut rates = Vec::new();
        for _ in 0..3 {
            rates.push(c.schedule().rates[0].as_bits_per_sec());
            run_batch(&mut c, 0.0, &mut now);
        }
        assert!(
            (rates[1] / rates[0] - 2.0).abs() < 1e-9 && (rates[2] / rates[1] - 2.0).abs() < 1e-9
        );
        // The next MI queues strongly: back to the last good rate, probing with 2 pairs.
        let over = c.schedule().rates[0].as_bits_per_sec();
        let s = run_batch(&mut c, 0.2, &mut now).expect("schedule");
        assert_eq!(c.snapshot().state, "probing");
        assert_eq!(s.rates.len(), 4);
        assert!((s.hold.as_bits_per_sec() - over / 2.0).abs() < 1.0);
        // Pairs straddle the central rate in opposite directions.
        for pair in s.rates.chunks(2) {
            let sum = pair[0].as_bits_per_sec() + pair[1].as_bits_per_sec();
            assert!((sum - over).abs() < 1.0);
        }
    }

    #[test]
    fn a_step_down_is_not_penalised_for_its_own_drain_a_probe_is() {
        let (mut c, mut now) = probing_scavenger();
        // Every probe above the centre queues, every probe below it drains: a move down.
        let centre = c.schedule().hold.as_bits_per_sec();
        let rates = c.schedule().rates.clone();
        let mut probe_drain_penalised = false;
        for (i, rate) in rates.iter().enumerate() {
            now += 30_000;
            let g = if rate.as_bits_per_sec() > centre {
                0.1
            } else {
                -0.05
            };
            c.on_report(&report(&c, i as u32, g, now));
            let mi = c.snapshot().last_mi.expect("evaluated");
            probe_drain_penalised |= g < 0.0 && mi.utility < mi.x_mbps.powf(0.9) - 1.0;
        }
        assert!(
            probe_drain_penalised,
            "a draining probe keeps UDT's penalty"
        );
        assert_eq!(c.snapshot().state, "moving");
        assert!(
            c.schedule().rates[0].as_bits_per_sec() < centre,
            "moving down"
        );
        now += 30_000;
        c.on_report(&report(&c, 0, -0.05, now));
        let mi = c.snapshot().last_mi.expect("evaluated");
        assert!(
            (mi.utility - mi.x_mbps.powf(0.9)).abs() < 1e-9,
            "the step down drains the queue it left: u = {}",
            mi.utility
        );
    }

    /// `rounds` probing rounds in which the higher probe of each pair drew the smaller RTT
    /// gradient (noise from a primary's queue, not the flow's own rate), over RTTs from
    /// `base_us`. Returns the central rates after each round.
    fn rounds_against_the_rate(
        c: &mut Controller,
        rounds: usize,
        base_us: u64,
        now: &mut u64,
    ) -> Vec<f64> {
        let mut centres = Vec::new();
        for _ in 0..rounds {
            assert_eq!(c.snapshot().state, "probing");
            let centre = c.schedule().hold.as_bits_per_sec();
            let rates = c.schedule().rates.clone();
            for (i, rate) in rates.iter().enumerate() {
                *now += 30_000;
                let g = if rate.as_bits_per_sec() > centre {
                    0.0001
                } else {
                    0.0004
                };
                c.on_report(&report_over(c, i as u32, g, base_us, *now));
            }
            centres.push(c.snapshot().rate.as_bits_per_sec());
            // Back to probing: the move's steps score like the probes.
            while c.snapshot().state == "moving" {
                *now += 30_000;
                c.on_report(&report_over(c, 0, 0.0002, base_us, *now));
            }
        }
        centres
    }

    #[test]
    fn over_a_lasting_queue_a_scavenger_goes_down_whatever_the_votes() {
        let (mut c, mut now) = probing_scavenger();
        let start = c.snapshot().rate.as_bits_per_sec();
        // With no queue the votes take the flow up.
        let mut clean = c.clone();
        let up = rounds_against_the_rate(&mut clean, 6, 30_000, &mut now.clone());
        assert!(up.iter().any(|&r| r > start), "from {start}: {up:?}");
        // A queue 10 ms deep: the votes rule until it has lasted, then the flow goes down.
        while !c.filter.over_lasting_queue(c.min_rtt_us.map(|r| r as f64)) {
            rounds_against_the_rate(&mut c, 1, 40_000, &mut now);
        }
        let from = c.snapshot().rate.as_bits_per_sec();
        assert!(from > start, "the votes took it from {start} to {from}");
        let down = rounds_against_the_rate(&mut c, 3, 40_000, &mut now);
        assert!(
            down[0] < from && down.windows(2).all(|w| w[1] <= w[0]),
            "from {from}: {down:?}"
        );
    }

    /// A report for MI `index` that lost a fifth of its packets, with RTTs around
    /// `base_us` against the flow's 30 ms minimum.
    fn lossy_report(c: &Controller, index: u32, base_us: u64, now: u64) -> MiReport {
        let mut r = report(c, index, 0.0, now);
        r.lost = r.pkts_sent / 5;
        r.acked = r.pkts_sent - r.lost;
        let n = r.sums.n;
        r.sums = sums(n, 30_000 / n, base_us, 0.0, 50);
        r
    }

    #[test]
    fn a_swamped_scavenger_mi_ends_its_batch_only_over_a_queue() {
        let (mut c, mut now) = probing_scavenger();
        assert_eq!(c.snapshot().state, "probing");
        let epoch = c.schedule().epoch;
        // Random loss on an empty path: the batch goes on, the utility weighs the loss.
        now += 30_000;
        assert_eq!(c.on_report(&lossy_report(&c, 0, 30_000, now)), None);
        assert_eq!(c.snapshot().swamped_retreats, 0);
        // The same loss over a 10 ms queue: a new batch from what the path delivered.
        now += 30_000;
        let r = lossy_report(&c, 1, 40_000, now);
        let delivered =
            c.schedule().rates[1].as_bits_per_sec() * r.acked as f64 / r.pkts_sent as f64;
        let s = c.on_report(&r).expect("the batch ends");
        assert!(s.epoch > epoch);
        assert_eq!(c.snapshot().swamped_retreats, 1);
        assert_eq!(c.snapshot().state, "probing");
        let centre = s.rates.iter().map(|r| r.as_bits_per_sec()).sum::<f64>() / 4.0;
        assert!(
            (centre - delivered).abs() < 1.0,
            "centre {centre}, delivered {delivered}"
        );
    }

    #[test]
    fn the_trace_shows_how_long_a_heavy_loss_is_remembered() {
        let memory = |c: &Controller| {
            let extra = c.metrics().extra;
            extra
                .iter()
                .find(|(k, _)| *k == "loss_memory_us")
                .map(|e| e.1)
        };
        let (mut c, mut now) = probing_scavenger();
        assert_eq!(memory(&c), Some(0.0));
        // Two flat MIs first: a loss right after STARTING's last doubling is the flow's own.
        for i in 0..2 {
            now += 30_000;
            c.on_report(&report(&c, i, 0.0, now));
        }
        now += 30_000;
        c.on_report(&lossy_report(&c, 2, 30_000, now));
        assert_eq!(memory(&c), Some(LOSS_MEMORY_US));
        // A clean MI's duration (about 30 ms, as its samples span it) is taken off it.
        now += 30_000;
        c.on_report(&report(&c, 3, 0.0, now));
        let left = memory(&c).expect("in the trace");
        assert!(
            left < LOSS_MEMORY_US && left > LOSS_MEMORY_US - 60_000.0,
            "{left} µs left"
        );
    }

    #[test]
    fn stale_and_truncated_reports_change_nothing() {
        let mut c = controller(Priority::Primary);
        let mut r = report(&c, 0, 0.0, 10);
        r.epoch += 5;
        assert_eq!(c.on_report(&r), None);
        let mut r = report(&c, 0, 0.0, 10);
        r.kind = ReportKind::Truncated;
        assert_eq!(c.on_report(&r), None);
        assert_eq!(c.schedule().epoch, 0);
    }

    #[test]
    fn idle_report_recovers_a_lost_schedule() {
        let mut c = controller(Priority::Primary);
        let mut now = 0;
        run_batch(&mut c, 0.0, &mut now);
        let current = c.schedule().clone();
        // The datapath finished epoch 0 and never saw epoch 1: the same schedule again.
        let idle = MiReport {
            epoch: 0,
            index: 1,
            kind: ReportKind::Idle,
            ..MiReport::default()
        };
        assert_eq!(c.on_report(&idle), Some(current.clone()));
        // Idle in the current epoch: its final report was lost, so the batch runs again
        // under a new epoch.
        let idle = MiReport {
            epoch: current.epoch,
            index: 1,
            kind: ReportKind::Idle,
            ..MiReport::default()
        };
        let s = c.on_report(&idle).expect("rerun");
        assert_eq!((s.epoch, &s.rates), (current.epoch + 1, &current.rates));
    }

    #[test]
    fn timeout_halves_and_aborts_the_batch() {
        let mut c = controller(Priority::Primary);
        let mut now = 0;
        for _ in 0..4 {
            run_batch(&mut c, 0.0, &mut now);
        }
        let before = c.snapshot().rate.0;
        let mut r = report(&c, 0, 0.0, now + 1);
        r.timeout = true;
        let s = c.on_report(&r).expect("schedule");
        assert!((c.snapshot().rate.0 - before / 2.0).abs() < 1e-6);
        assert_eq!(s.rates.len(), 6);
        assert_eq!(c.snapshot().state, "probing");
    }

    #[test]
    fn invalid_mi_reruns_the_batch() {
        let mut c = controller(Priority::Primary);
        let mut now = 0;
        run_batch(&mut c, 0.0, &mut now);
        let rate = c.schedule().rates.clone();
        let mut r = report(&c, 0, 0.0, 99);
        r.sums = MiSums::default();
        let s = c.on_report(&r).expect("schedule");
        assert_eq!(s.rates, rate);
        assert_eq!(c.snapshot().discarded_batches, 1);
    }

    #[test]
    fn switch_s_to_p_mid_probe_restarts_with_three_pairs() {
        let mut c = controller(Priority::Scavenger);
        let mut now = 0;
        run_batch(&mut c, 0.0, &mut now);
        run_batch(&mut c, 0.2, &mut now);
        assert_eq!(c.schedule().rates.len(), 4);
        let epoch = c.schedule().epoch;
        // One MI of the S round arrives, then the switch.
        assert_eq!(c.on_report(&report(&c, 0, 0.0, now + 1)), None);
        let s = c.on_priority_change(Priority::Primary).expect("abort");
        assert_eq!(s.rates.len(), 6);
        assert_ne!(s.epoch, epoch);
        // A late report of the aborted round is ignored.
        let mut late = report(&c, 1, 0.0, now + 2);
        late.epoch = epoch;
        assert_eq!(c.on_report(&late), None);
        // Switching back gives 2 pairs again; the same function twice is a no-op.
        assert_eq!(
            c.on_priority_change(Priority::Scavenger)
                .map(|s| s.rates.len()),
            Some(4)
        );
        assert_eq!(c.on_priority_change(Priority::Scavenger), None);
    }

    #[test]
    fn hybrid_threshold_picks_rule_at_probing_entry() {
        let h = hybrid(100.0);
        assert_eq!(UtilityFn::of(h).probing_rule(20e6), ProbingRule::Primary);
        let mut c = controller(h);
        let mut now = 0;
        run_batch(&mut c, 0.0, &mut now);
        run_batch(&mut c, 0.2, &mut now);
        assert_eq!(c.schedule().rates.len(), 6);
        // A threshold below the rate turns the round into a scavenger round at once.
        let s = c.on_priority_change(hybrid(1.0)).expect("rule changed");
        assert_eq!(s.rates.len(), 4);
    }

    #[test]
    fn cwnd_covers_twice_the_rate_times_rtt() {
        let mut c = controller(Priority::Primary);
        let mut now = 0;
        run_batch(&mut c, 0.0, &mut now);
        let s = run_batch(&mut c, 0.0, &mut now).expect("schedule");
        let rate = s.rates[0].0;
        let want = 2.0 * rate * 0.030;
        assert!(
            (s.cwnd.0 as f64 - want).abs() < want * 0.01 + 1.0,
            "{:?}",
            s.cwnd
        );
        assert!(s.cwnd.0 >= 4 * MSS);
    }

    #[test]
    fn carried_state_starts_probing_at_its_rate() {
        let carried = CarriedState {
            cwnd: Bytes(100_000),
            ssthresh: None,
            rate: Some(BytesPerSec(2_500_000.0)),
            srtt: Some(Micros(40_000)),
            min_rtt: Some(Micros(30_000)),
            at: Micros(5_000_000),
        };
        let c = Controller::start_from(
            Config::default(),
            Priority::Primary,
            Bytes(MSS),
            Bytes(10 * MSS),
            3,
            &carried,
        );
        assert_eq!(c.snapshot().state, "probing");
        assert_eq!(c.schedule().hold, BytesPerSec(2_500_000.0));
        assert_eq!(c.schedule().mi_duration, Micros(30_000));
        assert_eq!(c.now(), Micros(5_000_000));
        // A window-based predecessor: 100,000 B over a 40 ms smoothed RTT = 2.5 MB/s.
        let window_only = CarriedState {
            rate: None,
            ..carried
        };
        let c = Controller::start_from(
            Config::default(),
            Priority::Primary,
            Bytes(MSS),
            Bytes(10 * MSS),
            3,
            &window_only,
        );
        assert_eq!(c.snapshot().state, "probing");
        assert!((c.schedule().hold.0 - 2_500_000.0).abs() < 1e-6);
    }

    proptest! {
        /// Random report sequences never produce a rate below the minimum, a non-finite
        /// rate, an oversized schedule or a window below 4 packets.
        #[test]
        fn schedules_stay_sane(
            steps in proptest::collection::vec((0u8..8, 0.0f64..0.5, 0u32..7, any::<bool>()), 1..200),
        ) {
            let mut c = controller(hybrid(8.0));
            let mut now = 0u64;
            for (kind, g, idx, flag) in steps {
                now += 10_000;
                let out = match kind {
                    0 => c.on_priority_change(Priority::Primary),
                    1 => c.on_priority_change(Priority::Scavenger),
                    2 => {
                        let mut r = report(&c, 0, g, now);
                        r.timeout = flag;
                        r.index = idx;
                        c.on_report(&r)
                    }
                    _ => run_batch(&mut c, if flag { g } else { 0.0 }, &mut now),
                };
                let s = out.unwrap_or_else(|| c.schedule().clone());
                prop_assert!(!s.rates.is_empty() && s.rates.len() <= MAX_SCHEDULE);
                for r in s.rates.iter().chain([&s.hold]) {
                    prop_assert!(r.0.is_finite());
                    prop_assert!(r.as_bits_per_sec() >= MIN_RATE_BPS * 0.95 - 1e-6);
                }
                prop_assert!(s.cwnd.0 >= 4 * MSS);
            }
        }
    }
}
