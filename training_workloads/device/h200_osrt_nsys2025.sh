#!/usr/bin/env bash
# Run from the repo root on the H200 with .carry/lib (libdw.so.1, libelf.so.1 from Debian 12) and .carry/whl carried.
# Try OSRT capture with the nsys 2025.3.1 that ships inside Nsight Compute on the H200 image.
set -uo pipefail
: "${OUT:?}"
export PYTHONUNBUFFERED=1
H=/opt/nvidia/nsight-compute/2025.3.1/host
N=$H/target-linux-x64/nsys
ls $H; $N --version
IMP=$(ls -d $H/linux-desktop-glibc_2_11_3-x64 2>/dev/null); echo "importer dir: $IMP"; ls $IMP | grep -i -E "qdstrm|import" | head
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/whl/*.whl
export PYTHONPATH=/tmp/site
mkdir -p /tmp/o
timeout -k 5 150 $N profile --capture-range=cudaProfilerApi --capture-range-end=stop --trace=cuda,nvtx,osrt \
  --sample=none --cpuctxsw=none --backtrace=none --force-overwrite=true -o /tmp/o/resnet18_workers_osrt \
  python3 -m training_workloads input-pipeline --variant workers --warmup 10 --steps 3 > /tmp/o/profile.log 2>&1
echo "profile rc=$?"; tail -5 /tmp/o/profile.log; ls -la /tmp/o
if ls /tmp/o/*.qdstrm >/dev/null 2>&1 && [ ! -f /tmp/o/resnet18_workers_osrt.nsys-rep ]; then
  LD_LIBRARY_PATH=$PWD/.carry/lib:$IMP timeout 120 $IMP/QdstrmImporter -i /tmp/o/resnet18_workers_osrt.qdstrm 2>&1 | tail -3
fi
if [ -f /tmp/o/resnet18_workers_osrt.nsys-rep ]; then
  timeout 120 $N export --type sqlite --force-overwrite true -o /tmp/o/resnet18_workers_osrt.sqlite /tmp/o/resnet18_workers_osrt.nsys-rep 2>&1 | tail -3
fi
ls -la /tmp/o
for f in /tmp/o/*.sqlite /tmp/o/*.nsys-rep; do [ -f "$f" ] && [ $(stat -c %s "$f") -lt 15000000 ] && xz -T0 -k -c "$f" > "$OUT/$(basename $f).xz"; done
cp /tmp/o/profile.log "$OUT/" 2>/dev/null
ls -la $OUT
