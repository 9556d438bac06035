//! The standalone shell scripts of a run: `run.sh` (sets up the bottleneck and runs the
//! flows; the runner itself executes it, so re-running it repeats the run exactly) and
//! `inner.sh` (the flows, started inside the emulated path).
//!
//! Each flow talks from a client port to a server port fixed in advance (see
//! [`ports`](super::ports)), so its 4-tuple is known before it starts: the agent's policy and
//! priority changes match on ports. Servers run with `-J` so that `--get-server-output`
//! brings the receiver's intervals into the client's JSON (with a text server it brings
//! text, and only the sender's intervals remain).

use std::fmt::Write;

use super::plan::{FlowSpec, RunSpec, Testbed};
use super::ports::{self, FlowPorts};
use crate::emu::trace::{IP_PACKET_BYTES, OPPORTUNITY_BYTES, Trace};

/// iperf3 reporting interval, s.
pub const REPORT_INTERVAL_S: f64 = 1.0;
/// The congestion control name of the eBPF datapath.
pub const CCP_KERNEL_NAME: &str = "ccp";
/// Set (to the agent's name) in a run's environment when `ccp-exp run` brought up one eBPF
/// datapath and agent for all its runs; `run.sh` then brings up none of its own.
pub const SHARED_AGENT_ENV: &str = "CCP_SHARED_AGENT";

/// Which bottleneck tool a run uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// The project's emulator (`ccp-emu`; the script takes `$CCP_EMU`, else this path).
    Emulator { default_path: String },
    /// Real Mahimahi, run as `user` (it refuses uid 0), inside a namespace of our own.
    Mahimahi { user: String },
}

