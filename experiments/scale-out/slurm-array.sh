#!/usr/bin/env bash
# One shard of a ccp-exp grid per Slurm array task. Submit from the repository root:
#
#   jid=$(sbatch --parsable --array=0-7 \
#           --export=ALL,SCENARIO=anrw-fig1,RESULTS=/shared/ccp-results,CCP_EXP=/shared/ccp/target/release/ccp-exp \
#           experiments/scale-out/slurm-array.sh)
#   sbatch --dependency=afterok:$jid --export=ALL,SCENARIO=anrw-fig1,RESULTS=/shared/ccp-results,CCP_EXP=/shared/ccp/target/release/ccp-exp \
#           experiments/scale-out/merge.sh
#
# Task i (0-based) runs shard i+1 of N = the number of tasks in the array, so the array must
# be 0..N-1 (`--array=0-7`, optionally throttled: `--array=0-7%4`). The shards are
# deterministic parts of the plan: the same N always gives every run to exactly one task, and
# a task that is re-queued (or the whole array resubmitted) skips the runs it finished.
#
# What a node needs (see experiments/scale-out/README.md):
#   * the job runs as root (network namespaces, TUN devices, a SCHED_FIFO packet loop and,
#     for `ccp:` flows, loading BPF struct_ops): submit as root, or set SUDO="sudo -n" with
#     passwordless sudo for ccp-exp;
#   * Linux 6.10 or newer with BTF (CONFIG_DEBUG_INFO_BTF=y, /sys/kernel/btf/vmlinux) and
#     BPF struct_ops for `ccp:` flows; no kernel module;
#   * iperf3 and iproute2 (`ip`); mm-link etc. only with --backend mahimahi;
#   * the built binaries ccp-exp, ccp-emu, ccp-agent and ccp-ebpf side by side in one
#     directory (`cargo build --release -p ccp-agent -p ccp-ebpf -p ccp-experiments`),
#     on a shared filesystem or installed at the same path on every node; a plan file given as
#     SCENARIO must be readable there too;
#   * RESULTS on a filesystem the merge step can read (shared, or copied back afterwards).
#
# Two tasks must never share a node: the kernel has a single `ccp` congestion-control
# registration, which one ccp-exp holds for all of its runs (with --jobs N its emulated
# bottlenecks share it), and a second ccp-exp on the same kernel finds `ccp` taken. Hence
# --exclusive and one task per node below; use JOBS to use more of a node's cores instead.
#
# Environment:
#   SCENARIO      shipped scenario name or plan file (default anrw-fig1)
#   RESULTS       results root; task i writes $RESULTS/shard-i/<plan name>/ (default ./ccp-results)
#   CCP_EXP       the ccp-exp binary (default target/release/ccp-exp of the submit directory)
#   JOBS          --jobs for ccp-exp: emulated bottlenecks at once on the node (default 1)
#   BACKEND       --backend (default emulator)
#   MODE          --full or --quick (default --full)
#   CCP_EXP_LOCK  a lock file; when set, ccp-exp runs under `flock` on it, so that it waits
#                 for anything else that takes the same lock on a shared machine (default: none)
#   SUDO          command prefix to become root, e.g. "sudo -n" (default: none)
#
#SBATCH --job-name=ccp-exp
#SBATCH --array=0-7
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --ntasks-per-node=1
#SBATCH --exclusive
#SBATCH --time=12:00:00
#SBATCH --output=ccp-exp-%A_%a.out
set -euo pipefail

: "${SLURM_ARRAY_TASK_ID:?run this with sbatch --array=0-(N-1)}"
: "${SLURM_ARRAY_TASK_COUNT:?run this with sbatch --array=0-(N-1)}"
SCENARIO=${SCENARIO:-anrw-fig1}
RESULTS=${RESULTS:-$PWD/ccp-results}
CCP_EXP=${CCP_EXP:-$PWD/target/release/ccp-exp}
JOBS=${JOBS:-1}
BACKEND=${BACKEND:-emulator}
MODE=${MODE:---full}
CCP_EXP_LOCK=${CCP_EXP_LOCK:-}
SUDO=${SUDO:-}

if [ "${SLURM_ARRAY_TASK_MIN:-0}" != 0 ] \
  || [ "${SLURM_ARRAY_TASK_MAX:-$((SLURM_ARRAY_TASK_COUNT - 1))}" != $((SLURM_ARRAY_TASK_COUNT - 1)) ]; then
  echo "slurm-array.sh: the array must be 0-(N-1) (got ${SLURM_ARRAY_TASK_MIN:-?}-${SLURM_ARRAY_TASK_MAX:-?} with $SLURM_ARRAY_TASK_COUNT tasks)" >&2
  exit 2
fi
[ -x "$CCP_EXP" ] || { echo "slurm-array.sh: $CCP_EXP is not executable (set CCP_EXP)" >&2; exit 2; }
[ "$($SUDO id -u)" = 0 ] || { echo "slurm-array.sh: needs root (submit as root or set SUDO)" >&2; exit 2; }

shard=$((SLURM_ARRAY_TASK_ID + 1))/$SLURM_ARRAY_TASK_COUNT
out=$RESULTS/shard-$SLURM_ARRAY_TASK_ID
mkdir -p "$out"
lock=()
[ -n "$CCP_EXP_LOCK" ] && lock=(flock "$CCP_EXP_LOCK")

echo "$(date -u +%FT%TZ) task $SLURM_ARRAY_TASK_ID of array job ${SLURM_ARRAY_JOB_ID:-?} on $(hostname -s): $SCENARIO $MODE shard $shard -> $out"
status=0
$SUDO "${lock[@]}" "$CCP_EXP" run "$SCENARIO" "$MODE" --shard "$shard" --out "$out" \
  --jobs "$JOBS" --backend "$BACKEND" || status=$?
echo "$(date -u +%FT%TZ) task $SLURM_ARRAY_TASK_ID: ccp-exp exited $status"
exit $status
