#!/bin/sh
# Loopback benchmark of the eBPF datapath: throughput of cubic through "ccp" (ccp-agent
# running cubic, ccp-ebpf running libccp per ACK) against the kernel's own cubic, in the
# same run, for 1 and 8 flows; and the daemon's CPU time per ACK.
#
# Usage (root): datapath-setup/ebpf/bench/loopback.sh [seconds per run, default 10]
# Binaries: $CCP_EBPF and $CCP_AGENT, default target/release/{ccp-ebpf,ccp-agent}
# (cargo build --release -p ccp-ebpf -p ccp-agent). Everything it creates is named
# ebpfh-bench* and removed on exit (common.sh).
set -eu

SECS=${1:-10}
PREFIX=ebpfh-bench
. "$(dirname "$0")/common.sh"
start_pair

acks() {
	"$CCP_EBPF" --run-dir "$RUN" status | awk '$1 == "events" { print $4 }'
}
gbps() { # cc flows port
	ip netns exec "$NS" iperf3 -s -1 -p "$3" >/dev/null 2>&1 &
	sleep 0.3
	ip netns exec "$NS" iperf3 -c 127.0.0.1 -p "$3" -t "$SECS" -P "$2" -C "$1" -J |
		python3 -c 'import json,sys; print("%.2f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 1e9))'
}

printf "%-6s %12s %12s %8s %14s %12s %12s\n" flows cubic_gbps ccp_gbps ratio daemon_cpu_pct ns_per_ack acks_per_s
port=5301
for P in 1 8; do
	k=$(gbps cubic "$P" "$port"); port=$((port + 1))
	a0=$(acks); c0=$(cpu_ns "$DAEMON_PID"); t0=$(date +%s%N)
	c=$(gbps ccp "$P" "$port"); port=$((port + 1))
	a1=$(acks); c1=$(cpu_ns "$DAEMON_PID"); t1=$(date +%s%N)
	python3 - "$P" "$k" "$c" "$a0" "$a1" "$c0" "$c1" "$t0" "$t1" <<'PY'
import sys
p, k, c, a0, a1, c0, c1, t0, t1 = sys.argv[1:]
k, c = float(k), float(c)
acks = int(a1) - int(a0)
cpu = int(c1) - int(c0)
wall = int(t1) - int(t0)
print("%-6s %12.2f %12.2f %8.3f %14.1f %12.0f %12.0f" % (
    p, k, c, c / k if k else 0.0, 100.0 * cpu / wall,
    cpu / acks if acks else 0.0, acks * 1e9 / wall))
PY
done
