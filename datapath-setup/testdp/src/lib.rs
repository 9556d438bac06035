//! placeholder
pub fn main() {}
