"""Teach an nsys 2023.4 ``.qdstrm`` the CUDA 12.5-13.0 API names, so its importer can read it.

nsys 2023.4 (CUPTI 12.4) stores, in the "Device Properties" section of each ``.qdstrm``, the
names of the CUDA runtime and driver API callbacks it knows, indexed by CUPTI callback id.
A program built against CUDA >= 12.5 can call APIs with higher ids; the 2023.4 importer
(QdstrmImporter) then aborts with ``Unknown runtime API function index: N`` and writes a
report with almost nothing in it.  Seen on the H200 with torch 2.11 + CUDA 13: PyTorch DDP
calls ``cudaEventElapsedTime`` (id 486, ``cudaEventElapsedTime_v12080``) to log its runtime
stats during its first 10 iterations.

This rewrites the file with the two name lists extended to CUDA 13.0's ids (runtime up to
522, driver up to 806), fixes the enclosing protobuf lengths and the section table in the
footer, and leaves every other byte as it was.  Standard library only.

    python -m training_workloads.qdstrm_patch IN.qdstrm [OUT.qdstrm]   (default: in place)

File layout relied on (checked, else it refuses): ``U3w[END]`` magic, sections, a footer of
``{1: {1: name, 2: offset, 3: size}}`` entries, the footer's 8-byte little-endian offset and
the magic again; section "Device Properties" is a protobuf whose field 2 holds, in field 1,
the lists (field 2: runtime names, field 3: driver names).
"""

from __future__ import annotations

import argparse
import sys
from typing import List, Tuple

MAGIC = b"U3w[END]"

