#!/usr/bin/env bash
# Capture a set of training_workloads variants with nsys and measure their unprofiled throughput.
#
#   training_workloads/capture_all.sh OUTDIR [NAME...]      (default: every capture name)
#
# For each NAME (resnet18_baseline ... vit_l32_powersgd, see `python -m training_workloads
# variants --names`):
#   profile:    training_workloads/profile.sh NAME --steps PROFILE_STEPS -> OUTDIR/NAME.*;
#               exit status, wall time, output sizes and the run's THROUGHPUT fields
#               (pre_steps_per_s: warm-up steps before collection started) -> OUTDIR/captures.tsv
#   throughput: an unprofiled run (no nsys; torchrun/mpirun variants launched like the capture) with
#               THROUGHPUT_STEPS measured steps -> OUTDIR/throughput.tsv
# MODE=both does all profiles first, then all throughput runs. Logs: OUTDIR/logs/NAME.*.log
#
# Environment: MODE=both|profile|throughput (both), THROUGHPUT_STEPS=10, PROFILE_STEPS=3,
# WARMUP=10, RUN_TIMEOUT=240 (seconds per run), DEADLINE (epoch seconds: runs that would start
# after it are skipped, and each run's timeout is cut to end by it), plus profile.sh's (NSYS,
# TRACE, NSYS_EXTRA, NPROC, LAUNCH, PYTHON, TORCHRUN, EXPORT).
set -uo pipefail
[ $# -ge 1 ] || { sed -n '2,18p' "$0"; exit 2; }
OUTDIR=$1; shift
here=$(cd "$(dirname "$0")" && pwd)
PYTHON=${PYTHON:-python3}
MODE=${MODE:-both}
THROUGHPUT_STEPS=${THROUGHPUT_STEPS:-10}
PROFILE_STEPS=${PROFILE_STEPS:-3}
WARMUP=${WARMUP:-10}
RUN_TIMEOUT=${RUN_TIMEOUT:-240}
DEADLINE=${DEADLINE:-0}
NPROC=${NPROC:-1}
LAUNCH=${LAUNCH:-torchrun}
if [ -z "${TORCHRUN:-}" ]; then
  if command -v torchrun >/dev/null 2>&1; then TORCHRUN=torchrun; else TORCHRUN="$PYTHON -m torch.distributed.run"; fi
fi
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} TORCH_SYMM_MEM_DISABLE_MULTICAST=${TORCH_SYMM_MEM_DISABLE_MULTICAST:-1} \
       NVSHMEM_DISABLE_NVLS=${NVSHMEM_DISABLE_NVLS:-1}
mkdir -p "$OUTDIR/logs"
if [ $# -eq 0 ]; then mapfile -t names < <("$PYTHON" -m training_workloads variants --names); else names=("$@"); fi
[ -f "$OUTDIR/throughput.tsv" ] || printf 'name\tsteps\tsteps_per_s\tstep_ms\tpre_steps_per_s\twall_s\trc\n' > "$OUTDIR/throughput.tsv"
[ -f "$OUTDIR/captures.tsv" ] || printf 'name\trc\twall_s\tin_window_steps_per_s\tpre_steps_per_s\tfiles\n' > "$OUTDIR/captures.tsv"

resolve() {  # workload, variant, capture name, processes (0: direct), launcher
  "$PYTHON" -c '
import sys
from training_workloads.variants import capture_name, launch_nproc, launcher, parse_capture_name
w, v = parse_capture_name(sys.argv[1])
print(w, v, capture_name(w, v), launch_nproc(w, v, int(sys.argv[2])), launcher(w, v))' "$1" "$NPROC"
}
field() { sed -n "s/.*[ ]$1=\\([^ ]*\\).*/\\1/p" <<<"$2"; }
# seconds this run may take, or nothing when the deadline has passed
budget() {
  local t=$RUN_TIMEOUT now
  if [ "$DEADLINE" -gt 0 ]; then
    now=$(date +%s); [ $((DEADLINE - now)) -lt 15 ] && return 0
    [ $((DEADLINE - now)) -lt "$t" ] && t=$((DEADLINE - now))
  fi
  echo "$t"
}
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }

profile_one() {
  local name=$1 log="$OUTDIR/logs/$1.profile.log" t t0 rc wall line files
  t=$(budget); [ -n "$t" ] || { echo "capture_all: $name profile skipped (deadline)"; return; }
  t0=$(date +%s.%N)
  OUTDIR="$OUTDIR" NPROC="$NPROC" LAUNCH="$LAUNCH" timeout -k 10 "$t" bash "$here/profile.sh" "$name" \
    --warmup "$WARMUP" --steps "$PROFILE_STEPS" >"$log" 2>&1
  rc=$?; wall=$(elapsed "$t0")
  line=$(grep -m1 '^THROUGHPUT' "$log")
  files=$(cd "$OUTDIR" && ls -l "$name".* "${name}"_[0-9]*.* 2>/dev/null | awk '{printf "%s:%s ", $NF, $5}')
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$rc" "$wall" "$(field steps_per_s "$line")" \
    "$(field pre_steps_per_s "$line")" "$files" >> "$OUTDIR/captures.tsv"
  echo "capture_all: $name profiled: rc $rc, $wall s, $files"
}

throughput_one() {
  local name=$1 workload=$2 v=$3 nproc=$4 launcher=$5 log="$OUTDIR/logs/$1.unprofiled.log" t t0 rc wall line
  t=$(budget); [ -n "$t" ] || { echo "capture_all: $name unprofiled skipped (deadline)"; return; }
  t0=$(date +%s.%N)
  if [ "$launcher" = mpirun ]; then
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout -k 10 "$t" mpirun -np "$nproc" --oversubscribe \
      --bind-to none "$PYTHON" -m training_workloads "$workload" --variant "$v" --warmup "$WARMUP" \
      --steps "$THROUGHPUT_STEPS" >"$log" 2>&1
  elif [ "$nproc" -gt 0 ] && [ "$LAUNCH" != direct ]; then
    # shellcheck disable=SC2086
    timeout -k 10 "$t" $TORCHRUN --nproc_per_node="$nproc" -m training_workloads "$workload" \
      --variant "$v" --warmup "$WARMUP" --steps "$THROUGHPUT_STEPS" >"$log" 2>&1
  else
    timeout -k 10 "$t" "$PYTHON" -m training_workloads "$workload" --variant "$v" \
      --warmup "$WARMUP" --steps "$THROUGHPUT_STEPS" >"$log" 2>&1
  fi
  rc=$?; wall=$(elapsed "$t0")
  line=$(grep -m1 '^THROUGHPUT' "$log")
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$THROUGHPUT_STEPS" "$(field steps_per_s "$line")" \
    "$(field step_ms "$line")" "$(field pre_steps_per_s "$line")" "$wall" "$rc" >> "$OUTDIR/throughput.tsv"
  echo "capture_all: $name unprofiled: $(field steps_per_s "$line") steps/s ($wall s, rc $rc)"
}

declare -a W V N P L
for n in "${names[@]}"; do
  read -r workload v name nproc launch < <(resolve "$n") || { echo "capture_all: unknown name $n" >&2; continue; }
  W+=("$workload"); V+=("$v"); N+=("$name"); P+=("$nproc"); L+=("$launch")
done
if [ "$MODE" != throughput ]; then
  for i in "${!N[@]}"; do profile_one "${N[$i]}"; done
fi
if [ "$MODE" != profile ]; then
  for i in "${!N[@]}"; do throughput_one "${N[$i]}" "${W[$i]}" "${V[$i]}" "${P[$i]}" "${L[$i]}"; done
fi
