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
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use ebpf_support::*;

/// A temporary user (and, with `group`, a group it belongs to), removed when dropped.
struct User {
    name: String,
    group: Option<String>,
}

impl User {
    fn create(name: &str) -> User {
        let _ = Command::new("userdel").arg(name).output();
        run(&format!("useradd -M -N -s /usr/sbin/nologin {name}"));
        User {
            name: name.to_owned(),
            group: None,
        }
    }

    fn create_in_group(name: &str, group: &str) -> User {
        let _ = Command::new("userdel").arg(name).output();
        let _ = Command::new("groupdel").arg(group).output();
        run(&format!(
            "groupadd {group} && useradd -M -N -G {group} -s /usr/sbin/nologin {name}"
        ));
        User {
            name: name.to_owned(),
            group: Some(group.to_owned()),
        }
    }

    /// Starts `program args` as this user with its groups, in the background.
    fn spawn(&self, program: &str, args: &[&str], log: &Path) -> Child {
        Command::new("setpriv")
            .args(["--reuid", &self.name, "--regid", "nogroup", "--init-groups"])
            .arg(program)
            .args(args)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).expect("log file"))
            .spawn()
            .expect("setpriv runs")
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
        if let Some(g) = &self.group {
            let _ = Command::new("groupdel").arg(g).output();
            // The socket directory was shared with the group; give it back to root.
            let _ = std::os::unix::fs::chown(ccp_rundir::SOCKET_DIR, Some(0), Some(0));
            let _ = Command::new("chmod")
                .args(["0755", ccp_rundir::SOCKET_DIR])
                .output();
        }
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

    let shard = ccp_rundir::socket_path(&format!("ebpfh-dp-{tag}-0"));
    assert_eq!(mode(&shard), 0o600, "shard socket");
    assert_eq!(mode(&d.run_dir.join("state")), 0o600, "state file");
    assert_eq!(mode(&d.run_dir), 0o755, "run directory");
    assert_eq!(
        mode(Path::new(ccp_rundir::SOCKET_DIR)),
        0o755,
        "socket directory"
    );

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
        "python3 -c 'import socket; socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b\"x\" * 16, \"{}\")'",
        shard.display()
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

/// The setup `datapath-setup/README.md` ("Security") gives for an unprivileged agent: a group
/// that may use the sockets, `ccp-ebpf start --group`, and `ccp-agent` as a member of it.
#[test]
fn an_unprivileged_agent_in_the_datapath_group_controls_root_flows() {
    if skip() {
        return;
    }
    let _g = serial();
    let tag = "ugrp";
    let id = std::process::id() % 100_000;
    let user = User::create_in_group(&format!("ccpa{id}"), &format!("ccpg{id}"));
    let group = user.group.clone().expect("group");
    let net = Net::new(tag, 26, 100);
    let cg = Cgroup::new(tag);
    let mut d = Daemon::start(tag, "ebpfh-agent-ugrp", &cg, &["--group", &group]);
    assert_eq!(
        mode(Path::new(ccp_rundir::SOCKET_DIR)),
        0o775,
        "socket directory"
    );
    assert_eq!(
        mode(&ccp_rundir::socket_path(&format!("ebpfh-dp-{tag}-0"))),
        0o660
    );

    let log = Path::new("/tmp/ebpfh-agent-ugrp.log");
    let agent_sock = ccp_rundir::socket_path("ebpfh-agent-ugrp");
    let mut agent = user.spawn(
        env!("CARGO_BIN_EXE_ccp-agent"),
        &[
            "--bind",
            "ebpfh-agent-ugrp",
            "--group",
            &group,
            "--default",
            "fixed",
            "--fixed-rate-mbps",
            "40",
            "--fixed-cwnd",
            "4000000",
        ],
        log,
    );
    for _ in 0..100 {
        if agent_sock.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let owner = std::fs::metadata(&agent_sock).map(|m| m.uid()).unwrap_or(0);
    let srv = iperf_server(&net, 5201);
    let client = iperf_client(&net, &cg, 5201, 6, "ccp", "");
    std::thread::sleep(Duration::from_secs(3));
    let status = d.status();
    let r = iperf_result(client);
    let _ = agent.kill();
    let _ = agent.wait();
    let agent_log = std::fs::read_to_string(log).unwrap_or_default();
    let _ = std::fs::remove_file(agent_sock);
    let _ = std::fs::remove_file(log);
    assert_ne!(
        owner, 0,
        "the agent's socket should be the user's: {agent_log}"
    );
    assert!(
        status.contains("rate 5000000"),
        "the unprivileged agent's rate was not applied: {status}\n{agent_log}"
    );
    let got = mean_of(&r, 2, 6);
    assert!(
        (got / 40e6 - 1.0).abs() < 0.10,
        "flow ran at {got:.0} bit/s under the agent's 40 Mbit/s: {:?}",
        r.intervals_bps
    );
    // The server's ccp sockets would keep the struct_ops alive past `stop`.
    drop(srv);
    d.stop();
    assert_clean(&d, tag);
}
