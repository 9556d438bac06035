#!/usr/bin/env bash
# The main job: a short scavenger-vs-primary demonstration through the real agent and a
# real libccp datapath. Installs the Debian packages it needs, builds, runs, prints what each
# flow got, and takes everything down again.
#
# Each scavenger (Proteus-S, LEDBAT++) runs in ccp-agent; its datapath programs run in
# libccp inside ccp-testdp, whose deterministic bottleneck also carries a Reno-like primary.
# The primary's throughput with the scavenger is compared with its throughput alone; then
# an application switches a flow's priority while it runs (the PRIORITY message).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(clang libclang-dev libelf-dev zlib1g-dev pkg-config python3)
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
    echo "==> installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

echo "==> building ccp-agent and ccp-testdp"
cargo build --release --quiet --bin ccp-agent --bin ccp-testdp
bin=target/release
out=$(mktemp -d /tmp/ccp-demo.XXXXXX)
name="demo-$$"

"$bin/ccp-agent" --bind "$name" --trace-flows "$out/trace.jsonl" 2>"$out/agent.log" &
agent=$!
cleanup() {
    kill "$agent" 2>/dev/null || true
    wait "$agent" 2>/dev/null || true
}
trap cleanup EXIT

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
