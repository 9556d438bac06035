//! libccp's register limits, shared by every algorithm's glue and datapath program: the
//! registers an agent sets (`Cwnd`, control registers) are u32, and a program's `+infinity`
//! is the largest u32 (docs/datapaths.md §4.2, §4.3). The `Rate` register has its own
//! conversion, [`crate::BytesPerSec::to_rate_register`].

/// `+infinity` in a datapath program, which is also what libccp reads for a missing RTT
/// sample (docs/datapaths.md §4.2): one value, because libccp fills a missing sample with
/// the program's infinity. Programs compare `Flow.rtt_sample_us` against it.
pub const INFINITY_REGISTER: u64 = u32::MAX as u64;

/// A value for a u32 register, saturating at the largest one (a window or duration beyond
/// 4 GB or 71 minutes is as good as infinite to the datapath).
pub fn clamp_to_register(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn infinity_is_what_libccp_reads_for_a_missing_sample() {
        assert_eq!(INFINITY_REGISTER, 4_294_967_295);
    }

    #[test]
    fn clamping_saturates_at_the_largest_register() {
        assert_eq!(clamp_to_register(1448), 1448);
        assert_eq!(clamp_to_register(u64::from(u32::MAX)), u32::MAX);
        assert_eq!(clamp_to_register(u64::MAX), u32::MAX);
    }
}