# CUPTI (CUDA 13.0) callback ids 468..522
RUNTIME_NAMES_FROM_468 = (
    "cudaGetDriverEntryPointByVersion_v12050",  # 468
    "cudaGetDriverEntryPointByVersion_ptsz_v12050",  # 469
    "cudaLibraryLoadData_v12060",  # 470
    "cudaLibraryLoadFromFile_v12060",  # 471
    "cudaLibraryUnload_v12060",  # 472
    "cudaLibraryGetKernel_v12060",  # 473
    "cudaLibraryGetGlobal_v12060",  # 474
    "cudaLibraryGetManaged_v12060",  # 475
    "cudaLibraryGetUnifiedFunction_v12060",  # 476
    "cudaLibraryGetKernelCount_v12060",  # 477
    "cudaLibraryEnumerateKernels_v12060",  # 478
    "cudaKernelSetAttributeForDevice_v12060",  # 479
    "cudaStreamGetDevice_v12080",  # 480
    "cudaStreamGetDevice_ptsz_v12080",  # 481
    "cudaMemcpyBatchAsync_v12080",  # 482
    "cudaMemcpyBatchAsync_ptsz_v12080",  # 483
    "cudaMemcpy3DBatchAsync_v12080",  # 484
    "cudaMemcpy3DBatchAsync_ptsz_v12080",  # 485
    "cudaEventElapsedTime_v12080",  # 486
    "cudaMemPrefetchBatchAsync_v13000",  # 487
    "cudaMemPrefetchBatchAsync_ptsz_v13000",  # 488
    "cudaMemDiscardBatchAsync_v13000",  # 489
    "cudaMemDiscardBatchAsync_ptsz_v13000",  # 490
    "cudaMemDiscardAndPrefetchBatchAsync_v13000",  # 491
    "cudaMemDiscardAndPrefetchBatchAsync_ptsz_v13000",  # 492
    "cudaGetExportTable_v13000",  # 493
    "__cudaRegisterFatBinary_v13000",  # 494
    "__cudaRegisterFatBinaryEnd_v13000",  # 495
    "__cudaUnregisterFatBinary_v13000",  # 496
    "__cudaRegisterVar_v13000",  # 497
    "__cudaRegisterHostVar_v13000",  # 498
    "__cudaRegisterFunction_v13000",  # 499
    "__cudaRegisterManagedVar_v13000",  # 500
    "__cudaInitModule_v13000",  # 501
    "__cudaPushCallConfiguration_v13000",  # 502
    "__cudaPopCallConfiguration_v13000",  # 503
    "__cudaGetKernel_v13000",  # 504
    "__cudaLaunchKernel_v13000",  # 505
    "__cudaLaunchKernel_ptsz_v13000",  # 506
    "__cudaRegisterUnifiedTable_v13000",  # 507
    "__cudaGetProcAddress_v13000",  # 508
    "cudaMemcpyBatchAsync_v13000",  # 509
    "cudaMemcpyBatchAsync_ptsz_v13000",  # 510
    "cudaMemcpy3DBatchAsync_v13000",  # 511
    "cudaMemcpy3DBatchAsync_ptsz_v13000",  # 512
    "cudaLogsRegisterCallback_v13000",  # 513
    "cudaLogsUnregisterCallback_v13000",  # 514
    "cudaLogsCurrent_v13000",  # 515
    "cudaLogsDumpToFile_v13000",  # 516
    "cudaLogsDumpToMemory_v13000",  # 517
    "cudaMemGetDefaultMemPool_v13000",  # 518
    "cudaMemGetMemPool_v13000",  # 519
    "cudaMemSetMemPool_v13000",  # 520
    "cudaDeviceGetHostAtomicCapabilities_v13000",  # 521
    "cudaDeviceGetP2PAtomicCapabilities_v13000",  # 522
)
# CUPTI (CUDA 13.0) callback ids 754..806
DRIVER_NAMES_FROM_754 = (
    "cuKernelGetLibrary",  # 754
    "cuCtxRecordEvent",  # 755
    "cuCtxWaitEvent",  # 756
    "cuCtxCreate_v4",  # 757
    "cuGreenCtxStreamCreate",  # 758
    "cuStreamGetCtx_v2",  # 759
    "cuStreamGetCtx_v2_ptsz",  # 760
    "cuMemBatchDecompressAsync",  # 761
    "cuMemBatchDecompressAsync_ptsz",  # 762
    "cuLogsRegisterCallback",  # 763
    "cuLogsUnregisterCallback",  # 764
    "cuLogsCurrent",  # 765
    "cuLogsDumpToFile",  # 766
    "cuLogsDumpToMemory",  # 767
    "cuCheckpointProcessGetRestoreThreadId",  # 768
    "cuCheckpointProcessGetState",  # 769
    "cuCheckpointProcessLock",  # 770
    "cuCheckpointProcessCheckpoint",  # 771
    "cuCheckpointProcessRestore",  # 772
    "cuCheckpointProcessUnlock",  # 773
    "cuStreamGetDevice",  # 774
    "cuStreamGetDevice_ptsz",  # 775
    "cuMemcpyBatchAsync",  # 776
    "cuMemcpyBatchAsync_ptsz",  # 777
    "cuMemcpy3DBatchAsync",  # 778
    "cuMemcpy3DBatchAsync_ptsz",  # 779
    "cuEventElapsedTime_v2",  # 780
    "cuTensorMapEncodeIm2colWide",  # 781
    "cuGreenCtxGetId",  # 782
    "cuStreamCreateForCaptureToCig",  # 783
    "cuMemPrefetchBatchAsync",  # 784
    "cuMemPrefetchBatchAsync_ptsz",  # 785
    "cuSemaphoreCreate",  # 786
    "cuSemaphoreExport",  # 787
    "cuSemaphoreDestroy",  # 788
    "cuMemDiscardBatchAsync",  # 789
    "cuMemDiscardBatchAsync_ptsz",  # 790
    "cuMemDiscardAndPrefetchBatchAsync",  # 791
    "cuMemDiscardAndPrefetchBatchAsync_ptsz",  # 792
    "cuMultiKernelCooperativeDomainCreate",  # 793
    "cuMultiKernelCooperativeDomainDestroy",  # 794
    "cuCtxGetDevice_v2",  # 795
    "cuMemcpyBatchAsync_v2",  # 796
    "cuMemcpyBatchAsync_v2_ptsz",  # 797
    "cuMemcpy3DBatchAsync_v2",  # 798
    "cuMemcpy3DBatchAsync_v2_ptsz",  # 799
    "cuCtxSynchronize_v2",  # 800
    "cuMemGetDefaultMemPool",  # 801
    "cuMemGetMemPool",  # 802
    "cuMemSetMemPool",  # 803
    "cuDeviceGetP2PAtomicCapabilities",  # 804
    "cuDeviceGetHostAtomicCapabilities",  # 805
    "cuDriverGetGpuCodeIsaVersion",  # 806
)


def _varint(b: bytes, i: int) -> Tuple[int, int]:
    r = s = 0
    while True:
        x = b[i]
        i += 1
        r |= (x & 0x7F) << s
        s += 7
        if not x & 0x80:
            return r, i


def _enc_varint(v: int) -> bytes:
    out = bytearray()
    while True:
        x = v & 0x7F
        v >>= 7
        if v:
            out.append(x | 0x80)
        else:
            out.append(x)
            return bytes(out)


Field = Tuple[int, int, object]  # (field number, wire type, int value or bytes payload)


