#!/usr/bin/env bash
# Profile one training_workloads variant with Nsight Systems and export it to SQLite.
#
#   training_workloads/profile.sh VARIANT [WORKLOAD ARGS...]
#
# VARIANT: a capture name (resnet18_baseline ... resnet18_prefetch, vit_l32_single ...
#          vit_l32_powersgd) or a bare variant (baseline, workers, pinned, streams, prefetch,
#          single, ddp, static-graph, bucket-view, bf16, powersgd).
# Extra args go to `python -m training_workloads <workload>` (e.g. --steps 3 --bucket-cap-mb 100).
#
# Environment:
#   NSYS=nsys            the nsys binary
#   OUTDIR=.             where <name>.nsys-rep / .sqlite (or .qdstrm) land
#   NAME=<capture name>  output stem
#   NPROC=1              DDP variants: torchrun --nproc_per_node (outputs <name>_<RANK> when > 1)
#   TRACE=cuda,nvtx,osrt nsys --trace
#   NSYS_EXTRA=""        more nsys profile flags (e.g. --osrt-threshold=10000)
#   QDSTRM_STRIP=        path of qdstrm_strip.py (../shared/tools, packed by `nsys-local.sh carry`):
#                        with osrt traced, each .qdstrm left behind is stripped of its "Symbol Files"
#                        section (~2.5 GB of copied ELF modules) right after the run
#   PYTHON=python3, TORCHRUN=torchrun (falls back to "$PYTHON -m torch.distributed.run")
#   EXPORT=1             run `nsys export --type sqlite` on each report (0: skip)
#   LAUNCH=torchrun      DDP variants: torchrun (default) or direct (one process, world of one,
#                        no torchrun; the workload sets RANK/WORLD_SIZE/MASTER_* itself)
#
# DDP variants run as in the article: torchrun --nproc_per_node=N --no-python nsys profile ...
# python -m training_workloads ddp ...; `single` runs nsys directly (no torchrun, no DDP). The gloo
# variants run the same way with their own process count (8), mpi-hoststaged under
# `mpirun -np 2` with MPI tracing (rank files NAME_<rank>); a variant's capture_args (variants.py)
# come after the given arguments, so they win (e.g. compile-warmup: --warmup 0).
# Where nsys has no report importer (seen with the 2023.4 target package on an H200), only a
# .qdstrm is left: import it elsewhere (QdstrmImporter, or ../shared/tools/nsys-local.sh import),
# after `python -m training_workloads.qdstrm_patch FILE.qdstrm` when the program used CUDA >= 12.5
# APIs that nsys 2023.4 does not know (PyTorch DDP does). OSRT with nsys 2023.4 needs a config.ini
# holding `UseLZ4HighCompression=false` beside the nsys binary and the strip above (CAPTURE_NOTES.md).
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,35p' "$0"; exit 2; }
variant=$1; shift

NSYS=${NSYS:-nsys}
PYTHON=${PYTHON:-python3}
OUTDIR=${OUTDIR:-.}
NPROC=${NPROC:-1}
TRACE=${TRACE:-cuda,nvtx,osrt}
EXPORT=${EXPORT:-1}
if [ -z "${TORCHRUN:-}" ]; then
  if command -v torchrun >/dev/null 2>&1; then TORCHRUN=torchrun; else TORCHRUN="$PYTHON -m torch.distributed.run"; fi
fi
# NVLink multicast stays off (it can take a shared host's GPUs out of service)
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} TORCH_SYMM_MEM_DISABLE_MULTICAST=${TORCH_SYMM_MEM_DISABLE_MULTICAST:-1} \
       NVSHMEM_DISABLE_NVLS=${NVSHMEM_DISABLE_NVLS:-1}

