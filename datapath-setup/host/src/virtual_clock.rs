//! Virtual time for libccp, for every process that runs libccp on simulated time (the test
//! datapath, in-process closed-loop tests).
//!
//! libccp reads the time only through the crate's exported `now`/`since_usecs`, which call
//! `time::precise_time_ns`, which calls `clock_gettime(CLOCK_MONOTONIC)`
//! (docs/datapaths.md §5.6). The executable defines `clock_gettime` itself, with
//! [`clock_gettime_body`] as its body: the executable's definition takes precedence over
//! glibc's, so every caller in the process, libccp included, gets the virtual clock for
//! `CLOCK_MONOTONIC` once [`start`] has run, and the kernel's answer (through the raw system
//! call, bypassing glibc) for every other clock, or before [`start`]. The definition must
//! be in the executable's own code (a library's object file may not be linked in), so this
//! module only supplies its body.
//!
//! Consequences for the rest of the process once virtual time runs:
//! * `std::time::Instant` follows the virtual clock too. Real-time waits use
//!   [`real_monotonic_ns`] and socket timeouts (the kernel's clock), never `Instant`.
//! * The virtual clock never runs backwards ([`set`] keeps the maximum), because libccp's
//!   `since_usecs` subtracts without a check and would abort the process.
//!
//! [`start`] checks that the interposition is really linked in (an executable without it
//! would silently give libccp the real clock).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Where virtual time starts: one second, so that it is never 0 (libccp treats a 0
/// timestamp as "never").
pub const VIRTUAL_START_NS: u64 = 1_000_000_000;

const NS_PER_SEC: u64 = 1_000_000_000;

static VIRTUAL_ON: AtomicBool = AtomicBool::new(false);
static VIRTUAL_NS: AtomicU64 = AtomicU64::new(0);

/// The body of the executable's `clock_gettime`.
///
/// # Safety
/// Same contract as POSIX `clock_gettime`: `tp` must be null or point to a writable
/// `timespec`.
pub unsafe fn clock_gettime_body(clk: libc::clockid_t, tp: *mut libc::timespec) -> libc::c_int {
    if clk == libc::CLOCK_MONOTONIC && !tp.is_null() && VIRTUAL_ON.load(Ordering::Acquire) {
        let ns = VIRTUAL_NS.load(Ordering::Acquire);
        // SAFETY: `tp` is non-null and, by this function's contract, points to a writable
        // timespec.
        unsafe {
            (*tp).tv_sec = (ns / NS_PER_SEC) as libc::time_t;
            (*tp).tv_nsec = (ns % NS_PER_SEC) as libc::c_long;
        }
        return 0;
    }
    // SAFETY: the system call has the same contract as the libc function (errno is set by
    // `syscall` on failure); arguments are passed through unchanged.
    unsafe { libc::syscall(libc::SYS_clock_gettime, clk, tp) as libc::c_int }
}

/// The kernel's monotonic clock, ns, whatever the virtual clock says.
pub fn real_monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::syscall(libc::SYS_clock_gettime, libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(NS_PER_SEC)
        .saturating_add(ts.tv_nsec as u64)
}

/// The interposition is not in effect.
#[derive(Debug)]
pub struct NotInterposed {
    expected: u64,
    got: u64,
}

impl std::fmt::Display for NotInterposed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "clock_gettime is not interposed in this executable (virtual clock {} ns, read {} ns): libccp would run on real time",
            self.expected, self.got
        )
    }
}

impl std::error::Error for NotInterposed {}

/// Turns virtual time on (idempotent) and returns its current value, ns. Virtual time
/// starts at [`VIRTUAL_START_NS`] and continues from where it was if it already ran.
pub fn start() -> Result<u64, NotInterposed> {
    VIRTUAL_NS.fetch_max(VIRTUAL_START_NS, Ordering::AcqRel);
    VIRTUAL_ON.store(true, Ordering::Release);
    let expected = VIRTUAL_NS.load(Ordering::Acquire);
    let got = read_through_libc();
    if got != expected {
        return Err(NotInterposed { expected, got });
    }
    Ok(expected)
}

/// Moves virtual time forward to `ns` (never backwards); returns the time in force.
pub fn set(ns: u64) -> u64 {
    let prev = VIRTUAL_NS.fetch_max(ns, Ordering::AcqRel);
    prev.max(ns)
}

/// Virtual time, ns.
pub fn now() -> u64 {
    VIRTUAL_NS.load(Ordering::Acquire)
}

/// What any other code in the process reads from `CLOCK_MONOTONIC`.
fn read_through_libc() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; this call resolves to whatever
    // `clock_gettime` the executable links, which is what the check is about.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64) * NS_PER_SEC + ts.tv_nsec as u64
}
