//! placeholder
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