# resolve (workload, variant, capture name) with the package's own table
# (workload, variant, capture name, processes (0: direct), launcher, the variant's own capture arguments)
read -r workload v canon nproc launcher extra < <("$PYTHON" -c '
import sys
from training_workloads.variants import capture_args, capture_name, launch_nproc, launcher, parse_capture_name
w, v = parse_capture_name(sys.argv[1])
print(w, v, capture_name(w, v), launch_nproc(w, v, int(sys.argv[2])), launcher(w, v), capture_args(w, v))' \
  "$variant" "$NPROC")
[ "${LAUNCH:-torchrun}" = direct ] && nproc=0
# shellcheck disable=SC2206
extra_args=($extra)
NAME=${NAME:-$canon}
mkdir -p "$OUTDIR"

# mpirun variants: MPI calls traced too (Open MPI on the H200 image)
[ "$launcher" = mpirun ] && TRACE="$TRACE,mpi" && NSYS_EXTRA="--mpi-impl=openmpi ${NSYS_EXTRA:-}"
nsys_args=(profile
  --capture-range=cudaProfilerApi --capture-range-end=stop
  --trace="$TRACE"
  --sample=none --cpuctxsw=none --backtrace=none
  --cuda-graph-trace=node
  --force-overwrite=true)
# shellcheck disable=SC2206
[ -n "${NSYS_EXTRA:-}" ] && nsys_args+=($NSYS_EXTRA)

set +e
if [ "$nproc" = 0 ]; then
  "$NSYS" "${nsys_args[@]}" -o "$OUTDIR/$NAME" "$PYTHON" -m training_workloads "$workload" --variant "$v" "$@" \
    "${extra_args[@]}"
  rc=$?
elif [ "$launcher" = mpirun ]; then
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np "$nproc" --oversubscribe --bind-to none \
    "$NSYS" "${nsys_args[@]}" -o "$OUTDIR/${NAME}_%q{OMPI_COMM_WORLD_RANK}" \
    "$PYTHON" -m training_workloads "$workload" --variant "$v" "$@" "${extra_args[@]}"
  rc=$?
else
  out="$OUTDIR/$NAME"; [ "$nproc" -gt 1 ] && out="${out}_%q{RANK}"
  # shellcheck disable=SC2086
  $TORCHRUN --nproc_per_node="$nproc" --no-python \
    "$NSYS" "${nsys_args[@]}" -o "$out" "$PYTHON" -m training_workloads "$workload" --variant "$v" "$@" \
    "${extra_args[@]}"
  rc=$?
fi
set -e
echo "profile.sh: $NAME: nsys/torchrun exit status $rc" >&2

found() {  # existing files among <stem>.<ext> and <stem>_<rank>.<ext>
  local ext=$1 f
  for f in "$OUTDIR/$NAME.$ext" "$OUTDIR/${NAME}"_[0-9]*."$ext"; do [ -f "$f" ] && echo "$f"; done
  return 0
}
if [[ ",$TRACE," == *,osrt,* ]] && [ -n "${QDSTRM_STRIP:-}" ]; then
  mapfile -t q < <(found qdstrm)
  for f in "${q[@]}"; do
    [[ $f == *.nosym.qdstrm ]] && continue
    "$PYTHON" "$QDSTRM_STRIP" "$f" "${f%.qdstrm}.nosym.qdstrm" && mv -f "${f%.qdstrm}.nosym.qdstrm" "$f"
    echo "profile.sh: stripped symbol files: $f is $(stat -c %s "$f") bytes" >&2
  done
fi
mapfile -t reps < <(found nsys-rep)
if [ ${#reps[@]} -eq 0 ]; then
  mapfile -t q < <(found qdstrm)
  if [ ${#q[@]} -gt 0 ]; then
    echo "profile.sh: no .nsys-rep (this nsys has no report importer); on a host that has one run" \
         "python -m training_workloads.qdstrm_patch and the importer on ${q[*]}" >&2
    exit 0
  fi
  echo "profile.sh: $NAME: nothing was written" >&2
  exit "$(( rc ? rc : 1 ))"
fi
if [ "$EXPORT" = 1 ]; then
  for rep in "${reps[@]}"; do
    "$NSYS" export --type sqlite --force-overwrite true -o "${rep%.nsys-rep}.sqlite" "$rep"
    echo "profile.sh: wrote ${rep%.nsys-rep}.sqlite" >&2
  done
fi
