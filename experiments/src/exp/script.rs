//! The standalone shell scripts of a run: `run.sh` (sets up the bottleneck and runs the
//! flows; the runner itself executes it, so re-running it repeats the run exactly) and
//! `inner.sh` (the flows, started inside the emulated path).
//!
//! Flow `i` talks to server port `5201 + i` from client port `40001 + i`, so its 4-tuple is
//! known in advance (the agent's policy and priority changes match on ports). Servers run
//! with `-J` so that `--get-server-output` brings the receiver's intervals into the client's
//! JSON (with a text server it brings text, and only the sender's intervals remain).

use std::fmt::Write;

use super::plan::RunSpec;
use crate::emu::trace::Trace;

/// First iperf3 server port.
pub const SERVER_PORT: u16 = 5201;
/// First iperf3 client port.
pub const CLIENT_PORT: u16 = 40001;
/// iperf3 reporting interval, s.
pub const REPORT_INTERVAL_S: f64 = 1.0;
/// The congestion control name of the eBPF datapath.
pub const CCP_KERNEL_NAME: &str = "ccp";

/// Which bottleneck tool a run uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// The project's emulator (`ccp-emu`; the script takes `$CCP_EMU`, else this path).
    Emulator { default_path: String },
    /// Real Mahimahi, run as `user` (it refuses uid 0), inside a namespace of our own.
    Mahimahi { user: String },
}

fn heredoc(out: &mut String, file: &str, body: &str) {
    let _ = writeln!(out, "cat > {file} <<'CCP_EOF'\n{body}CCP_EOF");
}

/// The kernel congestion control a flow's iperf3 asks for.
fn kernel_cc(cc: &str) -> &str {
    if cc.starts_with("ccp:") {
        CCP_KERNEL_NAME
    } else {
        cc
    }
}

/// `inner.sh`: starts every flow at its time and waits for all.
pub fn inner_script(run: &RunSpec) -> String {
    let mut s = String::from(
        "#!/usr/bin/env bash\n\
         # The flows of this run, started inside the emulated path ($MAHIMAHI_BASE = receiver).\n\
         cd \"$(dirname \"$0\")\"\n\
         B=${MAHIMAHI_BASE:-10.0.0.1}\n\
         date +%s%3N > t0\n",
    );
    let _ = writeln!(
        s,
        "flow() {{ sleep \"$2\"; date +%s%3N > flow-$1.start; iperf3 -c \"$B\" -p $(({SERVER_PORT} + $1)) --cport $(({CLIENT_PORT} + $1)) \
         -C \"$4\" -t \"$3\" -i {REPORT_INTERVAL_S} -J --get-server-output > flow-$1.json 2> flow-$1.err; }}"
    );
    for (i, f) in run.flows.iter().enumerate() {
        let dur = (f.stop_s - f.start_s).round().max(1.0) as u64;
        let _ = writeln!(s, "flow {i} {} {dur} {} &", f.start_s, kernel_cc(&f.cc));
        for p in &f.priority {
            let _ = writeln!(
                s,
                "( sleep {}; ${{CCP_PRIORITY_CMD:-false}} 10.0.0.2 {} \"$B\" {} {} || echo \"priority change of flow {i} failed\" >&2 ) &",
                p.at_s,
                u32::from(CLIENT_PORT) + i as u32,
                u32::from(SERVER_PORT) + i as u32,
                p.class
            );
        }
    }
    s.push_str("wait\n");
    s
}

/// `policy.toml` for `ccp-agent`: which algorithm, initial priority and hand-off primary
/// each `ccp:` flow gets, matched on its server port.
pub fn policy(run: &RunSpec) -> Option<String> {
    let mut s = String::new();
    for (i, f) in run.flows.iter().enumerate() {
        let Some(alg) = f.ccp_algorithm() else {
            continue;
        };
        let class = if alg.ends_with("-p") {
            "primary"
        } else {
            "scavenger"
        };
        let port = u32::from(SERVER_PORT) + i as u32;
        let _ = write!(
            s,
            "[[rule]]\nremote_port = \"{port}\"\nalgorithm = \"{alg}\"\npriority = \"{class}\"\n"
        );
        if let Some(p) = &f.primary {
            let _ = writeln!(s, "primary = \"{p}\"");
        }
        s.push('\n');
    }
    (!s.is_empty()).then_some(s)
}

