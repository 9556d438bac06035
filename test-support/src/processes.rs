//! The processes and sockets of integration tests: workspace binaries built on demand, the
//! real `ccp-agent` on a private socket name, and bound datagram sockets that stand in for
//! a datapath or probe the agent.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Where datapaths and the agent bind, and the socket path of a bare name there.
pub use ccp_rundir::{SOCKET_DIR, socket_path as sock};

/// How long a started agent has to answer its first SYNC.
const AGENT_START_TIMEOUT: Duration = Duration::from_secs(20);

/// A name unique to this test process and call: `<prefix><pid>-<tag>-<n>`, so that test
/// binaries running at once never share a socket.
pub fn unique(prefix: &str, tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}{}-{tag}-{n}", std::process::id())
}

/// The binary `bin` of workspace package `package`, in the target directory and profile of
/// `beside` (a binary cargo built for the calling test). Another package's binaries are not
/// built by `cargo test -p <caller>`, so cargo builds it here, once per test process (a
/// no-op when it is up to date, and never a stale binary).
pub fn workspace_bin(beside: &Path, package: &str, bin: &str) -> PathBuf {
    static BUILT: Mutex<Vec<(String, PathBuf)>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, path)) = built.iter().find(|(b, _)| b == bin) {
        return path.clone();
    }
    let profile_dir = beside
        .parent()
        .expect("a built binary is in a profile directory");
    let target_dir = profile_dir.parent().expect("a target directory");
    let mut cargo = Command::new(env!("CARGO"));
    cargo
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["build", "--quiet", "-p", package, "--bin", bin])
        .arg("--target-dir")
        .arg(target_dir);
    // A profile builds into the directory of its name, except `dev` (into `debug`).
    match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => {}
        Some(profile) => {
            cargo.args(["--profile", profile]);
        }
    }
    let status = cargo.status().expect("run cargo");
    assert!(
        status.success(),
        "cargo build -p {package} --bin {bin} failed"
    );
    let path = profile_dir.join(bin);
    built.push((bin.to_owned(), path.clone()));
    path
}

/// A bound unix datagram socket under [`SOCKET_DIR`], removed on drop.
#[derive(Debug)]
pub struct RawSocket {
    pub sock: UnixDatagram,
    pub path: PathBuf,
}

impl RawSocket {
    pub fn bind(name: &str) -> RawSocket {
        std::fs::create_dir_all(SOCKET_DIR).expect("the socket directory");
        let path = sock(name);
        let _ = std::fs::remove_file(&path);
        let sock = UnixDatagram::bind(&path).expect("bind a test socket");
        RawSocket { sock, path }
    }

    /// The next datagram and its sender's address, if one comes within `t`.
    pub fn recv_timeout(&self, t: Duration) -> Option<(Vec<u8>, Option<PathBuf>)> {
        self.sock.set_read_timeout(Some(t)).expect("timeout");
        let mut buf = vec![0u8; 65536];
        let (n, from) = self.sock.recv_from(&mut buf).ok()?;
        Some((buf[..n].to_vec(), from.as_pathname().map(Path::to_owned)))
    }
}

impl Drop for RawSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A running agent bound to a socket name; killed on drop and its socket removed unless it
/// stopped on SIGTERM (SIGKILL leaves it no chance to remove the socket itself).
#[derive(Debug)]
pub struct AgentProcess {
    child: Option<Child>,
    pub name: String,
    /// It exited on SIGTERM and removed its own socket (another agent may hold the name).
    stopped: bool,
}

impl AgentProcess {
    /// Spawns `cmd` (an agent told to bind `name`) and waits until it answers a SYNC.
    pub fn start(mut cmd: Command, name: &str) -> AgentProcess {
        let child = cmd.spawn().expect("start the agent");
        let agent = AgentProcess {
            child: Some(child),
            name: name.to_owned(),
            stopped: false,
        };
        let probe = RawSocket::bind(&format!("{name}-probe"));
        let deadline = Instant::now() + AGENT_START_TIMEOUT;
        loop {
            let _ = probe.sock.send_to(&ccp_wire::encode_sync(0, 1), sock(name));
            if probe.recv_timeout(Duration::from_millis(100)).is_some() {
                return agent;
            }
            assert!(Instant::now() < deadline, "agent {name} did not come up");
        }
    }

    /// The running agent's pid.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends a signal to the running agent.
    pub fn signal(&self, sig: i32) {
        let pid = self.child.as_ref().expect("running").id() as libc::pid_t;
        // SAFETY: kill(2) on the pid of a child we started and have not reaped.
        unsafe { libc::kill(pid, sig) };
    }

    /// Stops the agent with SIGTERM; returns whether it exited successfully and its
    /// standard error (when the command piped it).
    pub fn stop(mut self) -> (bool, String) {
        let child = self.child.take().expect("running");
        // SAFETY: kill(2) on the pid of a child we started and have not reaped.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        let out = child.wait_with_output().expect("the agent exits");
        self.stopped = true;
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Kills the agent (SIGKILL: no goodbye, its socket file stays until drop).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        self.kill();
        if !self.stopped {
            let _ = std::fs::remove_file(sock(&self.name));
        }
    }
}