def _fields(b: bytes) -> List[Field]:
    out: List[Field] = []
    i = 0
    while i < len(b):
        tag, i = _varint(b, i)
        f, wt = tag >> 3, tag & 7
        if wt == 0:
            v, i = _varint(b, i)
            out.append((f, wt, v))
        elif wt == 2:
            n, i = _varint(b, i)
            out.append((f, wt, b[i:i + n]))
            i += n
        elif wt == 1:
            out.append((f, wt, b[i:i + 8]))
            i += 8
        elif wt == 5:
            out.append((f, wt, b[i:i + 4]))
            i += 4
        else:
            raise ValueError(f"unsupported wire type {wt}")
    if i != len(b):
        raise ValueError("truncated protobuf")
    return out


def _encode(fields: List[Field]) -> bytes:
    out = bytearray()
    for f, wt, v in fields:
        out += _enc_varint(f << 3 | wt)
        if wt == 0:
            out += _enc_varint(v)  # type: ignore[arg-type]
        elif wt == 2:
            out += _enc_varint(len(v)) + v  # type: ignore[arg-type]
        else:
            out += v  # type: ignore[operator]
    return bytes(out)


def _extend_lists(lists: bytes) -> Tuple[bytes, int, int]:
    fields = _fields(lists)
    rt = [k for k, (f, wt, _) in enumerate(fields) if f == 2 and wt == 2]
    dr = [k for k, (f, wt, _) in enumerate(fields) if f == 3 and wt == 2]
    if not rt or not dr or fields[rt[0]][2] != b"INVALID" or fields[dr[1]][2] != b"cuInit":
        raise ValueError("API name lists not found where expected")
    add_rt = RUNTIME_NAMES_FROM_468[max(0, len(rt) - 468):] if len(rt) >= 468 else None
    add_dr = DRIVER_NAMES_FROM_754[max(0, len(dr) - 754):] if len(dr) >= 754 else None
    if add_rt is None or add_dr is None:
        raise ValueError(f"unexpected list sizes: {len(rt)} runtime, {len(dr)} driver names")
    new = list(fields)
    # driver names go after the last driver entry, runtime after the last runtime entry
    for pos, names, fno in sorted(((dr[-1], add_dr, 3), (rt[-1], add_rt, 2)), reverse=True):
        new[pos + 1:pos + 1] = [(fno, 2, n.encode()) for n in names]
    return _encode(new), len(add_rt), len(add_dr)


def patch(data: bytes) -> Tuple[bytes, str]:
    if not (data.startswith(MAGIC) and data.endswith(MAGIC)):
        raise ValueError("not an nsys .qdstrm (magic missing)")
    footer_at = int.from_bytes(data[-16:-8], "little")
    sections = []
    for f, wt, v in _fields(data[footer_at:-16]):
        if f != 1 or wt != 2:
            raise ValueError("unexpected footer entry")
        e = {k: val for k, _, val in _fields(v)}  # type: ignore[arg-type]
        sections.append([e[1].decode(), e[2], e[3]])  # type: ignore[union-attr]
    names = [s[0] for s in sections]
    if "Device Properties" not in names:
        raise ValueError("no Device Properties section")
    dp = sections[names.index("Device Properties")]
    off, size = dp[1], dp[2]
    top = _fields(data[off:off + size])
    k = next(k for k, (f, wt, _) in enumerate(top) if f == 2 and wt == 2)
    inner = _fields(top[k][2])  # type: ignore[arg-type]
    j = next(j for j, (f, wt, _) in enumerate(inner) if f == 1 and wt == 2)
    lists, n_rt, n_dr = _extend_lists(inner[j][2])  # type: ignore[arg-type]
    if n_rt == 0 and n_dr == 0:
        return data, "already complete: nothing to do"
    inner[j] = (1, 2, lists)
    top[k] = (2, 2, _encode(inner))
    new_dp = _encode(top)
    delta = len(new_dp) - size
    for s in sections:
        if s[1] > off:
            s[1] += delta
    dp[2] = len(new_dp)
    footer = _encode([(1, 2, _encode([(1, 2, n.encode()), (2, 0, o), (3, 0, z)]))
                      for n, o, z in sections])
    body = data[:off] + new_dp + data[off + size:footer_at]
    out = body + footer + len(body).to_bytes(8, "little") + MAGIC
    return out, f"added {n_rt} runtime and {n_dr} driver API names ({delta:+d} bytes)"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src")
    ap.add_argument("dst", nargs="?")
    a = ap.parse_args(argv)
    with open(a.src, "rb") as fh:
        data = fh.read()
    try:
        out, msg = patch(data)
    except (ValueError, KeyError, IndexError, StopIteration) as e:
        print(f"{a.src}: {e}", file=sys.stderr)
        return 1
    with open(a.dst or a.src, "wb") as fh:
        fh.write(out)
    print(f"{a.src}: {msg}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
