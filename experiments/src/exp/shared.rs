//! One eBPF datapath and one agent for all the runs of a `ccp-exp run`: the kernel allows
//! one `ccp` registration, so runs that go at once must share it. Brought up before the
//! first run (`datapath.sh` in `<results>/<scenario>/shared/`, with one policy for every
//! run's ports), taken down after the last or on Ctrl-C; the agent's flow trace is split
//! into each run's directory by the flows' server ports.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::script;

/// How long the datapath and the agent get to come up.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long they get to take everything down.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);
/// Name of a run's slice of the flow trace (the same file a run's own agent writes).
pub const RUN_TRACE: &str = "agent-trace.jsonl";

/// The running shared datapath; taken down when dropped.
#[derive(Debug)]
pub struct SharedDatapath {
    dir: PathBuf,
    child: Child,
    agent: String,
}

impl SharedDatapath {
    /// Writes `datapath.sh` into `dir`, starts it and waits until the datapath and the agent
    /// run. `mm_user` is the user Mahimahi runs flows as, if it is the bottleneck: the agent
    /// shares its socket with that user's group (a `quic:` flow talks to it directly).
    /// With `ack_trace` the datapath also writes every ACK into `dir`.
    pub fn start(
        dir: &Path,
        policy: &str,
        ccp_bin: &Path,
        mm_user: Option<&str>,
        ack_trace: bool,
    ) -> Result<Self, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let script = dir.join("datapath.sh");
        std::fs::write(
            &script,
            script::shared_datapath_script(policy, &ccp_bin.display().to_string(), ack_trace),
        )
        .map_err(|e| format!("{}: {e}", script.display()))?;
        // A `ready` left by an earlier invocation would say "up" before this one is.
        let _ = std::fs::remove_file(dir.join("ready"));
        let log = File::create(dir.join("datapath-sh.log")).map_err(|e| e.to_string())?;
        let mut cmd = Command::new("bash");
        if let Some(user) = mm_user {
            cmd.env("MM_USER", user);
        }
        let child = cmd
            .arg("datapath.sh")
            .current_dir(dir)
            .env("CCP_BIN", ccp_bin)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            // Its own group: Ctrl-C in the terminal reaches the runner, which takes it
            // down in order (ccp-ebpf stop first).
            .process_group(0)
            .spawn()
            .map_err(|e| format!("starting datapath.sh: {e}"))?;
        let mut shared = SharedDatapath {
            dir: dir.to_path_buf(),
            child,
            agent: String::new(),
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(name) = std::fs::read_to_string(dir.join("ready")) {
                shared.agent = name.trim().to_string();
                return Ok(shared);
            }
            if !shared.alive() || Instant::now() > deadline {
                let log = std::fs::read_to_string(dir.join("datapath-sh.log")).unwrap_or_default();
                return Err(format!(
                    "the shared eBPF datapath did not come up ({}): {}",
                    dir.display(),
                    log.trim()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The agent's name (runs pass it on to `run.sh`).
    pub fn agent(&self) -> &str {
        &self.agent
    }

    /// The agent's whole flow trace.
    pub fn trace_path(&self) -> PathBuf {
        self.dir.join(RUN_TRACE)
    }

    /// Whether the datapath and the agent still run.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn stop(&mut self) {
        let _ = std::fs::remove_file(self.dir.join("ready"));
        if !self.alive() {
            return;
        }
        // Only the script: its trap runs `ccp-ebpf stop` before it stops both processes.
        // SAFETY: kill() has no memory effects; the pid is our child's.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        while self.alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if self.alive() {
            // SAFETY: as above; the group is the one the script leads.
            unsafe {
                libc::kill(-(self.child.id() as libc::pid_t), libc::SIGKILL);
            }
            let _ = self.child.wait();
        }
    }
}

impl Drop for SharedDatapath {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Splits a shared flow trace into the runs' directories. A flow belongs to the run that
/// owned its remote port when its create line was written; its later lines follow its
/// (datapath, sid) until its close.
#[derive(Debug, Default)]
pub struct TraceSplitter {
    /// Bytes of the shared trace already read.
    offset: u64,
    /// Where a server port's flows go now.
    by_port: HashMap<u16, PathBuf>,
    /// Where a live flow's lines go.
    by_flow: HashMap<(String, u64), PathBuf>,
    /// Lines of flows no run claimed.
    pub unclaimed: u64,
}

impl TraceSplitter {
    /// From now on flows to `ports` belong to the run in `dir` (whose slice starts empty).
    pub fn claim(&mut self, ports: &[u16], dir: &Path) {
        let _ = std::fs::remove_file(dir.join(RUN_TRACE));
        for p in ports {
            self.by_port.insert(*p, dir.to_path_buf());
        }
    }

    /// Moves the complete lines written to `trace` since the last call into the runs'
    /// slices.
    pub fn pump(&mut self, trace: &Path) -> std::io::Result<()> {
        let Ok(mut f) = File::open(trace) else {
            return Ok(());
        };
        f.seek(SeekFrom::Start(self.offset))?;
        let mut reader = BufReader::new(f);
        let mut out: HashMap<PathBuf, File> = HashMap::new();
        let mut line = String::new();
        loop {
            line.clear();
            let n = reader.read_line(&mut line)?;
            // A line without its newline is still being written.
            if n == 0 || !line.ends_with('\n') {
                break;
            }
            self.offset += n as u64;
            if let Some(dir) = self.owner(&line) {
                let file = match out.entry(dir.clone()) {
                    std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                    std::collections::hash_map::Entry::Vacant(e) => e.insert(
                        OpenOptions::new()
                            .create(true)
                            .append(true)
                            .open(dir.join(RUN_TRACE))?,
                    ),
                };
                file.write_all(line.as_bytes())?;
            } else {
                self.unclaimed += 1;
            }
        }
        Ok(())
    }

    /// The run a trace line belongs to.
    fn owner(&mut self, line: &str) -> Option<PathBuf> {
        let v: serde_json::Value = serde_json::from_str(line).ok()?;
        let key = (
            v.get("datapath")?.as_str()?.to_string(),
            v.get("sid")?.as_u64()?,
        );
        let event = v.get("event").and_then(|e| e.as_str());
        let port = v
            .get("remote")
            .and_then(|r| r.as_str())
            .and_then(|r| r.rsplit_once(':'))
            .and_then(|(_, p)| p.parse::<u16>().ok());
        if event == Some("create")
            && let Some(port) = port
        {
            // A new flow on this sid (libccp reuses sids at once).
            match self.by_port.get(&port) {
                Some(dir) => self.by_flow.insert(key.clone(), dir.clone()),
                None => self.by_flow.remove(&key),
            };
        }
        let dir = self.by_flow.get(&key).cloned();
        if event == Some("close") {
            self.by_flow.remove(&key);
        }
        dir
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_trace_is_split_by_server_port_and_follows_reused_sids() {
        let root = std::env::temp_dir().join(format!("ccp-split-{}", std::process::id()));
        let (a, b) = (root.join("a"), root.join("b"));
        std::fs::create_dir_all(&a).expect("dir");
        std::fs::create_dir_all(&b).expect("dir");
        let trace = root.join("trace.jsonl");
        let line = |sid: u32, event: &str, port: Option<u16>| {
            let mut v =
                serde_json::json!({"datapath": "/tmp/ccp/dp-0", "sid": sid, "event": event});
            if let Some(p) = port {
                v["remote"] = serde_json::json!(format!("10.0.0.1:{p}"));
            }
            format!("{v}\n")
        };
        let mut split = TraceSplitter::default();
        split.claim(&[5201], &a);
        split.claim(&[5217], &b);
        let mut text = line(1, "create", Some(5201))
            + &line(2, "create", Some(5217))
            + &line(1, "report", None)
            + &line(2, "report", None)
            + &line(1, "close", None)
            // sid 1 reused by run b's flow at once.
            + &line(1, "create", Some(5217))
            + &line(1, "report", None)
            + &line(9, "report", None);
        std::fs::write(&trace, &text).expect("write");
        // Half a line is left for the next pass.
        let partial = line(2, "close", None);
        text.push_str(&partial[..10]);
        std::fs::write(&trace, &text).expect("write");
        split.pump(&trace).expect("pump");
        text.push_str(&partial[10..]);
        std::fs::write(&trace, &text).expect("write");
        split.pump(&trace).expect("pump");
        let events = |dir: &Path| -> Vec<(u64, String)> {
            std::fs::read_to_string(dir.join(RUN_TRACE))
                .expect("slice")
                .lines()
                .map(|l| {
                    let v: serde_json::Value = serde_json::from_str(l).expect("json");
                    (
                        v["sid"].as_u64().expect("sid"),
                        v["event"].as_str().expect("e").to_string(),
                    )
                })
                .collect()
        };
        let s = |sid: u64, e: &str| (sid, e.to_string());
        assert_eq!(events(&a), [s(1, "create"), s(1, "report"), s(1, "close")]);
        assert_eq!(
            events(&b),
            [
                s(2, "create"),
                s(2, "report"),
                s(1, "create"),
                s(1, "report"),
                s(2, "close")
            ]
        );
        assert_eq!(split.unclaimed, 1, "sid 9 has no create line");
        let _ = std::fs::remove_dir_all(&root);
    }
}
