//! Experiments for the scavenger CCP project: `ccp-emu`, a Mahimahi-compatible bottleneck
//! emulator, and `ccp-exp`, the scenario runner (plans, runs, results, plots).

pub mod emu;
pub mod exp;
