//! placeholder
pub mod datapath;
pub mod monitor_interval;
pub mod params;
pub mod rate_control;
pub mod tolerance;
pub mod utility;
