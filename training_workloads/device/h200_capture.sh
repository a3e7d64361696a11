#!/usr/bin/env bash
# Run on the lent H200 from the repo root, with `.carry` carried (bash ../shared/tools/nsys-local.sh carry .carry):
#
#   bash training_workloads/device/h200_capture.sh profile|throughput|both SECONDS [NAME...] [-- NAME...]
#
# Names after `--` are only measured unprofiled (the ones before get the phase given), so one call
# can capture some workloads and time others. CARRY (default .carry) is where the carried files are:
# to run a copy of training_workloads carried in .carry/src (the checkout's own one would shadow it
# under `python -m`), `cd .carry/src && CARRY=../ bash training_workloads/device/h200_capture.sh ...`.
# Unpacks the carried nsys 2023.4 target and python nvtx 0.2.11, sets up the OSRT recipe
# (config.ini with UseLZ4HighCompression=false beside the nsys binary; profile.sh strips the
# "Symbol Files" section of each .qdstrm right after its run), then runs capture_all.sh into
# /tmp/cap until SECONDS from now (default names: every capture). Small files (tsv, logs) go to
# $OUT first; the stripped traces come back as one tar.xz split into 15 MiB parts.
# TRACE defaults to cuda,nvtx,osrt.
set -uo pipefail
: "${OUT:?}"
phase=${1:?profile|throughput|both}; seconds=${2:?SECONDS}; shift 2
names=(); timed=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do names+=("$1"); shift; done
[ "${1:-}" = -- ] && { shift; timed=("$@"); }
CARRY=$(cd "${CARRY:-.carry}" && pwd)
here=$(cd "$(dirname "$0")/.." && pwd)
W=/tmp/cap; mkdir -p $W
export PYTHONUNBUFFERED=1
# the .deb, or a slimmed copy (old CUPTIs and CollectX dropped) that keeps the carry under 64 MiB
if [ -f "$CARRY/nsys-target.deb" ]; then dpkg -x "$CARRY/nsys-target.deb" /tmp/nsys
else mkdir -p /tmp/nsys && tar -xJf "$CARRY/nsys-target-slim.tar.xz" -C /tmp/nsys; fi
export NSYS=/tmp/nsys/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys
cp "$CARRY/nsys-config.ini" "$(dirname "$NSYS")/config.ini"
export QDSTRM_STRIP=$CARRY/qdstrm_strip.py TRACE=${TRACE:-cuda,nvtx,osrt}
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$CARRY"/whl/*.whl
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader
  "$NSYS" --version
  python3 -c 'import sys, torch, torchvision, nvtx; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "torchvision", torchvision.__version__, "nccl", torch.cuda.nccl.version(), "nvtx", nvtx.__file__)'
  python3 -c 'import jax, cupy, numpy; print("jax", jax.__version__, "cupy", cupy.__version__, "numpy", numpy.__version__)'
  echo "nproc $(nproc)"; free -g | head -2; df -h /tmp | tail -1; uname -r; echo "TRACE=$TRACE"; } > $W/env.txt 2>&1
cat $W/env.txt
T0=$SECONDS
export DEADLINE=$(( $(date +%s) + seconds )) RUN_TIMEOUT=${RUN_TIMEOUT:-80}
[ ${#names[@]} -gt 0 ] && MODE=$phase THROUGHPUT_STEPS=${THROUGHPUT_STEPS:-5} bash "$here/capture_all.sh" $W "${names[@]}"
[ ${#timed[@]} -gt 0 ] && MODE=throughput THROUGHPUT_STEPS=${THROUGHPUT_STEPS:-5} bash "$here/capture_all.sh" $W "${timed[@]}"
echo "phase $phase took $((SECONDS-T0)) s"
ls -l $W
cat $W/throughput.tsv $W/captures.tsv 2>/dev/null
cp $W/env.txt $W/throughput.tsv $W/captures.tsv "$OUT/" 2>/dev/null
tar -C /tmp -cJf "$OUT/logs.tar.xz" cap/logs
# traces: only files under 150 MB travel (an unstripped .qdstrm is left behind, its size listed)
ls -l $W > "$OUT/ls.txt"
compgen -G "$W/*.qdstrm" >/dev/null || compgen -G "$W/*.nsys-rep" >/dev/null || exit 0  # nothing profiled
(cd /tmp && find cap -maxdepth 1 -type f \( -name '*.qdstrm' -o -name '*.nsys-rep' -o -name '*.sqlite' \) -size -150M -print0 \
  | tar --null -T - -cf - | xz -T0 -6 > /tmp/traces.tar.xz)
ls -l /tmp/traces.tar.xz
split -b 15M -d -a 1 /tmp/traces.tar.xz "$OUT/traces.tar.xz.part"
ls -l "$OUT"
