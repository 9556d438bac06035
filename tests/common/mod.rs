//! Shared helpers for the integration tests: start the agent binary on a private socket
//! name, and act as a raw datapath on a bound unix datagram socket.

#![allow(dead_code)] // each test binary uses a different subset

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use ccp_test_support::processes::{self, AgentProcess, RawSocket};

/// A running `ccp-agent`.
pub type Agent = AgentProcess;

/// A unique name for this test's sockets.
pub fn unique(tag: &str) -> String {
    processes::unique("t", tag)
}

/// The test datapath binary, `ccp-testdp` (its own package: the agent does not depend on a
/// datapath).
pub fn testdp_bin() -> PathBuf {
    processes::workspace_bin(
        Path::new(env!("CARGO_BIN_EXE_ccp-agent")),
        "ccp-testdp",
        "ccp-testdp",
    )
}

/// Starts the agent bound to /tmp/ccp/<name> with extra arguments, its log on standard
/// error (for [`counters`]), and waits until it answers a SYNC.
pub fn start_agent(name: &str, args: &[&str]) -> Agent {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ccp-agent"));
    cmd.args(["--bind", name])
        .args(args)
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    AgentProcess::start(cmd, name)
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
    raw: RawSocket,
    agent: PathBuf,
}

impl RawDatapath {
    pub fn bind(name: &str, agent: &str) -> RawDatapath {
        RawDatapath {
            raw: RawSocket::bind(name),
            agent: processes::sock(agent),
        }
    }

    pub fn send(&self, msg: &[u8]) {
        self.raw
            .sock
            .send_to(msg, &self.agent)
            .expect("send to agent");
    }

    pub fn recv_timeout(&self, t: Duration) -> Option<Vec<u8>> {
        self.raw.recv_timeout(t).map(|(msg, _)| msg)
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

/// Message types of a list of agent messages.
pub fn types(msgs: &[Vec<u8>]) -> Vec<u8> {
    msgs.iter().map(|m| m[0]).collect()
}
