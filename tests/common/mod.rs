//! Shared helpers for the integration tests: start the agent binary on a private socket
//! name, and act as a raw datapath on a bound unix datagram socket.

#![allow(dead_code)] // each test binary uses a different subset

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A unique name for this test's sockets.
pub fn unique(tag: &str) -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("t{}-{}-{}", std::process::id(), tag, n)
}

/// The test datapath binary, `ccp-testdp`. It belongs to its own package (the agent does
/// not depend on a datapath), so `cargo test -p ccp-agent` does not build it: it is built
/// here, once per test process, into the agent's target directory and profile.
pub fn testdp_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let profile_dir = Path::new(env!("CARGO_BIN_EXE_ccp-agent"))
            .parent()
            .expect("the agent binary is in a profile directory");
        let target_dir = profile_dir.parent().expect("a target directory");
        let mut cargo = Command::new(env!("CARGO"));
        cargo
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args([
                "build",
                "--quiet",
                "-p",
                "ccp-testdp",
                "--bin",
                "ccp-testdp",
            ])
            .arg("--target-dir")
            .arg(target_dir);
        if profile_dir.ends_with("release") {
            cargo.arg("--release");
        }
        let status = cargo.status().expect("run cargo");
        assert!(status.success(), "cargo build -p ccp-testdp failed");
        profile_dir.join("ccp-testdp")
    })
    .clone()
}

/// A running `ccp-agent`; killed on drop, its socket removed.
pub struct Agent {
    pub child: Option<Child>,
    pub name: String,
}

impl Agent {
    /// Starts the agent bound to /tmp/ccp/<name> with extra arguments, and waits until it
    /// answers a SYNC.
    pub fn start(name: &str, args: &[&str]) -> Agent {
        let child = Command::new(env!("CARGO_BIN_EXE_ccp-agent"))
            .args(["--bind", name])
            .args(args)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start ccp-agent");
        let agent = Agent {
            child: Some(child),
            name: name.to_owned(),
        };
        let probe = RawDatapath::bind(&format!("{name}-probe"), name);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let _ = probe
                .sock
                .send_to(&ccp_wire::encode_sync(0, 1), &probe.agent);
            if probe.recv_timeout(Duration::from_millis(100)).is_some() {
                break;
            }
            assert!(Instant::now() < deadline, "agent {name} did not come up");
        }
        agent
    }

    /// Sends a signal to the agent.
    pub fn signal(&self, sig: i32) {
        let pid = self.child.as_ref().expect("running").id() as i32;
        // SAFETY: kill(2) on the pid of a child we started and have not reaped.
        unsafe { libc_kill(pid, sig) };
    }

    /// Stops the agent with SIGTERM; returns its exit success and standard error.
    pub fn stop(mut self) -> (bool, String) {
        let child = self.child.take().expect("running");
        // SAFETY: kill(2) on the pid of a child we started and have not reaped.
        unsafe { libc_kill(child.id() as i32, 15) };
        let out = child.wait_with_output().expect("agent exits");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

unsafe extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
            // Regression: SIGKILL leaves the agent no chance to remove its socket, and the
            // suite left /tmp/ccp/t<pid>-rate-0 behind.
            let _ = std::fs::remove_file(format!("/tmp/ccp/{}", self.name));
        }
    }
}

/// The counters the agent prints when it stops.
pub fn counters(stderr: &str) -> serde_json::Value {
    let line = stderr
        .lines()
        .rev()
        .find(|l| l.contains("counters="))
        .unwrap_or_else(|| panic!("no counters in:\n{stderr}"));
    let json = &line[line.find("counters=").expect("found") + "counters=".len()..];
    let json = json.split(" agent stopped").next().expect("json");
    serde_json::from_str(json.trim()).unwrap_or_else(|e| panic!("bad counters {json}: {e}"))
}

/// A datapath made of a bound unix datagram socket.
pub struct RawDatapath {
    pub sock: UnixDatagram,
    pub path: PathBuf,
    pub agent: PathBuf,
}

impl RawDatapath {
    pub fn bind(name: &str, agent: &str) -> RawDatapath {
        std::fs::create_dir_all("/tmp/ccp").expect("/tmp/ccp");
        let path = PathBuf::from(format!("/tmp/ccp/{name}"));
        let _ = std::fs::remove_file(&path);
        let sock = UnixDatagram::bind(&path).expect("bind datapath socket");
        RawDatapath {
            sock,
            path,
            agent: PathBuf::from(format!("/tmp/ccp/{agent}")),
        }
    }

    pub fn send(&self, msg: &[u8]) {
        self.sock.send_to(msg, &self.agent).expect("send to agent");
    }

    pub fn recv_timeout(&self, t: Duration) -> Option<Vec<u8>> {
        self.sock.set_read_timeout(Some(t)).expect("timeout");
        let mut buf = vec![0u8; 65536];
        self.sock.recv(&mut buf).ok().map(|n| buf[..n].to_vec())
    }

    /// Sends SYNC and returns every message that came before its echo.
    pub fn sync(&self, token: u64) -> Vec<Vec<u8>> {
        self.send(&ccp_wire::encode_sync(0, token));
        let mut before = Vec::new();
        loop {
            let msg = self
                .recv_timeout(Duration::from_secs(10))
                .expect("agent answers");
            if ccp_wire::decode(&msg) == Ok(ccp_wire::DatapathMsg::Sync { sid: 0, token }) {
                return before;
            }
            before.push(msg);
        }
    }
}

impl Drop for RawDatapath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Message types of a list of agent messages.
pub fn types(msgs: &[Vec<u8>]) -> Vec<u8> {
    msgs.iter().map(|m| m[0]).collect()
}
