#!/usr/bin/env bash
# The main job: a short scavenger-vs-primary demonstration through the real agent. Installs
# the Debian packages it needs, builds, runs, prints what each flow got, and takes
# everything down again.
#
# Part 1 (root, a kernel with BTF and BPF struct_ops): real Linux TCP. A Proteus-S and then a
# LEDBAT++ scavenger run on the eBPF datapath (ccp-ebpf) driven by ccp-agent, against a
# kernel CUBIC flow, through ccp-emu (48 Mbit/s, 30 ms, 4 BDP; 35 s each, after CUBIC alone).
# Each run's run.sh brings up the daemon and the agent and takes them down again
# (experiments/demo/ebpf-scavengers.toml; re-run one with `bash <run dir>/run.sh`).
# Part 2 (anyone): the same algorithms in ccp-agent, their programs in libccp inside
# ccp-testdp, whose deterministic bottleneck also carries a Reno-like primary; then an
# application switches a flow's priority while it runs (the PRIORITY message).
set -euo pipefail
cd "$(dirname "$0")/.."

root=false
[ "$(id -u)" = 0 ] && root=true
packages=(clang libclang-dev libelf-dev zlib1g-dev pkg-config bpftool iperf3 iproute2 python3)
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
    if $root; then
        echo "==> installing ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    else
        echo "==> not root: cannot install ${missing[*]}; trying without" >&2
    fi
fi

bin=${CARGO_TARGET_DIR:-target}/release
out=$(mktemp -d /tmp/ccp-demo.XXXXXX)
name="demo-$$"
agent=
cleanup() {
    if [ -n "$agent" ]; then
        kill "$agent" 2>/dev/null || true
        wait "$agent" 2>/dev/null || true
    fi
    # A run interrupted by Ctrl-C finishes its own teardown (its run.sh traps EXIT); say so
    # if the datapath is still registered when we leave.
    if grep -qw ccp /proc/sys/net/ipv4/tcp_available_congestion_control 2>/dev/null; then
        echo "note: \`ccp\` is still registered; \`$bin/ccp-ebpf stop\` removes it" >&2
    fi
}
trap cleanup EXIT

why_no_ebpf() {
    $root || { echo "needs root (struct_ops, netns, TUN)"; return; }
    [ -r /sys/kernel/btf/vmlinux ] || { echo "the kernel has no BTF (/sys/kernel/btf/vmlinux)"; return; }
    command -v iperf3 >/dev/null || { echo "iperf3 is not installed"; return; }
    if grep -qw ccp /proc/sys/net/ipv4/tcp_available_congestion_control; then
        echo "\`ccp\` is registered already (another datapath runs)"
        return
    fi
}
no_ebpf=$(why_no_ebpf)

if [ -z "$no_ebpf" ]; then
    echo "==> building ccp-agent, ccp-ebpf, ccp-emu/ccp-exp and ccp-testdp"
    cargo build --release --quiet -p ccp-agent -p ccp-ebpf -p ccp-experiments -p ccp-testdp
    echo "==> part 1: scavengers on the eBPF Linux TCP datapath vs kernel CUBIC (ccp-emu, 48 Mbit/s, 30 ms, 4 BDP)"
    plan=experiments/demo/ebpf-scavengers.toml
    "$bin/ccp-exp" run "$plan" --quick --force --backend emulator --out "$out" 2>&1 | sed 's/^/    /'
    python3 - "$out/ebpf-scavengers" <<'PY'
import json, os, sys
d = sys.argv[1]
runs = {}
for run in sorted(os.listdir(d)):
    try:
        runs[run] = json.load(open(os.path.join(d, run, "summary.json")))
    except (OSError, ValueError):
        pass
alone = next((r for k, r in runs.items() if k.endswith("cubic-alone") and r["status"] == "ok"), None)
if alone is None:
    sys.exit("    CUBIC alone did not run: see " + d)
