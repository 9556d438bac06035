//! Virtual time for libccp: `ccp_host::virtual_clock`, with the `clock_gettime` of this
//! executable that it needs (see there).

pub use ccp_host::virtual_clock::{
    NotInterposed, VIRTUAL_START_NS, now, real_monotonic_ns, set, start,
};

/// The interposed `clock_gettime`: the virtual clock for `CLOCK_MONOTONIC` once [`start`]
/// has run, the kernel's answer otherwise.
///
/// # Safety
/// Same contract as POSIX `clock_gettime`: `tp` must be null or point to a writable
/// `timespec`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn clock_gettime(
    clk: libc::clockid_t,
    tp: *mut libc::timespec,
) -> libc::c_int {
    // SAFETY: the same contract, passed on.
    unsafe { ccp_host::virtual_clock::clock_gettime_body(clk, tp) }
}
