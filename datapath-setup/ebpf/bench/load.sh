#!/bin/sh
# Load benchmark of the eBPF datapath: many concurrent flows through "ccp" (ccp-agent
# running cubic, ccp-ebpf running libccp per ACK) on loopback, and how the daemon-agent
# link holds up: the share of ACKs the BPF fallback controlled (all of them, and those of
# flows the agent had already decided for, i.e. not a new flow waiting for its first
# decision), sends that failed (the agent was declared lost), sends held back because the
# agent's queue was full, reports merged while it was, resyncs, and the CPU of both
# processes.
#
# Usage (root): datapath-setup/ebpf/bench/load.sh [seconds per run, default 10]
#               [flow counts, default "100 1000 4000"]
# Binaries: $CCP_EBPF and $CCP_AGENT, default target/release/{ccp-ebpf,ccp-agent}
# (cargo build --release -p ccp-ebpf -p ccp-agent). Each flow count gets a fresh agent and
# daemon; iperf3 clients of at most 128 streams each, at nice 19: dozens of busy iperf3
# processes would otherwise starve the agent and the daemon of CPU (on 2 cores 64 of them
# leave each about 3 %), which measures the scheduler, not the datapath. Both ends of a
# flow use ccp, so N flows are about 2N ccp sockets ("ccp_socks", sampled mid-run).
# Counters a daemon does not report print as 0. Everything it creates is named ebpfh-load*
# and removed on exit.
set -eu

SECS=${1:-10}
COUNTS=${2:-"100 1000 4000"}
PREFIX=ebpfh-load
. "$(dirname "$0")/common.sh"
# Each iperf3 process holds at most 2 x 128 sockets; the soft limit goes to the hard one
# in case it was set low.
ulimit -n "$(ulimit -Hn)"

# The sum of every "NAME value" pair in the daemon's status, for each NAME given.
status_sums() {
	"$CCP_EBPF" --run-dir "$RUN" status | awk -v names="$*" '
		BEGIN { n = split(names, want, " ") }
		$1 == "flow" { next }
		$1 == "shard" { shards++ }
		{ for (i = 1; i < NF; i++) sum[$i] += $(i + 1) }
		END { printf "%d", shards; for (k = 1; k <= n; k++) printf " %d", sum[want[k]]; print "" }'
}

# N flows: ceil(N / 128) iperf3 clients, each against its own one-shot server.
run_flows() {
	n=$1
	clients=$(((n + 127) / 128))
	port=5401
	pids=
	for c in $(seq "$clients"); do
		ip netns exec "$NS" nice -n 19 iperf3 -s -1 -p $((port + c)) >/dev/null 2>&1 &
	done
	for _ in $(seq 100); do
		[ "$(ip netns exec "$NS" ss -Hltn | wc -l)" -ge "$clients" ] && break
		sleep 0.1
	done
	left=$n
	for c in $(seq "$clients"); do
		p=$((left / (clients - c + 1)))
		left=$((left - p))
		ip netns exec "$NS" nice -n 19 iperf3 -c 127.0.0.1 -p $((port + c)) -t "$SECS" -P "$p" \
			-C ccp >/dev/null 2>&1 &
		pids="$pids $!"
	done
	sleep $((SECS / 2))
	live=$("$CCP_EBPF" --run-dir "$RUN" status | awk '$1 == "shard" { n += $4 } END { print n + 0 }')
	for p in $pids; do wait "$p" || true; done
}

echo "net.unix.max_dgram_qlen $(cat /proc/sys/net/unix/max_dgram_qlen); $(nproc) cores; $SECS s per run"
printf "%-6s %9s %6s %10s %9s %9s %10s %10s %10s %8s %9s %9s %12s\n" flows ccp_socks shards \
	acks fallback% decided% send_errors deferred coalesced resyncs dmn_cpu% agt_cpu% agt_dropped
for N in $COUNTS; do
	start_pair
	d0=$(cpu_ns "$DAEMON_PID"); a0=$(cpu_ns "$AGENT_PID"); t0=$(date +%s%N)
	run_flows "$N"
	d1=$(cpu_ns "$DAEMON_PID"); a1=$(cpu_ns "$AGENT_PID"); t1=$(date +%s%N)
	sums=$(status_sums acks fallback_acks fallback_acks_decided send_errors deferred coalesced \
		resyncs)
	stop_pair
	dropped=$(grep -o 'sends_dropped[^0-9]*[0-9]*' "$AGENT_LOG" | grep -o '[0-9]*$' | tail -1)
	# shellcheck disable=SC2086
	set -- $sums
	python3 - "$N" "$live" "$@" "$d0" "$d1" "$a0" "$a1" "$t0" "$t1" "${dropped:-?}" <<'PY'
import sys
(n, live, shards, acks, fb, fb_decided, errs, deferred, coalesced, resyncs,
 d0, d1, a0, a1, t0, t1, dropped) = sys.argv[1:]
acks, wall = int(acks), int(t1) - int(t0)
share = lambda k: 100.0 * int(k) / acks if acks else 0.0
print("%-6s %9s %6s %10d %9.2f %9.2f %10s %10s %10s %8s %9.1f %9.1f %12s" % (
    n, live, shards, acks, share(fb), share(fb_decided), errs, deferred, coalesced,
    resyncs, 100.0 * (int(d1) - int(d0)) / wall, 100.0 * (int(a1) - int(a0)) / wall, dropped))
PY
done
