//! What the tests of several crates share, so that each helper has one home.
//!
//! * [`libccp_host`]: a real libccp datapath in the test's own process: programs installed
//!   with portus' serializer, connections whose window and rate are read back, every
//!   message libccp sends collected and decoded, and a [`libccp_host::LibccpDp`] through
//!   which a [`algs_core::ccp::CcpFlow`] drives it.
//! * [`program`]: a datapath program compiled and serialized as an agent sends it, and its
//!   reports read by field name.
//! * [`libccp_sim`]: the real libccp in the bottleneck model of `ccp-sim`: a scenario's
//!   CCP flows run an algorithm's datapath program per ACK on simulated time, and its
//!   controllers answer the reports (closed-loop tests of an algorithm without an agent).
//! * [`processes`]: workspace binaries built on demand, the agent started on a private
//!   socket name, raw datagram sockets standing in for a datapath.
//!
//! A dev-dependency only: it links libccp, which the agent itself never links
//! (docs/datapaths.md §5.5).

pub mod libccp_host;
pub mod libccp_sim;
pub mod processes;
pub mod program;
