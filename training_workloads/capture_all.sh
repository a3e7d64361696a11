#!/usr/bin/env bash
# Capture a set of training_workloads variants with nsys and measure their unprofiled throughput.
#
#   training_workloads/capture_all.sh OUTDIR [NAME...]      (default: all 11 capture names)
#
# For each NAME (resnet18_baseline ... vit_l32_powersgd, see `python -m training_workloads
# variants --names`):
#   throughput: an unprofiled run (no nsys; DDP variants under torchrun like the capture) with
#               THROUGHPUT_STEPS measured steps -> OUTDIR/throughput.tsv
#   profile:    training_workloads/profile.sh NAME --steps PROFILE_STEPS -> OUTDIR/NAME.*
#               wall time and output sizes -> OUTDIR/captures.tsv
# Logs: OUTDIR/logs/NAME.{unprofiled,profile}.log
#
# Environment: MODE=both|profile|throughput (both), THROUGHPUT_STEPS=10, PROFILE_STEPS=3,
# WARMUP=10, RUN_TIMEOUT=240 (seconds per run), plus profile.sh's (NSYS, TRACE, NSYS_EXTRA,
# NPROC, PYTHON, TORCHRUN, EXPORT).
set -uo pipefail
[ $# -ge 1 ] || { sed -n '2,17p' "$0"; exit 2; }
OUTDIR=$1; shift
here=$(cd "$(dirname "$0")" && pwd)
PYTHON=${PYTHON:-python3}
MODE=${MODE:-both}
THROUGHPUT_STEPS=${THROUGHPUT_STEPS:-10}
PROFILE_STEPS=${PROFILE_STEPS:-3}
WARMUP=${WARMUP:-10}
RUN_TIMEOUT=${RUN_TIMEOUT:-240}
NPROC=${NPROC:-1}
if [ -z "${TORCHRUN:-}" ]; then
  if command -v torchrun >/dev/null 2>&1; then TORCHRUN=torchrun; else TORCHRUN="$PYTHON -m torch.distributed.run"; fi
fi
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} TORCH_SYMM_MEM_DISABLE_MULTICAST=${TORCH_SYMM_MEM_DISABLE_MULTICAST:-1} \
       NVSHMEM_DISABLE_NVLS=${NVSHMEM_DISABLE_NVLS:-1}
mkdir -p "$OUTDIR/logs"
if [ $# -eq 0 ]; then mapfile -t names < <("$PYTHON" -m training_workloads variants --names); else names=("$@"); fi
[ -f "$OUTDIR/throughput.tsv" ] || printf 'name\tsteps\tsteps_per_s\tstep_ms\twall_s\trc\n' > "$OUTDIR/throughput.tsv"
[ -f "$OUTDIR/captures.tsv" ] || printf 'name\trc\twall_s\tfiles\n' > "$OUTDIR/captures.tsv"

resolve() {
  "$PYTHON" -c '
import sys
from training_workloads.variants import capture_name, parse_capture_name
w, v = parse_capture_name(sys.argv[1]); print(w, v, capture_name(w, v))' "$1"
}

for n in "${names[@]}"; do
  read -r workload v name < <(resolve "$n") || { echo "capture_all: unknown name $n" >&2; continue; }
  if [ "$MODE" != profile ]; then
    log="$OUTDIR/logs/$name.unprofiled.log"
    t0=$(date +%s.%N)
    if [ "$workload" = ddp ] && [ "$v" != single ]; then
      # shellcheck disable=SC2086
      timeout -k 10 "$RUN_TIMEOUT" $TORCHRUN --nproc_per_node="$NPROC" -m training_workloads ddp \
        --variant "$v" --warmup "$WARMUP" --steps "$THROUGHPUT_STEPS" >"$log" 2>&1
    else
      timeout -k 10 "$RUN_TIMEOUT" "$PYTHON" -m training_workloads "$workload" --variant "$v" \
        --warmup "$WARMUP" --steps "$THROUGHPUT_STEPS" >"$log" 2>&1
    fi
    rc=$?
    wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
    line=$(grep -m1 '^THROUGHPUT' "$log")
    sps=$(sed -n 's/.*steps_per_s=\([^ ]*\).*/\1/p' <<<"$line")
    ms=$(sed -n 's/.*step_ms=\([^ ]*\).*/\1/p' <<<"$line")
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$THROUGHPUT_STEPS" "${sps:-NA}" "${ms:-NA}" "$wall" "$rc" >> "$OUTDIR/throughput.tsv"
    echo "capture_all: $name unprofiled: ${sps:-FAILED} steps/s (${wall%.*} s, rc $rc)"
  fi
  if [ "$MODE" != throughput ]; then
    log="$OUTDIR/logs/$name.profile.log"
    t0=$(date +%s.%N)
    OUTDIR="$OUTDIR" NPROC="$NPROC" timeout -k 10 "$RUN_TIMEOUT" bash "$here/profile.sh" "$name" \
      --warmup "$WARMUP" --steps "$PROFILE_STEPS" >"$log" 2>&1
    rc=$?
    wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
    files=$(cd "$OUTDIR" && ls -l "$name".* "${name}"_[0-9]*.* 2>/dev/null | awk '{printf "%s:%s ", $NF, $5}')
    printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$wall" "$files" >> "$OUTDIR/captures.tsv"
    echo "capture_all: $name profiled: rc $rc, ${wall%.*} s, $files"
  fi
done