base = alone["flows"][0]["throughput_bps"] / 1e6
print(f"    CUBIC alone            {base:6.1f} Mbit/s   (15-35 s)")
for tag, label in (("ccp_proteus-s", "Proteus-S"), ("ccp_ledbatpp", "LEDBAT++")):
    r = next((r for k, r in runs.items() if k.endswith(tag)), None)
    if r is None or r["status"] != "ok":
        why = r and r.get("reason")
        print(f"    {label}: did not run ({why})")
        continue
    p, s = (f["throughput_bps"] / 1e6 for f in r["flows"])
    link = r.get("link") or {}
    print(f"  {label} (scavenger, started 5 s before CUBIC):")
    print(f"    CUBIC with scavenger   {p:6.1f} Mbit/s   ({100 * p / base:.0f}% of alone)")
    print(f"    {label:<22} {s:6.1f} Mbit/s")
    print(f"    link utilization       {100 * link.get('utilization', 0):6.0f}%   p95 queueing delay {link.get('qdelay_p95_ms') or 0:.1f} ms")
PY
    echo "    (per-run scripts, logs, agent flow traces and timelines in $out/ebpf-scavengers)"
    echo "    available congestion controls now: $(cat /proc/sys/net/ipv4/tcp_available_congestion_control)"
else
    echo "==> part 1 (eBPF datapath) SKIPPED: $no_ebpf"
    echo "==> building ccp-agent and ccp-testdp"
    cargo build --release --quiet -p ccp-agent -p ccp-testdp
fi

echo "==> part 2: the same algorithms on the deterministic test datapath (libccp in ccp-testdp)"
"$bin/ccp-agent" --bind "$name" --trace-flows "$out/trace.jsonl" 2>"$out/agent.log" &
agent=$!

for scen in experiments/demo/aimd-vs-proteus-s.toml experiments/demo/aimd-vs-ledbat.toml; do
    tag=$(basename "$scen" .toml)
    echo "==> $(grep -m1 '^name' "$scen" | cut -d'"' -f2)"
    "$bin/ccp-testdp" sim "$scen" --only primary --out "$out/$tag-alone.json" >/dev/null 2>&1
    "$bin/ccp-testdp" sim "$scen" --agent "$name" --out "$out/$tag.json" >"$out/$tag.testdp.log" 2>&1
    python3 - "$out/$tag-alone.json" "$out/$tag.json" <<'PY'
import json, sys
alone, both = (json.load(open(p)) for p in sys.argv[1:3])
def window(run, flow):
    return next((f["mean_mbps"] for f in run["windows"][0]["flows"] if f["name"] == flow), 0.0)
primary_alone = window(alone, "primary")
primary, scav = window(both, "primary"), window(both, "scavenger")
cap = both["link_rate_mbps"]
print(f"    primary alone      {primary_alone:6.1f} Mbit/s")
print(f"    primary w/ scav.   {primary:6.1f} Mbit/s   ({100 * primary / primary_alone:.0f}% of alone)")
print(f"    scavenger          {scav:6.1f} Mbit/s")
print(f"    link utilization   {100 * (primary + scav) / cap:.0f}%   p95 queueing delay {both['windows'][0]['queue_delay']['p95_ms']:.1f} ms")
PY
done
scen=experiments/demo/priority-switch.toml
echo "==> $(grep -m1 '^name' "$scen" | cut -d'"' -f2)"
"$bin/ccp-testdp" sim "$scen" --agent "$name" --out "$out/priority-switch.json" >"$out/priority-switch.testdp.log" 2>&1
python3 - "$out/priority-switch.json" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))
for w in run["windows"]:
    got = {f["name"]: f["mean_mbps"] for f in w["flows"]}
    print(f"    {w['name']:<16} ({w['from_s']:>4.0f}-{w['to_s']:<3.0f}s)  primary {got.get('primary', 0):5.1f}  switched flow {got.get('scavenger', 0):5.1f} Mbit/s")
PY
echo "==> results, flow trace ($out/trace.jsonl) and agent log in $out"
