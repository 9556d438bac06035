#!/usr/bin/env bash
# Merges the shards of a Slurm array (slurm-array.sh) or a Kubernetes indexed Job
# (k8s-indexed-job.yaml) into one summary and chart set:
#   $RESULTS/shard-*/<plan name>/  ->  $OUT/<plan name>/summary-full.csv|json and charts
# Run it after every shard finished, by hand or as a dependent job:
#   sbatch --dependency=afterok:$jid --export=ALL,SCENARIO=...,RESULTS=... experiments/scale-out/merge.sh
# It only reads the shards' results (no root, no namespaces). It is the one command
#   ccp-exp report "$SCENARIO" --full --from $RESULTS/shard-0 --from $RESULTS/shard-1 ... --out $OUT
# and exits 3 when a planned run is missing from every shard.
#
# Environment: SCENARIO, RESULTS, CCP_EXP as for slurm-array.sh; MODE (--full or --quick,
# default --full); OUT (default $RESULTS/merged); CCP_EXP_LOCK (optional flock file).
#
#SBATCH --job-name=ccp-exp-merge
#SBATCH --ntasks=1
#SBATCH --time=00:30:00
#SBATCH --output=ccp-exp-merge-%j.out
set -euo pipefail
SCENARIO=${SCENARIO:-anrw-fig1}
RESULTS=${RESULTS:-$PWD/ccp-results}
CCP_EXP=${CCP_EXP:-$PWD/target/release/ccp-exp}
MODE=${MODE:---full}
OUT=${OUT:-$RESULTS/merged}
CCP_EXP_LOCK=${CCP_EXP_LOCK:-}

from=()
for d in "$RESULTS"/shard-*; do
  [ -d "$d" ] && from+=(--from "$d")
done
[ ${#from[@]} -gt 0 ] || { echo "merge.sh: no $RESULTS/shard-* directories" >&2; exit 2; }
lock=()
[ -n "$CCP_EXP_LOCK" ] && lock=(flock "$CCP_EXP_LOCK")
mkdir -p "$OUT"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
"${lock[@]}" "$CCP_EXP" report "$SCENARIO" "$MODE" "${from[@]}" --out "$OUT" 2>"$log" || status=$?
cat "$log" >&2
[ $status = 0 ] || exit $status
# ccp-exp report says "<plan>: F of P runs found in ..." on stderr.
found=$(sed -n 's/^.*: \([0-9]*\) of \([0-9]*\) runs found in .*$/\1 \2/p' "$log" | tail -1)
echo "merge.sh: ${found% *} of ${found#* } runs merged into $OUT"
[ -n "$found" ] && [ "${found% *}" = "${found#* }" ] || exit 3
