//! The command line as a shell pipeline uses it: a listing whose reader has gone ends
//! quietly instead of panicking on the closed stdout. Needs nothing but the binary.

use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

/// A pipe whose read end is already closed: every write to the other end fails.
fn pipe_without_reader() -> OwnedFd {
    let mut fds = [0; 2];
    // SAFETY: pipe() writes two new descriptors into the array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
    // SAFETY: both descriptors are new and owned only here.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    write
}

#[test]
fn a_listing_whose_reader_has_gone_ends_quietly() {
    for args in [&["list"][..], &["run", "jain", "--dry-run"][..]] {
        let o = Command::new(env!("CARGO_BIN_EXE_ccp-exp"))
            .args(args)
            .stdout(Stdio::from(pipe_without_reader()))
            .stderr(Stdio::piped())
            .output()
            .expect("ccp-exp runs");
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(!stderr.contains("panicked"), "ccp-exp {args:?}: {stderr}");
        assert_eq!(o.status.signal(), Some(libc::SIGPIPE), "ccp-exp {args:?}");
    }
}