/// The part of `run.sh` that brings up the eBPF datapath and the agent for the run's `ccp:`
/// flows, and takes both down when the script exits (also on failure or SIGTERM).
fn ccp_block(ccp_bin: &str) -> String {
    format!(
        r#"# ccp: flows run on the eBPF datapath (ccp-ebpf registers `ccp`) driven by ccp-agent
# with policy.toml; priority changes go through `ccp-ebpf set-priority`.
export CCP_BIN=${{CCP_BIN:-{ccp_bin}}}
"$CCP_BIN/ccp-agent" check-policy policy.toml || exit 1
if grep -qw {ccp} /proc/sys/net/ipv4/tcp_available_congestion_control; then
  echo "run.sh: \`{ccp}\` is registered already (another datapath runs); stop it first" >&2; exit 1
fi
AGENT=ccp-exp-$$
"$CCP_BIN/ccp-agent" --bind "$AGENT" --default cubic --policy policy.toml --trace-flows agent-trace.jsonl > agent.log 2>&1 & AG=$!
"$CCP_BIN/ccp-ebpf" start --agent "$AGENT" --name "ccp-exp-dp-$$" --no-setsockopt > datapath.log 2>&1 & DP=$!
ccp_down() {{
  "$CCP_BIN/ccp-ebpf" stop >> datapath.log 2>&1
  kill $DP $AG 2>/dev/null; wait $DP $AG 2>/dev/null
  if grep -qw {ccp} /proc/sys/net/ipv4/tcp_available_congestion_control; then
    echo "run.sh: \`{ccp}\` is still registered after ccp-ebpf stop" >&2
  fi
}}
trap 'ccp_down' EXIT
trap 'exit 143' TERM
for _ in $(seq 100); do
  "$CCP_BIN/ccp-ebpf" status > /dev/null 2>&1 && break
  sleep 0.1
done
"$CCP_BIN/ccp-ebpf" status > datapath-status.txt 2>&1 || {{ echo "run.sh: the eBPF datapath did not come up (datapath.log)" >&2; exit 1; }}
kill -0 $AG 2>/dev/null || {{ echo "run.sh: ccp-agent exited (agent.log)" >&2; exit 1; }}
cat > set-priority.sh <<'CCP_EOF'
#!/usr/bin/env bash
# <src> <sport> <dst> <dport> <class>: a running flow's new priority, through the datapath.
exec "$CCP_BIN/ccp-ebpf" set-priority --src "$1:$2" --dst "$3:$4" --class "$5"
CCP_EOF
chmod +x set-priority.sh
export CCP_PRIORITY_CMD="$PWD/set-priority.sh"
"#,
        ccp = CCP_KERNEL_NAME
    )
}

