//! LEDBAT++ (draft-irtf-iccrg-ledbat-plus-plus-01) as a CCP algorithm, following
//! docs/algorithms/ledbat-pp.md (section numbers below are that page's) and, for the datapath
//! program, its §5.2 and §5.5.
//!
//! # What it does
//! A scavenger: it keeps the bottleneck queue near a fixed target T (60 ms) measured from
//! RTT samples, and gets out of the way of loss-based primary traffic, which keeps the queue
//! above T. Periodic slowdowns (about 10 % of the time) let every LEDBAT++ flow re-measure
//! the base delay.
//!
//! # Model (units: bytes as f64, time in µs of datapath time)
//! ```text
//! base    = min over the last 10 one-minute buckets of the per-report minimum RTT  (§1.2)
//! current = min of the last 4 RTT samples (kept per ACK by the datapath program)   (§1.3)
//! q       = max(0, current − base)
//! F       = min(16, ceil(2·T / base)),  G = 1/F                                    (§2.2)
//! slow start, per report:   W += G·min(acked, W)                                   (§2.1)
//! avoidance, per report, a = min(acked, W):
//!     q ≤ T:  W += G·MSS·a/W                         (only if the window was used)  (§2.3)
//!     q > T:  W += max(G·MSS·a/W − C·(q/T − 1)·a, −a/2)                             (§2.4)
//! loss:       W = max(W/2, 2·MSS), once per loss event                              (§2.5)
//! W ≥ 2·MSS always; the published Cwnd is floor(W)
//! ```
//!
//! # States (`controller::State`; §3.3)
//! ```text
//!              q > 3/4·T, or loss
//!  SlowStart ─────────────────────► Avoidance (next = now + 2·srtt)
//!                                      │ now ≥ next and W > 2·MSS:
//!                                      │   ssthresh := W; W := 2·MSS; entry := now
//!                                      ▼
//!                                   Freeze ──now ≥ entry + 2·srtt──► Ramp ──W ≥ ssthresh──► Avoidance
//!                                                                   W := ssthresh; next := now + 9·(now − entry)
//!  any ──timeout──► RtoSlowStart (W := 2·MSS, no delay exit) ──W ≥ ssthresh──► Avoidance
//!                                                             next := now + 9·(now − timeout)
//! ```
//! All timers are checked when a report arrives (one per RTT; at once on a loss or timeout).
//!
//! # Layout
//! `params` (constants, `Config`), `base_delay` (history filter), `model` (one function per
//! equation), `controller` (the state machine, pure), `datapath` (the program and its field
//! names), `ccp` (the only code that touches portus).
//!
//! # Choices where the draft is silent (the REC items of docs/algorithms/ledbat-pp.md)
//! * Once-per-RTT rules are applied per report, pro-rated by acked bytes (§2.4 option 1).
//! * No growth on the report that ends the initial slow start (§2.1); slow-start growth per
//!   report is at most G·W, so a datapath that ran ahead of W cannot multiply it.
//! * Growth only when the window was used: the interval's largest flight is within 3 MSS of
//!   W (RFC 6817's ALLOWED_INCREASE plus two MSS for a delayed ACK; §2.3).
//! * A loss event lasts at least one smoothed RTT and until the flight outstanding at the
//!   cut has been acked or declared lost (at most 4 srtt): drops of one burst that the first
//!   ACK after the sender's pause reveals are not a second event (a plain one-srtt hold-off
//!   halved twice on a 0.5 BDP buffer and lost 11 % utilization).
//! * Loss per phase and timeout as in §2.5's table; the base history is fed the minimum RTT
//!   of each report so that slowdown troughs are never missed (§1.2).
//! * Timers use the smoothed RTT (configurable: lifetime minimum RTT) (§3.2).
//! * Hand-off to a primary (§6): during a slowdown the saved window is carried
//!   (configurable: the literal W). Hybrid priority: LEDBAT++ has no hybrid mode; by default
//!   the flow stays a scavenger (configurable: hand off) — see `params::HybridPolicy`.
//!
//! # Deviations from the reference
//! * **The datapath program** differs from a literal port of the report program as §5.5 requires:
//!   a sample is valid when `0 < s < +infinity` (libccp reports 4294967295 for "none");
//!   it also reports `Ack.now` (the controller's only clock) and the minimum of the last 3
//!   samples (libutp profile).
//! * **Per-RTT granularity.** W changes once per report; slow start and the ramp grow in
//!   per-RTT steps, and the delay exit can be up to one RTT late (§5.4 items 1 and 3). The
//!   freeze ends at the first report after 2 RTT.
//! * **libutp-compat profile** (`params::Profile::LibutpCompat`, for comparing with the
//!   ANRW'21 numbers) reproduces the DEV(libutp) items of §4.2: 3-sample filter, 13
//!   buckets, GAIN from the lifetime minimum RTT, doubling slow start and ramp, `9 × ramp`
//!   scheduling, `2·minRTT` timers, reschedule on loss, 100 ms loss hold-off, 3000 B
//!   minimum, RTO keeping ssthresh, no increase unless the window was full within 1 s.
//!   Approximated: libutp's per-ACK rule with its rounding is applied to a report's acked
//!   bytes replayed as MSS-sized ACKs, and the ramp is clamped at the saved window (libutp
//!   overshoots by part of one ACK). Not reproduced: one-way delay (a TCP sender has only
//!   RTT), the 1023-packet flight cap, and the RTO while idle (CCP reports no idleness).
//!   After a timeout the profile leaves its slow start only by loss, as libutp does when
//!   ssthresh was never set.
//! * **Minute buckets** count from the flow's first RTT sample, in datapath time.

pub mod base_delay;
pub mod ccp;
pub mod controller;
pub mod datapath;
pub mod model;
pub mod params;

pub use ccp::LedbatPlusPlus;
pub use controller::{Controller, Measurement, State};
pub use params::{Config, HandOffWindow, HybridPolicy, Profile, RttForTimers};
