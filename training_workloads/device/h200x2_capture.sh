#!/usr/bin/env bash
# 2-GPU DDP captures (nvidia-h200-x2): bash training_workloads/device/h200x2_capture.sh SECONDS
# Same setup as h200_capture.sh: the OSRT recipe (config.ini beside nsys, profile.sh strips each
# rank's .qdstrm after the run). TRACE defaults to cuda,nvtx,osrt (the 2026-11-29 fixtures were made
# with TRACE=cuda,nvtx; osrt at world size 2 is not yet run: ~2.6 GB of temporary disk per rank).
set -uo pipefail
: "${OUT:?}"
W=/tmp/cap; mkdir -p $W/logs
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if [ -f .carry/nsys-target.deb ]; then dpkg -x .carry/nsys-target.deb /tmp/nsys
else mkdir -p /tmp/nsys && tar -xJf .carry/nsys-target-slim.tar.xz -C /tmp/nsys; fi
export NSYS=/tmp/nsys/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys
cp .carry/nsys-config.ini "$(dirname "$NSYS")/config.ini"
export QDSTRM_STRIP=$PWD/.carry/qdstrm_strip.py
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/whl/*.whl
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nvidia-smi topo -m
  python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count())'; } > $W/env.txt 2>&1
cat $W/env.txt
DEADLINE=$(( $(date +%s) + ${1:-300} ))
left() { echo $(( DEADLINE - $(date +%s) )); }
export TRACE=${TRACE:-cuda,nvtx,osrt} NPROC=2 OUTDIR=$W
cap() {  # NAME VARIANT [ARGS]
  local name=$1 v=$2; shift 2
  [ "$(left)" -gt 30 ] || { echo "skip $name"; return; }
  local t0=$SECONDS
  NAME=$name timeout -k 5 $(( $(left) < 90 ? $(left) : 90 )) bash training_workloads/profile.sh $v --warmup 10 --steps 3 "$@" \
    > $W/logs/$name.log 2>&1
  echo "$name rc=$? $((SECONDS-t0))s $(grep -h '^THROUGHPUT' $W/logs/$name.log | tr '\n' ' ')"
}
thr() {  # NAME VARIANT [ARGS]: unprofiled throughput at world size 2
  local name=$1 v=$2; shift 2
  [ "$(left)" -gt 30 ] || { echo "skip thr $name"; return; }
  timeout -k 5 $(( $(left) < 60 ? $(left) : 60 )) torchrun --nproc_per_node=2 -m training_workloads ddp --variant $v \
    --warmup 5 --steps 10 --no-profiler-range "$@" > $W/logs/$name.thr.log 2>&1
  echo "THR $name rc=$? $(grep -h '^THROUGHPUT' $W/logs/$name.thr.log | tr '\n' ' ')"
}
cap vit_l32_2gpu_ddp ddp
cap vit_l32_2gpu_bucket100 ddp --bucket-cap-mb 100
cap vit_l32_2gpu_bucket_view bucket-view
cap vit_l32_2gpu_bf16 bf16
cap vit_l32_2gpu_powersgd powersgd
thr vit_l32_2gpu_ddp ddp
thr vit_l32_2gpu_bucket100 ddp --bucket-cap-mb 100
thr vit_l32_2gpu_bucket_view bucket-view
thr vit_l32_2gpu_bf16 bf16
thr vit_l32_2gpu_powersgd powersgd
ls -l $W
cp $W/env.txt "$OUT/"
tar -C /tmp -cJf "$OUT/logs.tar.xz" cap/logs
(cd /tmp && find cap -maxdepth 1 -type f -name '*.qdstrm' -size -150M -print0 | tar --null -T - -cf - | xz -T0 -6 > /tmp/traces.tar.xz)
split -b 15M -d -a 1 /tmp/traces.tar.xz "$OUT/traces.tar.xz.part"
ls -l "$OUT"