/// `run.sh`: everything needed to repeat the run, as root, from its own directory.
///
/// `ccp_bin` is the directory of `ccp-agent` and `ccp-ebpf` (`$CCP_BIN` overrides it).
pub fn run_script(scenario: &str, run: &RunSpec, backend: &Backend, ccp_bin: &str) -> String {
    let trace = Trace::constant(run.bandwidth_mbps)
        .map(|t| t.to_text())
        .unwrap_or_default();
    let delay_ms = run.rtt_ms / 2;
    let ccs: Vec<&str> = run.flows.iter().map(|f| kernel_cc(&f.cc)).collect();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "#!/usr/bin/env bash\n\
         # Scenario {scenario}, run {id}: {mbps} Mbit/s, {rtt} ms RTT, droptail {buf} bytes.\n\
         # Re-run exactly with `bash run.sh` (as root). Written by `ccp-exp run {scenario}`.\n\
         set -u\n\
         cd \"$(dirname \"$0\")\"",
        id = run.id,
        mbps = run.bandwidth_mbps,
        rtt = run.rtt_ms,
        buf = run.buffer_bytes,
    );
    heredoc(&mut s, "trace", &trace);
    heredoc(&mut s, "inner.sh", &inner_script(run));
    if let Some(p) = policy(run) {
        heredoc(&mut s, "policy.toml", &p);
    }
    s.push_str(
        "rm -f flow-*.json flow-*.err flow-*.start flows.csv up.log down.log emu-stats.json t0\n",
    );
    // Congestion controls must be allowed for unprivileged sockets (Mahimahi runs flows as a
    // normal user) and for a namespace's default (docs/mahimahi.md §1).
    let mut allowed: Vec<&str> = ccs.clone();
    allowed.push("cubic");
    // `ccp` is not registered yet at this point, and needs no entry: the eBPF datapath
    // registers it as TCP_CONG_NON_RESTRICTED.
    allowed.retain(|c| *c != CCP_KERNEL_NAME);
    allowed.sort_unstable();
    allowed.dedup();
    for cc in allowed {
        let _ = writeln!(
            s,
            "grep -qw {cc} /proc/sys/net/ipv4/tcp_allowed_congestion_control || \
             sysctl -qw net.ipv4.tcp_allowed_congestion_control=\"$(cat /proc/sys/net/ipv4/tcp_allowed_congestion_control) {cc}\""
        );
    }
    // Replaced by the eBPF datapath's teardown when the run has `ccp:` flows.
    s.push_str("ccp_down() { :; }\n");
    if ccs.contains(&CCP_KERNEL_NAME) {
        s.push_str(&ccp_block(ccp_bin));
    }
    let ports: Vec<u32> = (0..run.flows.len())
        .map(|i| u32::from(SERVER_PORT) + i as u32)
        .collect();
    let queue = format!(
        "--uplink-queue=droptail --uplink-queue-args=bytes={} --uplink-log=up.log --downlink-log=down.log",
        run.buffer_bytes
    );
    match backend {
        Backend::Emulator { default_path } => {
            let _ = writeln!(s, "CCP_EMU=${{CCP_EMU:-{default_path}}}");
            let mut cmd = String::from(
                "\"$CCP_EMU\" --name \"r$$\" --stats emu-stats.json --flow-log flows.csv",
            );
            for p in &ports {
                let _ = write!(cmd, " --server \"iperf3 -s -J -p {p}\" --wait-port {p}");
            }
            let _ = write!(
                cmd,
                " delay {delay_ms} link trace trace {queue} -- bash \"$PWD/inner.sh\""
            );
            s.push_str(&cmd);
            s.push('\n');
        }
        Backend::Mahimahi { user } => {
            let _ = writeln!(
                s,
                "MM_USER=${{MM_USER:-{user}}}\n\
                 NS=emuh-mm$$\n\
                 ip netns add \"$NS\" && ip -n \"$NS\" link set lo up\n\
                 ip netns exec \"$NS\" sysctl -qw net.ipv4.ip_forward=1\n\
                 # mm-delay and mm-link make namespaces of their own and check ip_forward\n\
                 # there: for the run, new namespaces inherit their creator's settings.\n\
                 INHERIT=$(sysctl -n net.core.devconf_inherit_init_net)\n\
                 sysctl -qw net.core.devconf_inherit_init_net=3\n\
                 trap 'kill $(jobs -p) 2>/dev/null; ip netns del \"$NS\"; sysctl -qw net.core.devconf_inherit_init_net=$INHERIT; ccp_down' EXIT\n\
                 chown -R \"$MM_USER\" ."
            );
            for p in &ports {
                let _ = writeln!(
                    s,
                    "ip netns exec \"$NS\" iperf3 -s -J -p {p} > /dev/null 2>&1 &"
                );
            }
            let _ = writeln!(
                s,
                "sleep 1\n\
                 ip netns exec \"$NS\" runuser -u \"$MM_USER\" -- mm-delay {delay_ms} mm-link trace trace {queue} -- bash \"$PWD/inner.sh\""
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exp::plan::{FlowSpec, PriorityChange};

    fn run() -> RunSpec {
        RunSpec {
            id: "x".into(),
            bandwidth_mbps: 48.0,
            rtt_ms: 30,
            buffer_bytes: 720_000,
            buffer_bdp: 4.0,
            duration_s: 20.0,
            flows: vec![
                FlowSpec {
                    cc: "cubic".into(),
                    start_s: 5.0,
                    stop_s: 20.0,
                    priority: vec![],
                    primary: None,
                },
                FlowSpec {
                    cc: "ccp:proteus-s".into(),
                    start_s: 0.0,
                    stop_s: 20.0,
                    priority: vec![PriorityChange {
                        at_s: 10.0,
                        class: "primary".into(),
                    }],
                    primary: None,
                },
            ],
            measure_from_s: 10.0,
            measure_to_s: 20.0,
            roles: vec!["primary".into(), "competitor".into()],
        }
    }

    #[test]
    fn emulator_script_mimics_the_mahimahi_command_line() {
        let s = run_script(
            "t",
            &run(),
            &Backend::Emulator {
                default_path: "ccp-emu".into(),
            },
            "/opt/ccp/bin",
        );
        assert!(s.contains(
            " delay 15 link trace trace --uplink-queue=droptail --uplink-queue-args=bytes=720000"
        ));
        assert!(s.contains("--server \"iperf3 -s -J -p 5202\" --wait-port 5202"));
        assert!(s.contains("cat > trace <<'CCP_EOF'\n1\n1\n1\n1\nCCP_EOF"));
        assert!(s.contains("export CCP_BIN=${CCP_BIN:-/opt/ccp/bin}"));
        assert!(s.contains("\"$CCP_BIN/ccp-agent\" check-policy policy.toml || exit 1"));
        assert!(s.contains("--bind \"$AGENT\" --default cubic --policy policy.toml"));
        assert!(s.contains("ccp-ebpf\" start --agent \"$AGENT\""));
        assert!(s.contains("set-priority --src \"$1:$2\" --dst \"$3:$4\" --class \"$5\""));
        // Teardown is armed before anything can fail after the daemon started.
        let (start, trap) = (
            s.find("ccp-ebpf\" start").expect("start"),
            s.find("trap 'ccp_down' EXIT").expect("trap"),
        );
        assert!(start < trap && trap < s.find("status > datapath-status.txt").expect("wait"));
    }

    #[test]
    fn mahimahi_script_runs_as_a_normal_user_with_forwarding() {
        let s = run_script(
            "t",
            &run(),
            &Backend::Mahimahi { user: "mm".into() },
            "/opt/ccp/bin",
        );
        assert!(s.contains("runuser -u \"$MM_USER\" -- mm-delay 15 mm-link trace trace"));
        assert!(s.contains("net.ipv4.ip_forward=1"));
        assert!(s.contains("sysctl -qw net.core.devconf_inherit_init_net=3"));
        assert!(s.contains("net.core.devconf_inherit_init_net=$INHERIT; ccp_down' EXIT"));
        assert!(s.contains("grep -qw cubic /proc/sys/net/ipv4/tcp_allowed_congestion_control"));
        assert!(s.contains("ip netns del \"$NS\"; sysctl -qw"));
        assert!(!s.contains("grep -qw ccp /proc/sys/net/ipv4/tcp_allowed_congestion_control"));
    }

    #[test]
    fn runs_without_ccp_flows_start_no_datapath() {
        let mut r = run();
        r.flows[1].cc = "bbr".into();
        let s = run_script(
            "t",
            &r,
            &Backend::Emulator {
                default_path: "ccp-emu".into(),
            },
            "/opt/ccp/bin",
        );
        assert!(!s.contains("ccp-ebpf") && !s.contains("ccp-agent"));
        assert!(policy(&r).is_none());
    }

    #[test]
    fn inner_script_starts_flows_on_fixed_ports_at_their_times() {
        let s = inner_script(&run());
        assert!(s.contains("flow 0 5 15 cubic &"));
        assert!(s.contains("flow 1 0 20 ccp &"));
        assert!(
            s.contains("sleep 10; ${CCP_PRIORITY_CMD:-false} 10.0.0.2 40002 \"$B\" 5202 primary")
        );
        let p = policy(&run()).expect("one ccp flow");
        assert!(p.contains(
            "remote_port = \"5202\"\nalgorithm = \"proteus-s\"\npriority = \"scavenger\"\n\n"
        ));
    }

    #[test]
    fn a_flow_that_names_a_primary_gets_it_in_its_policy_rule() {
        let mut r = run();
        r.flows[1].primary = Some("cubic".into());
        let p = policy(&r).expect("one ccp flow");
        assert!(p.contains("priority = \"scavenger\"\nprimary = \"cubic\"\n"));
    }
}
