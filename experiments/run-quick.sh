#!/usr/bin/env bash
# Runs the quick subset of every scenario on this machine (root; about 20 minutes on 2 cores,
# two emulated bottlenecks at a time: `--jobs 2` gives the same primary throughput ratios as
# one at a time within their run-to-run spread, docs/results.md "Runs at once").
# Results, summaries, re-run scripts and charts go to experiments/results/<scenario>/.
# Runs with scavenger flows (cc = "ccp:...") bring up the eBPF datapath (ccp-ebpf) and
# ccp-agent for their duration; `ccp-exp check` then applies the acceptance bounds. A run in
# which the emulator fell behind real time is repeated (the runner does it; see runner.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v iperf3 >/dev/null || { echo "run-quick.sh: needs iperf3 (apt-get install iperf3)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "run-quick.sh: needs root (namespaces, TUN devices)" >&2; exit 1; }
# CCP_PROFILE: the cargo profile to build and run (the test suite passes its `ci` build).
profile=${CCP_PROFILE:-release}
cargo build --profile "$profile" -p ccp-agent -p ccp-ebpf -p ccp-experiments
EXP=${CARGO_TARGET_DIR:-target}/$profile/ccp-exp
status=0
for s in mahimahi-reference single-flow jain harm anrw-fig1 anrw-fig2 priority-switch; do
  "$EXP" run "$s" --quick --jobs 2 "$@" || status=1
done
# `check` takes only the results directory of the arguments.
out=()
args=("$@")
for i in "${!args[@]}"; do
  [ "${args[$i]}" = --out ] && out=(--out "${args[$((i + 1))]}")
done
"$EXP" check priority-switch harm anrw-fig1 "${out[@]}" || status=1
exit $status
