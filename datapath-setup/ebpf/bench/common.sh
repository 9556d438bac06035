# Shared by the eBPF datapath benchmarks (sourced, POSIX sh): the binaries, a namespace of
# their own, and an agent running cubic with a daemon bound to it. The sourcing script sets
# PREFIX first; everything created is named after it and removed by bench_cleanup.
TARGET=${CARGO_TARGET_DIR:-target}
CCP_EBPF=${CCP_EBPF:-$TARGET/release/ccp-ebpf}
CCP_AGENT=${CCP_AGENT:-$TARGET/release/ccp-agent}
NS=$PREFIX
RUN=/tmp/$PREFIX-run
AGENT=$PREFIX-agent
AGENT_LOG=/tmp/$PREFIX-agent.log

[ "$(id -u)" = 0 ] || { echo "needs root" >&2; exit 1; }
for b in "$CCP_EBPF" "$CCP_AGENT"; do
	[ -x "$b" ] || { echo "missing $b (cargo build --release -p ccp-ebpf -p ccp-agent)" >&2; exit 1; }
done

AGENT_PID=
DAEMON_PID=
# The agent (its stderr in $AGENT_LOG) and the daemon; returns once `ccp` is registered.
start_pair() {
	"$CCP_AGENT" --bind "$AGENT" --default cubic 2>"$AGENT_LOG" &
	AGENT_PID=$!
	sleep 0.5
	"$CCP_EBPF" --run-dir "$RUN" start --agent "$AGENT" --name "$PREFIX-dp" \
		--no-pin --no-setsockopt 2>/dev/null &
	DAEMON_PID=$!
	for _ in $(seq 100); do
		grep -qw ccp /proc/sys/net/ipv4/tcp_available_congestion_control && [ -S "$RUN/control.sock" ] && break
		sleep 0.05
	done
}
stop_pair() {
	[ -n "$DAEMON_PID" ] && "$CCP_EBPF" --run-dir "$RUN" stop >/dev/null 2>&1 || true
	[ -n "$DAEMON_PID" ] && wait "$DAEMON_PID" 2>/dev/null || true
	[ -n "$AGENT_PID" ] && kill "$AGENT_PID" 2>/dev/null && wait "$AGENT_PID" 2>/dev/null || true
	DAEMON_PID=
	AGENT_PID=
}
bench_cleanup() {
	stop_pair
	ip netns pids "$NS" 2>/dev/null | xargs -r kill 2>/dev/null || true
	ip netns del "$NS" 2>/dev/null || true
	rm -f "$AGENT_LOG"
	rmdir "$RUN" 2>/dev/null || true
}
trap bench_cleanup EXIT INT TERM
ip netns add "$NS"
ip -n "$NS" link set lo up

# CPU time (ns) of a process: utime + stime.
cpu_ns() {
	awk -v hz="$(getconf CLK_TCK)" '{ printf "%.0f\n", ($14 + $15) * 1e9 / hz }' "/proc/$1/stat"
}
