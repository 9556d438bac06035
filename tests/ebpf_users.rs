//! A second, unprivileged user beside a root `ccp-ebpf`, also when the daemon was started
//! under umask 000: it may read `status`, but cannot send to the datapath's sockets,
//! change a flow's priority by its 4-tuple, or write the state file. Needs root (to create
//! and remove the user); skips (saying so) without it.
//!
//! Regression: every mode came from the umask; under umask 000 the sockets were
//! world-writable and another user stalled root's flow, and as a non-root user `status`
//! printed "not running (... Permission denied)" while the daemon ran.

mod ebpf_support;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Output};

use ebpf_support::*;

/// A temporary user, removed when dropped.
struct User {
    name: String,
}

impl User {
    fn create(name: &str) -> User {
        let _ = Command::new("userdel").arg(name).output();
        run(&format!("useradd -M -N -s /usr/sbin/nologin {name}"));
        User {
            name: name.to_owned(),
        }
    }

    /// Runs `cmd` (through sh) as this user, with no supplementary groups.
    fn run(&self, cmd: &str) -> Output {
        Command::new("setpriv")
            .args([
                "--reuid",
                &self.name,
                "--regid",
                "nogroup",
                "--clear-groups",
                "sh",
                "-c",
                cmd,
            ])
            .output()
            .expect("setpriv runs")
    }
}

impl Drop for User {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(&self.name).output();
    }
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).expect("stat").mode() & 0o7777
}

#[test]
fn another_user_reads_status_but_cannot_steer_or_reprioritise_root_flows_even_under_umask_000() {
    if skip() {
        return;
    }
    let _g = serial();
    let tag = "usr";
    let cg = Cgroup::new(tag);
    let user = User::create(&format!("ccpt{}", std::process::id() % 100_000));
    // SAFETY: umask only changes this process' (and its children's) creation mask.
    let old = unsafe { libc::umask(0) };
    let mut d = Daemon::start(tag, "ebpfh-agent-usr", &cg, &[]);
    // SAFETY: as above.
    unsafe { libc::umask(old) };

    let shard = format!("/tmp/ccp/ebpfh-dp-{tag}-0");
    assert_eq!(mode(Path::new(&shard)), 0o600, "shard socket");
    assert_eq!(mode(&d.run_dir.join("state")), 0o600, "state file");
    assert_eq!(mode(&d.run_dir), 0o755, "run directory");
    assert_eq!(mode(Path::new("/tmp/ccp")), 0o755, "socket directory");

    let bin = daemon_bin();
    let run_dir = d.run_dir.display().to_string();
    let status = user.run(&format!("{} --run-dir {run_dir} status", bin.display()));
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.status.success() && text.starts_with("running"),
        "status as another user: {text} {}",
        String::from_utf8_lossy(&status.stderr)
    );

    let prio = user.run(&format!(
        "{} --run-dir {run_dir} set-priority --src 10.0.0.1:1 --dst 10.0.0.2:2 --class scavenger",
        bin.display()
    ));
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&prio.stdout),
        String::from_utf8_lossy(&prio.stderr)
    );
    assert!(
        !prio.status.success() && said.contains("permission denied"),
        "set-priority as another user: {said}"
    );

    let send = user.run(&format!(
        "python3 -c 'import socket; socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b\"x\" * 16, \"{shard}\")'"
    ));
    assert!(
        !send.status.success() && String::from_utf8_lossy(&send.stderr).contains("PermissionError"),
        "another user could send to the datapath: {}",
        String::from_utf8_lossy(&send.stderr)
    );
    let write = user.run(&format!("echo pid=1 > {run_dir}/state"));
    assert!(!write.status.success(), "another user wrote the state file");

    let status = d.status();
    assert!(
        status.contains("rejected_commands 1 "),
        "the refused command is not counted: {status}"
    );
    d.stop();
    assert_clean(&d, tag);
}
