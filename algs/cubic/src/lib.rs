//! CUBIC (RFC 9438) as a CCP algorithm: the primary controller that scavenger flows are
//! handed to (docs/algorithms/ledbat-pp.md §6), and the yardstick for checking a datapath against the
//! kernel's own `tcp_cubic`. It follows RFC 9438 and, where the RFC leaves a choice, Linux.
//!
//! # Model (RFC 9438 §4; windows in segments, time in seconds)
//!
//! ```text
//! W_cubic(t) = C (t - K)^3 + W_max                      §4.2, C = 0.4
//! K          = cbrt((W_max - cwnd_epoch) / C)           §4.2 (0 if cwnd_epoch >= W_max)
//! target     = clamp(W_cubic(t + RTT), cwnd, 1.5 cwnd)  §4.2, RTT = srtt
//! per ACK:     cwnd += (target - cwnd) / cwnd           §4.2 (concave and convex regions)
//! W_est     += alpha_cubic * acked / cwnd               §4.3, alpha_cubic = 3(1-b)/(1+b)
//!              cwnd = W_est  if W_cubic(t) < W_est      (Reno-friendly region)
//! on loss/ECE: W_max = cwnd, or cwnd (1+b)/2 if below the previous W_max   §4.6, §4.7
//!              ssthresh = max(cwnd b, 2), cwnd = ssthresh                    b = beta_cubic = 0.7
//! on RTO:      ssthresh as above, cwnd = 2 segments, next stage with K = 0   §4.8
//! ```
//!
//! Per report the per-ACK rules are integrated over the bytes the report acknowledges: a
//! report of a whole window moves cwnd to the target, a shorter one proportionally
//! (`controller::Controller::update_avoidance`).
//!
//! # States
//!
//! ```text
//!            start (Create)                      hand-off (CarriedState, TV-13)
//!                 │                                        │ cwnd = ssthresh = W_max = carried
//!                 ▼         cwnd reaches ssthresh          ▼ K = 0, epoch = hand-off time
//!   ┌──────► SlowStart ───────────────────────────────► Avoidance ◄───────┐
//!   │  RTO    (datapath grows Cwnd per ACK)               │  loss / ECE   │ guard expired:
//!   │         │ loss / ECE (no guard)                     ▼               │ old flight acked
//!   │         └──────────────────────────────────────► Recovery ────────┘ and one RTT passed
//!   └───────── from any state (ssthresh kept if a guard is still active)
//! ```
//!
//! # Slow start in the datapath
//! The program adds every acknowledged byte to `Cwnd` while `Cwnd < ssthresh` (a control
//! register the agent writes at congestion events), capped at ssthresh. So the window doubles
//! per RTT smoothly, ACK by ACK, as in the kernel, instead of jumping once per report (a
//! per-RTT jump is a line-rate burst and lags one report plus the IPC). The agent follows the
//! window each report carries, and takes over at ssthresh. In avoidance CUBIC grows by a
//! fraction of a segment per ACK, so one update per RTT loses nothing.
//!
//! # Units
//! Inside the controller windows are bytes as f64 (fractional growth accumulates), converted
//! to segments for the equations in `model`; time is datapath µs (`Micros`) from the reports'
//! `Ack.now`, seconds in the equations. At the datapath boundary `Cwnd` and `ssthresh` are u32
//! bytes.
//!
//! # Deviations from RFC 9438
//! * RTO sets cwnd to 2 segments, not 1 (RFC 5681 loss window). A CCP datapath rounds `Cwnd`
//!   down to whole packets and must never see less than one; one floor of 2 segments for every
//!   window keeps that simple, and a receiver that delays ACKs answers 2 segments at once.
//! * No PRR (RFC 9438 §4.6 recommends RFC 6937): the window is cut to ssthresh at once; the
//!   datapath then sends nothing until the flight has drained below it.
//! * "One reduction per congestion event" is approximated without sequence numbers: after a cut
//!   no further cut until the bytes in flight at the cut have been acknowledged **and** one RTT
//!   (the larger of srtt and the latest sample) has passed.
//! * srtt is an RFC 6298 average of one sample per report (the latest), not per ACK.
//! * No HyStart++ (RFC 9406, a MAY in RFC 9438 §4.10): by default slow start ends only at
//!   ssthresh or a congestion event. `Config::hystart(true)` adds Linux HyStart's delay
//!   detection instead (see below).
//!
//! # Deviations from Linux `tcp_cubic`
//! * `alpha_cubic` switches to 1 once `W_est` reaches the window before the last reduction (an
//!   RFC 9438 §4.3 SHOULD); Linux keeps it fixed. `params::Config::linux()` turns it off.
//! * The target uses `t + srtt` (RFC 9438 §4.2); Linux uses `t + min RTT`.
//! * HyStart (on by default in Linux) is off by default, so slow start can overshoot where
//!   Linux leaves it early on rising delay. `Config::linux()` turns on its delay detection,
//!   judged once per round on the round's smallest RTT (Linux: the first 8 samples). The
//!   ACK-train detection is not implemented: it needs per-ACK timing the reports do not
//!   carry.
//! * The cubic clock does not run while the window did not limit the sender (RFC 9438 §5.8);
//!   Linux only shifts the epoch across idle periods. Application-limited detection uses the
//!   interval's largest flight (within 2 segments of cwnd), as Linux's `tcp_is_cwnd_limited`
//!   uses `max_packets_out`; it needs a datapath that fills `Flow.bytes_in_flight`
//!   (`Config::cwnd_limited_only(false)` for one that does not).
//! * Integer arithmetic and the `cnt` counter of the kernel are replaced by f64 in segments;
//!   the kernel's 1.5x cap on growth per RTT is the RFC's target clamp.
//! * ECN-Echo is a congestion event like a loss (RFC 9438 §4.6); Linux reacts through CWR.
//!
//! # Priorities
//! A CUBIC flow is primary and has no scavenger mode: `on_priority` accepts every request
//! without changing anything, and moving a flow to a scavenger algorithm is the runtime's
//! policy. With `Config::hand_off_on_scavenger(true)` a scavenger or hybrid request instead
//! returns `PriorityOutcome::HandOff` with the flow's state (window, ssthresh, RTTs), for a
//! runtime that hands flows back to the scavenger they came from.

pub mod ccp;
pub mod controller;
pub mod datapath;
pub mod model;
pub mod params;

pub use ccp::{Cubic, CubicFlow};
pub use controller::{Controller, Measurement, State};
pub use params::{Config, ConfigError};
