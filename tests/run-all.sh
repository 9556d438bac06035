#!/usr/bin/env bash
# Installs what the test suite needs (Debian packages; crates come through cargo) and runs
# all of it: formatting, lints, unit, integration and end-to-end tests. Root is needed for
# the package install and for the eBPF and emulator tests (those say so and skip otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(clang libclang-dev libelf-dev zlib1g-dev pkg-config bpftool iperf3 iproute2)
missing=()
for p in "${packages[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "==> installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

echo "==> cargo fmt --check"
cargo fmt --all -- --check
echo "==> cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings
echo "==> cargo build (the end-to-end tests start these binaries)"
cargo build --workspace --bins
echo "==> cargo test"
# One test binary at a time: the end-to-end tests share the machine's two cores and time
# their flows in simulated or real seconds.
cargo test --workspace -- --test-threads=2

# The quick experiment subsets with scavengers, on the eBPF datapath through ccp-emu, and
# their acceptance checks (Proteus-S leaves CUBIC and BBR >= 90% of their throughput alone;
# a switch to primary raises the flow's share). About 10 minutes on 2 cores, plus the build.
if [ "$(id -u)" = 0 ]; then
    echo "==> quick experiments with scavengers (eBPF datapath, ccp-emu)"
    cargo build --release -p ccp-agent -p ccp-ebpf -p ccp-experiments
    exp=${CARGO_TARGET_DIR:-target}/release/ccp-exp
    out=$(mktemp -d /tmp/ccp-exp-quick.XXXXXX)
    status=0
    for s in harm anrw-fig1 priority-switch; do
        "$exp" run "$s" --quick --backend emulator --out "$out" || status=1
    done
    "$exp" check harm anrw-fig1 priority-switch --out "$out" || status=1
    ccs=$(cat /proc/sys/net/ipv4/tcp_available_congestion_control)
    if grep -qw ccp <<<"$ccs"; then
        echo "the eBPF datapath is still registered after the experiments: $ccs" >&2
        status=1
    fi
    echo "    results in $out"
    exit $status
else
    echo "SKIPPED: the quick experiments need root (netns, TUN, struct_ops)"
fi
