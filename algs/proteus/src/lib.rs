//! PCC Proteus (Proteus-P, Proteus-S, Proteus-H) as a CCP algorithm.
//!
//! Proteus is an online-learning, rate-based sender (docs/algorithms/proteus.md, after the code the
//! SIGCOMM'20 paper evaluated, PCC-Uspace "UDT"). It sends in monitor intervals (MIs) of
//! about one RTT, scores each MI with a utility function and moves its rate along the
//! utility's gradient. The utility decides the priority: Proteus-P competes, Proteus-S
//! yields as soon as the RTT starts to fluctuate, Proteus-H is P below a rate threshold h
//! and S above it. An application can switch a running flow between them
//! (`CcpFlow::on_priority`); the controller keeps what describes the path and resets
//! what depends on the utility's scale (§4).
//!
//! # Model (x in Mbit/s = 10^6 bit/s, g dimensionless, σ in µs, L a fraction)
//!
//! ```text
//! u_P = x^0.9 − 900·x·max(g, 0) − 11.35·x·L                    (§1.2)
//! u_S = u_P − 0.0015·x·σ                                        (§1.3)
//! u_H = u_P if x < h else u_S                                   (§1.4)
//! g   = C_sr / C_ss, σ = sqrt(C_rr)/n, C_xy = n·Σxy − Σx·Σy      (§1.5, §3.2; exact in i128)
//! Δ   = 2^40·ΔU/Δr · m,  m = ⌊(τ+1)/2⌋^1.2   bit/s               (§2.6)
//! Δ   ← min(Δ, rate·(0.05 + 0.05·k)) (k += 1 when capped, else k −= 1), then max(Δ, 0.5 Mbit/s)
//! ```
//! g and σ are zeroed by the noise-tolerance rules unless the MI's trend stands out of
//! its own spread, or the trend over 6 MIs or σ against its baseline is an outlier
//! (§1.6, [`tolerance`]).
//!
//! # States (§2.1)
//!
//! ```text
//!            u grows: rate × 2
//!   STARTING ──────────────┐          decision (P: 2 of 3 up or 3 of 3 down;
//!     │  ▲ ◄───────────────┘                    S: 2 of 2 either way)
//!     │  │ at 0.5 Mbit/s: stuck    PROBING ──────────────────────────► MOVING
//!     │  └── or decided "up" ──────  │ ▲  no decision: same centre        │ │ u follows:
//!     │ u drops: rate / 2            │ └──────────┘                       │ │ bigger step
//!     └────────────────────────────► │ ◄──────────────────────────────────┘ └──┐
//!                                    ▲    u goes against: step back           │
//!                                    └────────────────────────────────────────┘
//! ```
//!
//! # Datapath (docs/algorithms/proteus.md §3.4, [`datapath`])
//!
//! One program, `proteus-mi`, shared by the three variants. The agent writes a
//! *schedule* (1 MI in STARTING/MOVING, 4 or 6 probes in PROBING, and a hold rate); the
//! datapath starts MI j+1 when MI j has run 1 × min RTT and holds 4 RTT samples of its
//! own packets, attributes ACKs to MIs by packet counts, accumulates n, Σs, Σr, Σs², Σs·r,
//! Σr² in u64 registers that cannot overflow (s < 2^23 µs, r < 2^22 µs, n ≤ 2^17 + 2), and
//! reports each MI. Report `mi` = index + 8·epoch, so reports of an aborted schedule are
//! recognised and dropped. A schedule that ended long ago without a new one triggers an
//! idle report, so a lost UpdateFields cannot freeze a flow at its hold rate.
//!
//! # Units
//!
//! Datapath: `Rate` bytes/s (u32), `Cwnd` bytes, times µs (`Ack.now`). Core: rates in
//! bit/s inside [`rate_control`] (the vectors of docs/algorithms/proteus.md §5 are in bit/s), [`BytesPerSec`] at the
//! edges, utilities dimensionless. Time comes only from the reports (`Report.now`).
//!
//! # Deviations from the reference (UDT)
//!
//! * x is the MI's *target* rate (§2.8 REC), unless the MI sent less than 90 % of it; then
//!   the measured rate ([`monitor_interval::MiMeasurement::new`]).
//! * The Hybrid probing rule compares h in 10^6-bit/s units, as the utility does (§1.4 REC,
//!   vector R8); UDT mixes 2^20 and 10^6.
//! * No ACK-burst filter: every RTT sample is reliable (§3.6 REC v1; UDT's filter is
//!   disabled de facto after the first loss, §1.5). Instead, a trend counts only when it
//!   stands out of its samples' own noise: the trending band (§1.6b) is never narrower
//!   than 3 standard errors of the 6-MI trend, and STARTING (§1.6d) forgives a gradient
//!   within 3 standard errors of its regression. UDT's band, learned only from trends
//!   inside it, locks narrow with whole-millisecond delivery and penalises nearly every MI,
//!   which holds a flow at a rate set by its RTT noise alone. This noise floor is off where
//!   a primary shows (§1.6f): over a standing queue (the last six MIs' mean RTT at least
//!   max(2 ms, 0.1 × min RTT) above the minimum) and for 10 s of flow time after an MI lost
//!   more than 1 % of its packets (at half a BDP or less a loss-based primary's queue
//!   drains between its losses). Same sitting, without → with (docs/results.md,
//!   "Regression grid", eighth candidate): Jain of n = 2..6 Proteus-S flows over 200 s
//!   0.572 / 0.932 / 0.866 / 0.917 / 0.806 → 0.998 / 0.997 / 0.998 / 0.988 / 0.986; alone
//!   0.88–0.91 → 0.90–0.91 of the link from 37.5 KB; yielding as before on 18 of B9's
//!   bottlenecks and on the regression grid. Costs: CUBIC at 0.4 BDP keeps 0.946 instead
//!   of 0.963 (B5); alone the p95 queue at 75–150 KB grows from 1 to 3–4 ms (inflation
//!   ratio 0.04 → 0.17 at 150 KB); at 1–2 % random loss the floor is off for good (22
//!   instead of 28–33 Mbit/s of 50).
//! * A heavy loss right after the flow's own step over the link is the flow's own and is
//!   not remembered: one of the two MIs before it sent at least as fast and either saw its
//!   RTT rise significantly by no more than 2·(x/x₀ − 1) over the MI before it (what one
//!   flow not queueing at x₀ can add at x) or lost heavily itself by this rule
//!   ([`params::OWN_RISE_GAIN`]). At 0.2 BDP a lone flow's overflows had kept the noise floor
//!   off for 78–90 % of each run. Same day (docs/results.md, "Thirtieth candidate"): alone
//!   at 37.5 KB 0.890–0.908 → 0.911–0.923 of the link (B1); CUBIC and BBR beside it within
//!   the spread of the regression grid (cut by 20 % or more in 3 and 0 of 36 runs, all on
//!   200 ms paths) and B5; among equals (B4) it never acts, as no MI loses a packet
//!   there. Cost: alone at 37.5 KB the flow overflows more often, a p95 queue of 3–4 ms of
//!   the buffer's 6 instead of 2. Nor is a heavy loss in an MI sent in STARTING, whose
//!   doubling overflows a buffer of ten to forty packets within the doubled MI: on short
//!   paths that one loss kept a lone flow's noise floor off for 42–58 % of its MIs
//!   (docs/results.md, "Thirty-seventh candidate"): 48 Mbit/s, 20 ms, 60 KB 0.74 → 0.91 of
//!   the link; on the regression grid CUBIC beside it kept a mean 0.933 (0.920 before) and
//!   BBR 0.960 (0.963). Cost: on 200 ms paths the memory of its own overshoot no longer
//!   covers a primary arriving 10 s in (BBR at 48 Mbit/s, 0.5 BDP kept 0.834 / 1.003 of
//!   its throughput alone, 0.985 / 0.955 before).
//! * Where that noise floor is on, a trending outlier whose trend falls (a queue draining,
//!   the flow's own or an equal's) leaves the MI's RTT deviation unpenalised; UDT penalises
//!   σ on a trending outlier of either sign. With whole-ms delivery (σ ≈ 500 µs) a penalised
//!   MI at 45 Mbit/s scores below zero, and after each overshoot the six-MI window kept the
//!   drain flagged for several MIs (a fifth of a lone flow's MIs), whose probing rounds then
//!   decided "down" because the penalty grows with the rate. Same day, without → with
//!   (docs/results.md, "Twenty-sixth candidate"): alone 0.890–0.911 → 0.925–0.931 of the link
//!   from 75 KB (B1); Jain of n = 2..6 equals over 200 s 0.963–1.000 → 0.975–1.000 (B4);
//!   CUBIC and BBR beside it as before (B5, regression grid). Costs: the lone flow's p95
//!   queue at 150 KB is 5 ms of the buffer's 24 in every run (inflation ratio 0.083–0.208
//!   → 0.208, B2); ten latecomers (B12, n = 10) read Jain 0.952–0.977 → 0.914–0.975, one
//!   flow held 6.7–7.1 of 200 Mbit/s in two runs (earlier sittings spread to 0.882). It
//!   also spares a delay-based primary's drains: Proteus-P holds about 1 ms of queue, under
//!   the standing-queue line, and beside Proteus-S kept 0.773–0.873 of its throughput alone
//!   (B5's buffers), 0.872–0.956 with every falling trend priced (the same day,
//!   docs/results.md, "Proteus-P again"). Sparing only a drained queue's jitter gave
//!   0.833–0.921 but two equals Jain 0.825–0.936 ("Thirty-first candidate", not adopted);
//!   sparing it only while most of the flow's drains empty the queue gave 0.851–0.934, but
//!   the larger of two equals judged itself alone, Jain 0.703 ("Thirty-second candidate").
//!   On a link that serializes packets (σ about half) UDT's rule also held a lone flow at
//!   0.91–0.92 and left Proteus-P 0.84–0.91, but two equals read Jain 0.767 and 0.921 in two
//!   of three runs ("Thirty-third candidate").
//! * Regression on send time s = ACK time − RTT (§3.3) instead of packet number; identical
//!   gradient for a paced sender, no infinite gradient above 12 Gbit/s.
//! * MIs that hold samples beyond the 2^22 µs / 2^17-sample guard are evaluated on their
//!   last window only.
//! * Re-entering STARTING at the minimum rate forgets the old STARTING reference (UDT
//!   keeps it, which halves the rate below the minimum at once).
//! * A probing round at the minimum rate that decides "up" re-enters STARTING, as an
//!   undecided round there does (UDT moves up in steps of about 0.5 Mbit/s, which a
//!   reversal on one noisy MI ends). On ANRW Fig. 2's timeline (docs/results.md,
//!   "Twenty-second candidate"): Proteus-S took the idle link back (> 40 of 48 Mbit/s) 4–6 s
//!   after a primary left in all 12 cases of six runs, against 4–13 s before (10 and 13 s
//!   in two of six cases, the day before). Beside CUBIC and BBR it re-entered STARTING
//!   twice as often, and they kept as much (regression grid: cut by 20 % or more in 3 and
//!   0 of 36 runs, as before).
//! * A CCP timeout halves the rate and re-probes (§2.2 REC; UDT has no timeout path).
//! * Rates are capped at the `Rate` register's maximum (u32 bytes/s ≈ 34 Gbit/s).
//! * A priority switch re-scores the reference MI under the new utility, aborts a probing
//!   round only when the probing rule changes, and resets the amplifier and k when
//!   moving (§4 REC); UDT swaps the tag only.
//! * Cwnd = max(2 × highest scheduled rate × smoothed MI RTT, 4 MSS): a safety net that
//!   never limits the paced sender (UDT has no window; §2.2 REC suggests min RTT and
//!   10 packets: the smoothed RTT keeps the window open while a queue builds).
//! * A hybrid flow with no threshold from the policy, the application or [`Config`] runs
//!   as a scavenger (h = 0).
//! * A step of a move down whose RTT falls significantly is not penalised for its RTT
//!   deviation: the drain is its own (UDT penalises it, and beside CUBIC the reversal then
//!   undid every step; see `controller::own_drain`). The price, on a clean path: a flow
//!   switched back from primary to scavenger gives its share back to another Proteus-S
//!   more slowly.
//! * A scavenger's probing round in which every MI scored below minus its rate reward
//!   (u < −x^t: penalties of more than twice what the rate earns) decides "down" whatever
//!   the pair votes say, and a move down goes on while the MI and its reference are both
//!   that low: the utility surely falls with the rate there, and beside BBR the votes
//!   follow the primary's RTT noise instead (see `rate_control::overload_excess`).
//! * A scavenger's MI outside STARTING that lost so much that its loss penalty alone
//!   outweighs its rate's reward (11.35·x·L > x^0.9) while its mean RTT stood a queue above
//!   the flow's minimum (the standing-queue test of the noise floor) ends the probing round
//!   or move in progress, and the flow probes again from x·(1 − L) if that is lower (see
//!   `rate_control::on_swamped_mi`). UDT holds a round's rate through every such MI; beside
//!   BBR's start-up on a 200 ms path that steady loss looked like a policer to BBR, which
//!   held a fifth of the link for 14 s. Same sitting, interleaved, without → with
//!   (docs/results.md, "Tenth candidate"): on 200 ms paths BBR keeps 0.805 → 0.883 of its
//!   throughput alone (cut by ≥ 20 % in 6 → 2 of 18 runs), CUBIC 0.788 → 0.827. Under
//!   random loss alone (B3) it fired in 6 of 21 runs, at most 23 times in a run's
//!   880–2,040 MIs: without the queue test it fired on every MI with one lost packet in a
//!   dozen and held Proteus-S at 0.8–1.4 Mbit/s of 50 under 3–6 % loss.
//! * A scavenger over a lasting queue decides "down" in every probing round and keeps a move
//!   down going, whatever the votes: a queue stands (the noise floor's six-MI test) and one
//!   MI's mean RTT stood over the same line in at least 60 % of the flow's recent MIs (an
//!   EWMA of gain 1/32 per base RTT that an MI's mean RTT spans, about a second at 30 ms;
//!   `tolerance::NoiseFilter::over_lasting_queue`).
//!   Alone or among equals a scavenger's own queue stood in 0–11 % of its MIs, a few MIs at a
//!   time; beside CUBIC and BBR in 76–97 %. Beside CUBIC at 0.4 BDP the pair votes otherwise
//!   follow MI noise seven times CUBIC's queue growth and Proteus-S random-walks at 2–4 Mbit/s.
//!   Same sitting (docs/results.md, "Twentieth candidate"), at 50 Mbit/s, 30 ms: CUBIC
//!   beside Proteus-S at 0.4 BDP keeps 0.916–0.958 → 0.990–0.992 of its throughput alone,
//!   BBR 0.978–0.986 → 0.986–0.989; alone (B1) and among equals (B4, n = 2..6) it never
//!   acted. Over any standing queue instead, a lone flow went down from its own queue
//!   (0.79–0.83 of the link from 150 KB). On the regression grid (72 runs) CUBIC is cut by
//!   20 % or more in 4 of 36 runs instead of 8, BBR in 1 of 36 as before. Counted per MI
//!   instead of per base RTT, a deep queue lasted 2–3 times longer than the rule saw (on a
//!   200 ms path a 300 ms queue spaces MIs 0.5 s apart): with the base-RTT weight, measured
//!   the next day ("Twenty-first candidate"), BBR is cut in 0 of 36 runs and CUBIC in 3,
//!   and B1, B4 and B5 are within their spread. Alone and among up to six equals the rule
//!   still never acts; among 7–10 it acted in 5 of 12 runs, Jain's index 0.923–0.984 there
//!   against 0.921–0.977 where it did not. On ANRW Fig. 1's whole grid (125 bottlenecks,
//!   alone runs of the same sitting; docs/results.md, "A1 in one sitting") BBR is cut by
//!   20 % or more on none instead of 8 and CUBIC on 8 instead of 20.
//! * A STARTING MI's loss rate counts only beyond 2 of its binomial standard errors (see
//!   `tolerance::beyond_sampling_noise`); UDT ends STARTING on any MI that scores below
//!   its reference, and under random loss one lost packet in an MI of a dozen did that at
//!   2–7 Mbit/s of 50. Same sitting, interleaved, without → with (docs/results.md,
//!   "Twelfth candidate"): Proteus-P alone at 5 % loss 25.1 → 35.6 Mbit/s of 50 (three
//!   runs each), within the spread at 1 and 3 %; the regression grid's half no worse.
//! * Two MIs that u_P scores (Proteus-P, and Proteus-H below h) and that are compared with
//!   each other (a probe pair, a move's MI and its reference) are scored with their pooled
//!   loss rate when their rates differ within 2 standard errors of the difference (see
//!   `tolerance::compared_losses`); UDT scores each with its own. With a buffer of three
//!   packets a lone flow loses a packet in most MIs whatever its rate, one loss outweighs
//!   what a ±5 % probe earns, and the votes followed which MI the losses fell into: on the
//!   serial test bed Proteus-P held 0.709–0.714 of the link at 4.5 KB, 0.890–0.894 with the
//!   rule (B1), at the utility's own loss tolerance (5.1–5.2 % of its packets lost instead
//!   of 0.75 %); within the spread from 15 KB. The pooled rate keeps the penalty's level, so
//!   the loss rate where u_P stops growing (§1.2) stays. A scavenger keeps UDT's comparison:
//!   with the rule Proteus-S held 0.82–0.86 at 4.5 KB instead of 0.68, but CUBIC beside it
//!   on the regression grid's 0.5-BDP half kept a mean 0.888 instead of 0.921 (cut by 20 %
//!   or more in 4 of 18 runs instead of 3): a loss that falls more often into the higher
//!   probes is a primary's mark, however weak in one pair. Cost on Proteus-P's side (B7):
//!   beside BBR at 0.4 BDP, whose losses no longer push its votes down either, it took
//!   8.6–15.0 Mbit/s instead of 4.0–4.4 (BBR 0.69–0.82 of its throughput alone instead of
//!   0.91; the paper's Proteus-P 0.88) (docs/results.md, "Thirty-fourth candidate"), in
//!   runs the emulator delivered late; on time BBR kept 0.90–0.91 at 0.4 BDP and 0.85 at
//!   2 BDP (docs/results.md, "B7 in three sittings").
//!
//! [`BytesPerSec`]: algs_core::BytesPerSec

pub mod ccp;
pub mod controller;
pub mod datapath;
pub mod monitor_interval;
pub mod params;
pub mod rate_control;
pub mod tolerance;
pub mod utility;

pub use ccp::{ProteusH, ProteusP, ProteusS};
pub use params::Config;
