#!/usr/bin/env bash
# Run on the lent H200 from the repo root:  bash training_workloads/device/h200_capture.sh probe|capture [NAME...]
# Unpacks the carried nsys 2023.4 target + python nvtx 0.2.11, runs training_workloads/capture_all.sh
# into /tmp/cap, then bundles /tmp/cap (qdstrm, logs, tsv) as xz-compressed 15 MiB parts in $OUT.
set -uo pipefail
: "${OUT:?}"
W=/tmp/cap; mkdir -p $W
export PYTHONUNBUFFERED=1
dpkg -x .carry/nsys-target.deb /tmp/nsys
export NSYS=/tmp/nsys/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/whl/*.whl
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader
  "$NSYS" --version
  python3 -c 'import sys, torch, torchvision, nvtx; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "torchvision", torchvision.__version__, "nccl", torch.cuda.nccl.version(), "nvtx", nvtx.__file__)'
  echo "nproc $(nproc)"; free -g | head -2; uname -r; command -v torchrun xz zstd gzip; } > $W/env.txt 2>&1
cat $W/env.txt
phase=${1:?probe|capture}; shift
T0=$SECONDS
case $phase in
probe)
  timeout -k 5 "${BUDGET:-430}" bash -c '
    MODE=profile RUN_TIMEOUT=100 bash training_workloads/capture_all.sh /tmp/cap resnet18_baseline resnet18_workers vit_l32_ddp
    ls -l /tmp/cap
    sz=$(stat -c %s /tmp/cap/resnet18_workers.qdstrm 2>/dev/null || echo 0)
    if [ "$sz" -gt 100000000 ]; then
      echo "workers qdstrm is $sz bytes: retry with --osrt-threshold=10000"
      NAME=resnet18_workers_osrt10us NSYS_EXTRA=--osrt-threshold=10000 OUTDIR=/tmp/cap timeout 100 \
        bash training_workloads/profile.sh resnet18_workers > /tmp/cap/logs/resnet18_workers_osrt10us.profile.log 2>&1
      ls -l /tmp/cap/resnet18_workers_osrt10us.*
    fi
    MODE=throughput RUN_TIMEOUT=80 bash training_workloads/capture_all.sh /tmp/cap
  ' ;;
capture)
  # $1: seconds of work allowed (captures first, then unprofiled runs until the deadline)
  export TRACE=${TRACE:-cuda,nvtx} DEADLINE=$(( $(date +%s) + ${1:-300} )) RUN_TIMEOUT=${RUN_TIMEOUT:-75}
  cd_=training_workloads/capture_all.sh
  MODE=profile bash $cd_ /tmp/cap resnet18_baseline resnet18_workers resnet18_pinned resnet18_streams \
    resnet18_prefetch vit_l32_single vit_l32_ddp
  if [ ! -s /tmp/cap/vit_l32_ddp.qdstrm ]; then
    echo "torchrun capture of vit_l32_ddp left no qdstrm: DDP variants without torchrun from here"
    export LAUNCH=direct
    MODE=profile bash $cd_ /tmp/cap vit_l32_ddp
  fi
  MODE=profile bash $cd_ /tmp/cap vit_l32_static_graph vit_l32_bucket_view vit_l32_bf16 vit_l32_powersgd
  ls -l /tmp/cap
  MODE=throughput THROUGHPUT_STEPS=${THROUGHPUT_STEPS:-5} bash $cd_ /tmp/cap
  ;;
esac
echo "phase $phase took $((SECONDS-T0)) s"
cat $W/throughput.tsv $W/captures.tsv 2>/dev/null
cp $W/env.txt $W/throughput.tsv $W/captures.tsv "$OUT/" 2>/dev/null
tar -C /tmp -cJf "$OUT/logs.tar.xz" cap/logs
# traces: only files under 150 MB travel (a blown-up .qdstrm is left behind, its size listed)
ls -l $W > "$OUT/ls.txt"
(cd /tmp && find cap -maxdepth 1 -type f \( -name '*.qdstrm' -o -name '*.nsys-rep' -o -name '*.sqlite' \) -size -150M -print0 \
  | tar --null -T - -cf - | xz -T0 -6 > /tmp/traces.tar.xz)
ls -l /tmp/traces.tar.xz
split -b 15M -d -a 1 /tmp/traces.tar.xz "$OUT/traces.tar.xz.part"
ls -l "$OUT"