impl Backend {
    /// The unprivileged user whose flows reach the agent, if the bottleneck runs them as one.
    pub fn flow_user(&self) -> Option<&str> {
        match self {
            Backend::Emulator { .. } => None,
            Backend::Mahimahi { user } => Some(user),
        }
    }
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

/// `inner.sh`: starts every flow at its time and waits for all. A `quic:` flow is a
/// `ccp-quic send` steered by the run's agent (`$CCP_AGENT`), its priority changes given to
/// it as `--priority-at`; the others are iperf3 clients, whose priority changes go through
/// `$CCP_PRIORITY_CMD`.
pub fn inner_script(run: &RunSpec, ports: &[FlowPorts]) -> String {
    let mut s = String::from(
        "#!/usr/bin/env bash\n\
         # The flows of this run, started inside the emulated path ($MAHIMAHI_BASE = receiver).\n\
         cd \"$(dirname \"$0\")\"\n\
         B=${MAHIMAHI_BASE:-10.0.0.1}\n\
         date +%s%3N > t0\n",
    );
    let _ = writeln!(
        s,
        "flow() {{ sleep \"$2\"; date +%s%3N > flow-$1.start; iperf3 -c \"$B\" -p \"$5\" --cport \"$6\" \
         -C \"$4\" -t \"$3\" -i {REPORT_INTERVAL_S} -J --get-server-output > flow-$1.json 2> flow-$1.err; }}"
    );
    if run.flows.iter().any(FlowSpec::quic) {
        let _ = writeln!(
            s,
            "qflow() {{ sleep \"$2\"; date +%s%3N > flow-$1.start; \"$CCP_BIN/ccp-quic\" send \"$B:$4\" --cport \"$5\" \
             --time \"$3\" --interval {REPORT_INTERVAL_S} --agent \"$CCP_AGENT\" \"${{@:6}}\" > flow-$1.json 2> flow-$1.err; }}"
        );
    }
    for (i, (f, p)) in run.flows.iter().zip(ports).enumerate() {
        let dur = (f.stop_s - f.start_s).round().max(1.0) as u64;
        if f.quic() {
            let changes: String = f
                .priority
                .iter()
                .map(|c| format!(" --priority-at {}:{}", c.at_s - f.start_s, c.class))
                .collect();
            let _ = writeln!(
                s,
                "qflow {i} {} {dur} {} {}{changes} &",
                f.start_s, p.server, p.client
            );
            continue;
        }
        let _ = writeln!(
            s,
            "flow {i} {} {dur} {} {} {} &",
            f.start_s,
            kernel_cc(&f.cc),
            p.server,
            p.client
        );
        for c in &f.priority {
            let _ = writeln!(
                s,
                "( sleep {}; ${{CCP_PRIORITY_CMD:-false}} 10.0.0.2 {} \"$B\" {} {} || echo \"priority change of flow {i} failed\" >&2 ) &",
                c.at_s, p.client, p.server, c.class
            );
        }
    }
    s.push_str("wait\n");
    s
}

/// The command that serves flow `f` on port `p` at the receiver.
fn server_command(f: &FlowSpec, p: u16) -> String {
    if f.quic() {
        format!("\"$CCP_BIN/ccp-quic\" serve --listen 0.0.0.0:{p}")
    } else {
        format!("iperf3 -s -J -p {p}")
    }
}

/// Brings up the eBPF datapath and `ccp-agent` with `policy.toml` and arms their teardown
/// (also on failure or SIGTERM). Leaves the agent's name in `$AGENT`. `datapath_args` go
/// to `ccp-ebpf start` as they are.
fn ccp_up(datapath_args: &str) -> String {
    format!(
        r#"if grep -qw {ccp} /proc/sys/net/ipv4/tcp_available_congestion_control; then
  echo "\`{ccp}\` is registered already (another datapath runs); stop it first" >&2; exit 1
fi
"$CCP_BIN/ccp-agent" check-policy policy.toml || exit 1
AGENT=ccp-exp-$$
# Under Mahimahi a quic: flow runs as $MM_USER and talks to the agent itself: the agent
# shares its socket and the socket directory with that user's group for the run.
GROUP=()
[ -n "${{MM_USER:-}}" ] && GROUP=(--group "$(id -gn "$MM_USER")")
"$CCP_BIN/ccp-agent" --bind "$AGENT" "${{GROUP[@]}}" --default cubic --policy policy.toml --trace-flows agent-trace.jsonl > agent.log 2>&1 & AG=$!
"$CCP_BIN/ccp-ebpf" start --no-pin --agent "$AGENT" --name "ccp-exp-dp-$$" --no-setsockopt{datapath_args} > datapath.log 2>&1 & DP=$!
ccp_down() {{
  "$CCP_BIN/ccp-ebpf" stop >> datapath.log 2>&1
  kill $DP $AG 2>/dev/null; wait $DP $AG 2>/dev/null
  [ ${{#GROUP[@]}} -gt 0 ] && chgrp root {dir} && chmod 0755 {dir}
  if grep -qw {ccp} /proc/sys/net/ipv4/tcp_available_congestion_control; then
    echo "\`{ccp}\` is still registered after ccp-ebpf stop" >&2
  fi
}}
trap 'ccp_down' EXIT
trap 'exit 143' TERM
for _ in $(seq 100); do
  "$CCP_BIN/ccp-ebpf" status > /dev/null 2>&1 && break
  sleep 0.1
done
"$CCP_BIN/ccp-ebpf" status > datapath-status.txt 2>&1 || {{ echo "the eBPF datapath did not come up (datapath.log)" >&2; exit 1; }}
kill -0 $AG 2>/dev/null || {{ echo "ccp-agent exited (agent.log)" >&2; exit 1; }}
"#,
        ccp = CCP_KERNEL_NAME,
        dir = ccp_rundir::SOCKET_DIR,
    )
}

/// The part of `run.sh` for `ccp:` flows: the eBPF datapath (`ccp-ebpf` registers `ccp`)
/// driven by `ccp-agent` with `policy.toml`, brought up for this run unless `ccp-exp run`
/// shares its own among concurrent runs; priority changes go through `ccp-ebpf set-priority`.
fn ccp_block(ccp_bin: &str) -> String {
    format!(
        r#"export CCP_BIN=${{CCP_BIN:-{ccp_bin}}}
if [ -n "${{{shared}:-}}" ]; then
  # ccp-exp brought up one datapath and agent for all its runs; its policy covers this
  # run's ports.
  grep -qw {ccp} /proc/sys/net/ipv4/tcp_available_congestion_control || {{ echo "run.sh: the shared eBPF datapath is gone" >&2; exit 1; }}
else
{up}fi
# The agent's name, for flows on the QUIC datapath.
export CCP_AGENT=${{{shared}:-$AGENT}}
cat > set-priority.sh <<'CCP_EOF'
#!/usr/bin/env bash
# <src> <sport> <dst> <dport> <class>: a running flow's new priority, through the datapath.
exec "$CCP_BIN/ccp-ebpf" set-priority --src "$1:$2" --dst "$3:$4" --class "$5"
CCP_EOF
chmod +x set-priority.sh
export CCP_PRIORITY_CMD="$PWD/set-priority.sh"
"#,
        shared = SHARED_AGENT_ENV,
        ccp = CCP_KERNEL_NAME,
        up = ccp_up(""),
    )
}

/// `datapath.sh`: the eBPF datapath and agent that `ccp-exp run` shares among its runs, with
/// one policy for all of them. Writes `ready` (the agent's name) once both run, then stays
/// until SIGTERM (or until one of them dies) and takes both down. With `ack_trace` the
/// datapath writes every ACK to `ack-trace-<pid>.csv` beside it (one file per invocation, so
/// a resumed grid keeps the earlier ones).
pub fn shared_datapath_script(policy: &str, ccp_bin: &str, ack_trace: bool) -> String {
    let mut s = String::from(
        "#!/usr/bin/env bash\n\
         # The eBPF datapath and ccp-agent shared by the runs of one `ccp-exp run`.\n\
         set -u\n\
         cd \"$(dirname \"$0\")\"\n\
         rm -f ready\n",
    );
    heredoc(&mut s, "policy.toml", policy);
    let _ = write!(
        s,
        "export CCP_BIN=${{CCP_BIN:-{ccp_bin}}}\n{}echo \"$AGENT\" > ready\n\
         wait -n $DP $AG\n\
         echo \"datapath.sh: ccp-ebpf or ccp-agent exited (datapath.log, agent.log)\" >&2\n\
         exit 1\n",
        ccp_up(if ack_trace {
            " --ack-trace \"ack-trace-$$.csv\""
        } else {
            ""
        })
    );
    s
}

/// The loss shells of a run, Mahimahi's order and arguments (`uplink RATE`).
fn loss_args(run: &RunSpec) -> Vec<String> {
    (run.uplink_loss > 0.0)
        .then(|| format!("uplink {}", run.uplink_loss))
        .into_iter()
        .collect()
}

/// The droptail limit that gives the run its buffer. Mahimahi counts each packet's 4-byte TUN
/// header against the limit, so 4.5 KB holds two 1500-byte packets; a router counts the IP
/// packet, three. The serial test bed counts like a router: its limit holds as many whole
/// packets as the buffer does on one.
fn queue_limit_bytes(run: &RunSpec) -> u64 {
    match run.testbed {
        Testbed::Mahimahi => run.buffer_bytes,
        Testbed::Serial => (run.buffer_bytes * OPPORTUNITY_BYTES).div_ceil(IP_PACKET_BYTES),
    }
}

/// `run.sh`: everything needed to repeat the run, as root, from its own directory.
///
/// `ports` are the flows' ports ([`ports`](super::ports)); `ccp_bin` is the directory of
/// `ccp-agent` and `ccp-ebpf` (`$CCP_BIN` overrides it).
pub fn run_script(
    scenario: &str,
    run: &RunSpec,
    flow_ports: &[FlowPorts],
    backend: &Backend,
    ccp_bin: &str,
) -> String {
    let trace = Trace::constant(run.bandwidth_mbps)
        .map(|t| t.to_text())
        .unwrap_or_default();
    let delay_ms = run.rtt_ms / 2;
    // The kernel congestion controls of the TCP flows.
    let ccs: Vec<&str> = run
        .flows
        .iter()
        .filter(|f| !f.quic())
        .map(|f| kernel_cc(&f.cc))
        .collect();
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
    heredoc(&mut s, "inner.sh", &inner_script(run, flow_ports));
    if let Some(p) = ports::run_policy(run, flow_ports) {
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
    if let Some(user) = backend.flow_user() {
        let _ = writeln!(s, "MM_USER=${{MM_USER:-{user}}}");
    }
    // Replaced by the eBPF datapath's teardown when the run has `ccp:` or `quic:` flows.
    s.push_str("ccp_down() { :; }\n");
    if run.flows.iter().any(|f| f.ccp_algorithm().is_some()) {
        s.push_str(&ccp_block(ccp_bin));
    }
    let servers: Vec<(String, u16)> = run
        .flows
        .iter()
        .zip(flow_ports)
        .map(|(f, p)| (server_command(f, p.server), p.server))
        .collect();
    let loss = loss_args(run);
    let queue = format!(
        "--uplink-queue=droptail --uplink-queue-args=bytes={} --uplink-log=up.log --downlink-log=down.log",
        queue_limit_bytes(run)
    );
    match backend {
        Backend::Emulator { default_path } => {
            let _ = writeln!(s, "CCP_EMU=${{CCP_EMU:-{default_path}}}");
            let mut cmd = String::from(
                "\"$CCP_EMU\" --name \"r$$\" --stats emu-stats.json --flow-log flows.csv",
            );
            let mut queue = queue;
            if run.testbed == Testbed::Serial {
                cmd.push_str(" --no-gso");
                queue.push_str(" --timing=serial");
            }
            for (server, p) in &servers {
                let server = server.replace('"', "\\\"");
                let _ = write!(cmd, " --server \"{server}\" --wait-port {p}");
            }
            let _ = write!(
                cmd,
                " delay {delay_ms}{} link trace trace {queue} -- bash \"$PWD/inner.sh\"",
                loss.iter()
                    .map(|l| format!(" loss {l}"))
                    .collect::<String>()
            );
            s.push_str(&cmd);
            s.push('\n');
        }
        Backend::Mahimahi { .. } => {
            let _ = writeln!(
                s,
                "NS=emuh-mm$$\n\
                 ip netns add \"$NS\" && ip -n \"$NS\" link set lo up\n\
                 ip netns exec \"$NS\" sysctl -qw net.ipv4.ip_forward=1\n\
                 # mm-delay and mm-link make namespaces of their own and check ip_forward\n\
                 # there: for the run, new namespaces inherit their creator's settings.\n\
                 INHERIT=$(sysctl -n net.core.devconf_inherit_init_net)\n\
                 sysctl -qw net.core.devconf_inherit_init_net=3\n\
                 trap 'kill $(jobs -p) 2>/dev/null; ip netns del \"$NS\"; sysctl -qw net.core.devconf_inherit_init_net=$INHERIT; ccp_down' EXIT\n\
                 chown -R \"$MM_USER\" ."
            );
            for (server, _) in &servers {
                let _ = writeln!(s, "ip netns exec \"$NS\" {server} > /dev/null 2>&1 &");
            }
            let _ = writeln!(
                s,
                "sleep 1\n\
                 ip netns exec \"$NS\" runuser -u \"$MM_USER\" -- mm-delay {delay_ms}{} mm-link trace trace {queue} -- bash \"$PWD/inner.sh\"",
                loss.iter()
                    .map(|l| format!(" mm-loss {l}"))
                    .collect::<String>()
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exp::plan::{FlowSpec, PriorityChange, Testbed};

    /// The ports of the test run's two flows (slot 0, no classes).
    fn ports() -> Vec<FlowPorts> {
        (0..2)
            .map(|i| FlowPorts {
                client: 20001 + i,
                server: 5201 + i,
            })
            .collect()
    }

    fn run() -> RunSpec {
        RunSpec {
            id: "x".into(),
            bandwidth_mbps: 48.0,
            rtt_ms: 30,
            buffer_bytes: 720_000,
            buffer_bdp: 4.0,
            uplink_loss: 0.0,
            testbed: Testbed::Mahimahi,
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
            repeat: 1,
        }
    }

    /// `run.sh` of `r` on the emulator.
    fn emulator_script(r: &RunSpec) -> String {
        run_script(
            "t",
            r,
            &ports(),
            &Backend::Emulator {
                default_path: "ccp-emu".into(),
            },
            "/opt/ccp/bin",
        )
    }

    #[test]
    fn emulator_script_mimics_the_mahimahi_command_line() {
        let s = emulator_script(&run());
        assert!(s.contains(
            " delay 15 link trace trace --uplink-queue=droptail --uplink-queue-args=bytes=720000"
        ));
        assert!(s.contains("--server \"iperf3 -s -J -p 5202\" --wait-port 5202"));
        assert!(s.contains("cat > trace <<'CCP_EOF'\n1\n1\n1\n1\nCCP_EOF"));
        assert!(s.contains("export CCP_BIN=${CCP_BIN:-/opt/ccp/bin}"));
        assert!(s.contains("\"$CCP_BIN/ccp-agent\" check-policy policy.toml || exit 1"));
        assert!(
            s.contains("--bind \"$AGENT\" \"${GROUP[@]}\" --default cubic --policy policy.toml")
        );
        // Unpinned, so that a killed run leaves no registration behind.
        assert!(s.contains("ccp-ebpf\" start --no-pin --agent \"$AGENT\""));
        assert!(s.contains("set-priority --src \"$1:$2\" --dst \"$3:$4\" --class \"$5\""));
        // Teardown is armed before anything can fail after the daemon started.
        let (start, trap) = (
            s.find("ccp-ebpf\" start").expect("start"),
            s.find("trap 'ccp_down' EXIT").expect("trap"),
        );
        assert!(start < trap && trap < s.find("status > datapath-status.txt").expect("wait"));
    }

    #[test]
    fn the_serial_test_bed_spreads_opportunities_and_sends_packet_by_packet() {
        assert!(!emulator_script(&run()).contains("--timing"));
        let s = emulator_script(&RunSpec {
            testbed: Testbed::Serial,
            ..run()
        });
        assert!(s.contains("--flow-log flows.csv --no-gso"));
        assert!(s.contains("--downlink-log=down.log --timing=serial -- bash"));
        // 720 KB is 480 packets of 1500 bytes, with their TUN headers 721,920 bytes.
        assert!(s.contains("--uplink-queue-args=bytes=721920 "));
    }

    #[test]
    fn mahimahi_script_runs_as_a_normal_user_with_forwarding() {
        let s = run_script(
            "t",
            &run(),
            &ports(),
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
    fn the_shared_datapath_writes_an_ack_trace_only_when_asked() {
        let start = |s: &str| {
            s.lines()
                .find(|l| l.contains("ccp-ebpf\" start"))
                .expect("the script starts ccp-ebpf")
                .to_string()
        };
        let traced = start(&shared_datapath_script("", "/bin", true));
        assert!(
            traced.contains("--ack-trace \"ack-trace-$$.csv\" >"),
            "{traced}"
        );
        assert!(!start(&shared_datapath_script("", "/bin", false)).contains("--ack-trace"));
        assert!(!start(&ccp_block("/bin")).contains("--ack-trace"));
    }

    #[test]
    fn runs_without_ccp_flows_start_no_datapath() {
        let mut r = run();
        r.flows[1].cc = "bbr".into();
        let s = emulator_script(&r);
        assert!(!s.contains("ccp-ebpf") && !s.contains("ccp-agent"));
        assert!(ports::run_policy(&r, &ports()).is_none());
    }

    #[test]
    fn inner_script_starts_flows_on_fixed_ports_at_their_times() {
        let s = inner_script(&run(), &ports());
        assert!(s.contains("flow 0 5 15 cubic 5201 20001 &"));
        assert!(s.contains("flow 1 0 20 ccp 5202 20002 &"));
        assert!(
            s.contains("sleep 10; ${CCP_PRIORITY_CMD:-false} 10.0.0.2 20002 \"$B\" 5202 primary")
        );
        let p = ports::run_policy(&run(), &ports()).expect("one ccp flow");
        assert!(p.contains(
            "remote_port = \"5202\"\nalgorithm = \"proteus-s\"\npriority = \"scavenger\"\n\n"
        ));
    }

    #[test]
    fn a_flow_that_names_a_primary_gets_it_in_its_policy_rule() {
        let mut r = run();
        r.flows[1].primary = Some("cubic".into());
        let p = ports::run_policy(&r, &ports()).expect("one ccp flow");
        assert!(p.contains("priority = \"scavenger\"\nprimary = \"cubic\"\n"));
    }

    #[test]
    fn a_quic_flow_is_a_ccp_quic_transfer_steered_by_the_run_agent() {
        let mut r = run();
        r.flows[1].cc = "quic:proteus-s".into();
        r.flows[1].start_s = 2.0;
        let inner = inner_script(&r, &ports());
        assert!(inner.contains("\"$CCP_BIN/ccp-quic\" send \"$B:$4\" --cport \"$5\""));
        assert!(inner.contains("--agent \"$CCP_AGENT\""));
        // Its priority change goes to ccp-quic, timed from the flow's start.
        assert!(inner.contains("qflow 1 2 18 5202 20002 --priority-at 8:primary &"));
        assert!(!inner.contains("CCP_PRIORITY_CMD"));
        assert!(inner.contains("flow 0 5 15 cubic 5201 20001 &"));
        let s = emulator_script(&r);
        assert!(s.contains(
            "--server \"\\\"$CCP_BIN/ccp-quic\\\" serve --listen 0.0.0.0:5202\" --wait-port 5202"
        ));
        assert!(s.contains("--server \"iperf3 -s -J -p 5201\" --wait-port 5201"));
        // The agent comes up (the QUIC datapath needs no kernel registration of its own).
        assert!(s.contains("\"$CCP_BIN/ccp-agent\" --bind \"$AGENT\""));
        assert!(s.contains("export CCP_AGENT=${CCP_SHARED_AGENT:-$AGENT}"));
        assert!(!s.contains("tcp_allowed_congestion_control=\"$(cat /proc/sys/net/ipv4/tcp_allowed_congestion_control) quic"));
        let p = ports::run_policy(&r, &ports()).expect("one agent flow");
        assert!(p.contains("remote_port = \"5202\"\nalgorithm = \"proteus-s\""));
        // Under Mahimahi the flow runs as MM_USER, known before the agent starts, whose
        // group the agent then shares its socket with, until the run takes it down.
        let mm = run_script(
            "t",
            &r,
            &ports(),
            &Backend::Mahimahi { user: "mm".into() },
            "/opt/ccp/bin",
        );
        let (user, agent) = (
            mm.find("MM_USER=${MM_USER:-mm}").expect("user"),
            mm.find("\"$CCP_BIN/ccp-agent\" --bind \"$AGENT\" \"${GROUP[@]}\"")
                .expect("agent"),
        );
        assert!(user < agent, "{mm}");
        assert!(mm.contains("GROUP=(--group \"$(id -gn \"$MM_USER\")\")"));
        assert!(mm.contains("chgrp root /tmp/ccp && chmod 0755 /tmp/ccp"));
    }
}
