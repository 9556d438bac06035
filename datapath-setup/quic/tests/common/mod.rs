//! What the tests share: the real `ccp-agent` binary started on a private socket, a
//! `ccp-quic serve` on a free loopback port, and `ccp-quic send` runs read back as JSON.
//!
//! Every socket of these tests is named `quich-<pid>-...` under /tmp/ccp and removed at the
//! end. The tests run one at a time (`serial`): each one is a transfer that fills loopback.

#![allow(dead_code)] // each test binary uses a different subset

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};

use ccp_test_support::processes::{self, AgentProcess};
use serde_json::Value;

/// One test at a time.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// A unique socket name for this test process.
pub fn unique(tag: &str) -> String {
    processes::unique("quich-", tag)
}

pub fn quic_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ccp-quic"))
}

/// `ccp-agent`, from the workspace's target directory and profile.
pub fn agent_bin() -> PathBuf {
    processes::workspace_bin(&quic_bin(), "ccp-agent", "ccp-agent")
}

/// A running `ccp-agent` with a flow trace; killed on drop, its socket and trace removed.
pub struct Agent {
    process: AgentProcess,
    pub trace: PathBuf,
}

impl Agent {
    /// Starts the agent on /tmp/ccp/<name> with a flow trace and `args`; waits until it
    /// echoes a SYNC.
    pub fn start(name: &str, args: &[&str]) -> Agent {
        // Two agents may take turns at one name: each keeps its own trace.
        let trace = std::env::temp_dir().join(format!("{}.trace.jsonl", unique(name)));
        let mut cmd = Command::new(agent_bin());
        cmd.args(["--bind", name, "--trace-flows"])
            .arg(&trace)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        Agent {
            process: AgentProcess::start(cmd, name),
            trace,
        }
    }

    /// Kills the agent (SIGKILL: no goodbye, its socket file stays) and waits for it.
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// The flow trace so far, one JSON value per line.
    pub fn trace_lines(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.trace)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.trace);
    }
}

/// A running `ccp-quic serve` on a free loopback port; killed on drop.
pub struct Server {
    child: Child,
    pub addr: String,
}

impl Server {
    pub fn start() -> Server {
        let mut child = Command::new(quic_bin())
            .args(["serve", "--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start ccp-quic serve");
        let out = child.stdout.take().expect("piped");
        let mut line = String::new();
        BufReader::new(out)
            .read_line(&mut line)
            .expect("first line");
        let addr = line
            .strip_prefix("listening ")
            .unwrap_or_else(|| panic!("serve said {line:?}"))
            .trim()
            .to_owned();
        Server { child, addr }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `ccp-quic send` started with `args` after the server's address, its datapath socket
/// bound at /tmp/ccp/`bind`.
pub fn spawn_send_bound(server: &Server, bind: &str, args: &[&str]) -> Child {
    Command::new(quic_bin())
        .arg("send")
        .arg(&server.addr)
        .args(["--bind", bind])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ccp-quic send")
}

/// `ccp-quic send` started with `args` after the server's address, on a socket of its own.
pub fn spawn_send(server: &Server, args: &[&str]) -> Child {
    spawn_send_bound(server, &unique("dp"), args)
}

/// Waits for a send and reads its JSON report.
pub fn report(send: Child) -> Value {
    let out = send.wait_with_output().expect("send ends");
    assert!(
        out.status.success(),
        "send failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("a JSON report")
}

/// Mbit/s of each interval of a report.
pub fn interval_mbps(r: &Value) -> Vec<f64> {
    r["intervals"]
        .as_array()
        .expect("intervals")
        .iter()
        .map(|i| i["sum"]["bits_per_second"].as_f64().expect("a rate") / 1e6)
        .collect()
}

/// Whether the agent steered each interval.
pub fn interval_steered(r: &Value) -> Vec<bool> {
    r["intervals"]
        .as_array()
        .expect("intervals")
        .iter()
        .map(|i| i["streams"][0]["ccp_steered"].as_bool().expect("a flag"))
        .collect()
}

/// A policy file giving every loopback flow `algorithm`; removed on drop.
pub struct Policy(pub PathBuf);

impl Policy {
    pub fn loopback(name: &str, algorithm: &str) -> Policy {
        let path = std::env::temp_dir().join(format!("{name}.policy.toml"));
        std::fs::write(
            &path,
            format!("[[rule]]\nremote_addr = \"127.0.0.1\"\nalgorithm = \"{algorithm}\"\n"),
        )
        .expect("write policy");
        Policy(path)
    }

    pub fn arg(&self) -> &str {
        self.0.to_str().expect("utf-8 path")
    }
}

impl Drop for Policy {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
