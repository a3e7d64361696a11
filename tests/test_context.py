"""Program context (issue 22): the framework from every clue, the recorder's nsys version beside the exporter's,
devices of one process are not ranks, stragglers found by who waits, collectives by their pattern.

Real exports (../shared/traces and fixtures/) where the case exists in one; rules on hand-built Evidence
(tests/test_rules.py's style); cross-rank cases on real reports whose attribution or devices were edited,
each edit stated where it is made."""
import copy

import pandas as pd
import pytest
from rich.console import Console

from evidence import ledger_of
from conftest import fixture_trace, shared_trace
from nsysanalyze import framework as F
from nsysanalyze import ranks
from nsysanalyze.render.contract import report_of as analyze_file
from nsysanalyze.render import html
from nsysanalyze.render import ranks as ranks_render
from nsysanalyze.render.format import trace_line
from nsysanalyze.rules import Evidence, diagnose, diagnose_devices

MS = 1_000_000


def public(name):
    return analyze_file(shared_trace(f"public/{name}"))


# ---- framework from every clue ------------------------------------------------------------------------

def strings(*present):
    """has_string for detect(): the given SQL LIKE patterns match, nothing else."""
    return set(present).__contains__


def test_python_program_without_a_process_name_is_python_from_cpython_modules():
    fw = F.detect(strings("%.cpython-3%.so%"), [], gpu_work=True)
    assert fw.name == "python" and fw.is_python and "CPython modules" in fw.clues[-1]
    assert F.detect(strings(), [], gpu_work=True).name == "cuda"  # no clue at all: a native program


def test_thread_names_say_python_and_pytorch():
    assert F.detect(strings(), [], True, threads=["python3", "cuda-EvtHandlr"]).name == "python"
    fw = F.detect(strings(), [], True, threads=["python3", "pt_autograd_0"])
    assert fw.name == "pytorch" and "PyTorch thread 'pt_autograd_0'" in fw.clues
    assert F.detect(strings(), [], True, threads=["python3", "XlaLauncher:#global=0,local=0#"]).name == "jax"


def test_library_strings_and_kernel_prefixes_name_the_framework():
    assert F.detect(strings("%/jaxlib/%"), ["python3"], True).name == "jax"
    assert F.detect(strings("cupy_%"), [], True).name == "cupy"
    assert F.detect(strings("%cudapy%"), [], True).name == "numba"
    assert F.detect(strings("%/libtensorflow%"), [], True).name == "tensorflow"
    # kernel names outrank library paths (a CuPy program that also loaded torch is CuPy)
    assert F.detect(strings("cupy_%", "%/libtorch_cuda%"), [], True).name == "cupy"
    assert F.detect(strings(), [], True, domains=["TensorRT"]).name == "tensorrt"


def test_mpi_from_its_domain_and_its_library():
    assert F.detect(strings(), [], True, domains=["MPI"]).mpi
    assert F.detect(strings(), [], True, mpi_traced=True).clues == ["MPI trace"]
    fw = F.detect(strings("%/libmpi.so%"), [], True)
    assert fw.mpi and fw.name == "cuda" and "library like '%/libmpi.so%'" in fw.clues
    assert not F.detect(strings(), ["./heat"], True).mpi


def test_quasiben_without_a_processes_table_is_python_from_its_threads():
    d = public("quasiben__multiprocessing.sqlite")
    assert d["trace"]["framework"] == "python" and "python process 'python'" in d["trace"]["framework_clues"]


def test_cupy_power_iteration_and_julia_flux():
    assert public("nsightful__power_iteration__baseline.sqlite")["trace"]["framework"] == "cupy"
    d = public("gartangh__flux_darknet19.sqlite")
    assert d["trace"]["framework"] == "julia"
    assert all(f["snippet"] == "" for f in d["findings"])  # no code in a language we have no snippet for


# ---- truthful headers -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name,gpu", [("gartangh__flux_darknet19.sqlite", "GeForce GTX 1650"),
                                      ("abacus__resnet101_streams_report1.sqlite", "TITAN RTX")])
def test_old_recorders_show_their_gpu_not_no_gpu_activity(name, gpu):
    """nsys 2019.6/2020.3 left TARGET_INFO_GPU's id NULL: the one GPU listed is the one with kernels."""
    d = public(name)
    line = trace_line(d)
    assert "no GPU activity" not in line and f" · {gpu} · " in line
    assert d["trace"]["devices"][0]["name"] == gpu


def test_recorder_version_apart_from_the_exporter():
    d = public("abacus__resnet101_streams_report1.sqlite")
    assert d["trace"]["nsys_version"] == "2023.4.4.54" and d["trace"]["recorder_nsys_version"] == "2020.3.2"
    assert "nsys 2020.3.2 (exported with 2023.4.4.54)" in trace_line(d)
    # NVTX was on and no range came: the python-nvtx note is about nsys 2023.4, not this 2020.3 recorder
    assert not any("python `nvtx`" in n for n in d["notes"])
    assert any(n.startswith("NVTX tracing was on but the program recorded no NVTX range") for n in d["notes"])
    assert public("ayush__vecadd_launchbound_v3.sqlite")["trace"]["recorder_nsys_version"] == "2023.1.2"
    assert public("nsys-ai__mfu_2gpu_after.sqlite")["trace"]["recorder_nsys_version"] == "2026.2.1"


def test_a_qdrep_without_a_version_says_an_older_nsys_recorded_it():
    d = public("gartangh__flux_darknet19.sqlite")
    assert d["trace"]["recorder_nsys_version"] is None
    assert any("from a .qdrep report: an older nsys recorded it" in n for n in d["notes"])


def test_python_nvtx_note_still_fires_for_a_2023_4_recording():
    d = analyze_file(shared_trace("h200/resnet18-bs8-nvtx0.2.17-dropped.sqlite"))
    assert any("nsys 2023.4 does not record python nvtx >= 0.2.12" in n for n in d["notes"])


def test_html_header_of_a_trace_without_gpu_names():
    d = public("nsys-ai__mfu_2gpu_after.sqlite")
    page = "".join(str(x) for x in html.header(d))
    assert "no GPU activity" not in page and "2 GPU(s), name not recorded" in page


# ---- devices are not ranks ------------------------------------------------------------------------------

def two_devices_one_process(rep: dict, path: str) -> dict:
    """A real one-GPU report given a second GPU in the same process (tensor.cuda(1).to(2)): its device
    copied as deviceId 1, 40 ms shorter per step."""
    r = copy.deepcopy(rep)
    r["trace"]["path"] = path
    dev = copy.deepcopy(r["summary"]["devices"][0])
    dev["deviceId"] = 1
    dev["step_median_window_ns"] -= 40 * MS
    r["summary"]["devices"].append(dev)
    r["steps"] += [{**s, "deviceId": 1, "window_ns": s["window_ns"] - 40 * MS} for s in r["steps"]]
    return r


@pytest.fixture(scope="module")
def resnet():
    return analyze_file(shared_trace("h200/resnet18-baseline-nvtx.sqlite"))


def test_two_gpus_of_one_process_are_one_rank_and_no_straggler(resnet):
    r = two_devices_one_process(resnet, "run.sqlite")
    assert ranks.rank_count(r) == 1  # the CLI shows no cross-rank view for it
    view = ranks.cross_rank([r])
    (rank,) = view["ranks"]
    assert rank["devices"] == [0, 1] and rank["deviceId"] == 0 and rank["label"] == "GPUs 0, 1"
    s = view["summary"]
    assert s["ranks"] == 1 and "likely_straggler" not in s and s["slowest_rank"] is None


def test_two_files_of_two_gpus_each_are_two_ranks(resnet):
    view = ranks.cross_rank([two_devices_one_process(resnet, f"run_{i}.sqlite") for i in (0, 1)])
    assert [r["rank"] for r in view["ranks"]] == [0, 1] and all(r["devices"] == [0, 1] for r in view["ranks"])
    assert [r["label"] for r in view["ranks"]] == ["run_0.sqlite GPUs 0, 1", "run_1.sqlite GPUs 0, 1"]


# ---- stragglers by waiting ------------------------------------------------------------------------------

def with_gaps(rep: dict, path: str, rows: list[tuple[str, str, float, float]]) -> dict:
    """A real report renamed ``path`` whose attribution rows are replaced by ``rows`` (cause_kind, cause, ns,
    before_launch_ns): the step times stay the real ones, equal on every rank as in synchronous DDP."""
    r = copy.deepcopy(rep)
    r["trace"]["path"] = path
    d = r["summary"]["devices"][0]
    r["gaps"] = [{"globalPid": d["globalPid"], "deviceId": d["deviceId"], "scope": "step median", "cause_kind": k,
                  "cause": c, "ns": ns, "before_launch_ns": bl, "after_sync_ns": 0.0, "short_gap_ns": 0.0,
                  "short_after_sync_ns": 0.0} for k, c, ns, bl in rows]
    return r


LOADER = [("untraced", "host work outside traced calls", 212 * MS, 210 * MS), ("launch", "kernel launch", 3 * MS, 0)]
WAITING = [("os_wait", "pthread_cond_wait", 250 * MS, 0), ("launch", "kernel launch", 3 * MS, 0)]


def test_the_rank_that_waits_least_is_the_straggler_with_its_own_cause(resnet):
    """8 ranks, equal step times; rank 5 idles 212 ms in host work, 210 ms of it before its first launch, while the other
    seven wait 250 ms in pthread_cond_wait (a gloo all-reduce inside backward)."""
    reports = [with_gaps(resnet, f"run_{i}.sqlite", LOADER if i == 5 else WAITING) for i in range(8)]
    view = ranks.cross_rank(reports)
    s = view["summary"]
    assert s["spread_ns"] == 0  # step times alone name nobody
    assert s["likely_straggler"] == 5 and s["wait_kind"] == "host"
    assert s["straggler_cause"] == ranks.BEFORE_LAUNCH and s["straggler_cause_ns"] == 210 * MS
    assert s["others_wait_ns"] == 250 * MS and s["straggler_wait_ns"] == 0
    assert s["straggler_next"]["rule"] == resnet["findings"][0]["rule"]
    lines = ranks_render.verdict(view)
    assert ("Likely straggler: rank 5: host work before the first launch, 210.0 ms per step; the other ranks wait "
            "250.0 ms in host waits (the all-reduce)") in " ".join(lines)
    assert any(line.startswith("Next: rank 5's ") for line in lines)
    assert ranks_render.rank_findings(view, reports)[0]["rule"] == s["straggler_next"]["rule"]


def test_balanced_waits_name_no_straggler(resnet):
    """Every rank waits 250 ms in the host all-reduce: that is the collective itself, nobody waits for anybody."""
    view = ranks.cross_rank([with_gaps(resnet, f"run_{i}.sqlite", WAITING) for i in range(4)])
    assert "likely_straggler" not in view["summary"] and "wait_ns_max" not in view["summary"]
    assert all(r["host_wait_ns"] == 250 * MS and r["wait_ns"] == 0 for r in view["ranks"])


def test_a_wait_unlike_the_least_waiting_ranks_own_cause_names_no_cause(resnet):
    """The others wait 250 ms, but rank 0's own largest cause is 3 ms: it is not what they wait for."""
    quiet = [("launch", "kernel launch", 3 * MS, 0)]
    view = ranks.cross_rank([with_gaps(resnet, f"run_{i}.sqlite", quiet if i == 0 else WAITING) for i in range(3)])
    assert "straggler_cause" not in view["summary"]


def test_ddp_fixtures_wait_in_nccl_beyond_the_transfer():
    reports = [analyze_file(fixture_trace(f"vit_l32_2gpu_ddp_{r}.sqlite")) for r in (0, 1)]
    view = ranks.cross_rank(reports)
    nccl = [r["nccl_ns"] for r in view["ranks"]]
    assert [r["wait_ns"] for r in view["ranks"]] == pytest.approx([n - min(nccl) for n in nccl], abs=1.0)
    assert "likely_straggler" not in view["summary"]  # 0.2 ms of extra NCCL time: under the noise
    # NCCL on both ranks: they meet every step. fp32-matmul is reported on rank 1 only (rank 0's own bound is under
    # the rule's 5%): for the job it lies between rank 0's wait (nothing of its own counted) and rank 1's gain
    job = {f["rule"]: f for f in view["findings"]}
    fp32 = job["fp32-matmul"]
    assert fp32["synchronized"] and fp32["ranks"] == [1] and fp32["missing_ranks"] == [0]
    assert fp32["job_gain_ns"] == view["ranks"][0]["wait_ns"] < fp32["job_gain_max_ns"]
    assert fp32["job_gain_max_ns"] == fp32["gain_ns_by_rank"]["1"] + view["ranks"][1]["wait_ns"]
    bucket = job["ddp-bucket-overlap"]  # on both: the least of (gain + wait)
    assert bucket["job_gain_ns"] == bucket["job_gain_max_ns"] == min(
        bucket["gain_ns_by_rank"][str(r["rank"])] + r["wait_ns"] for r in view["ranks"])
    line = ranks_render.job_next(view)
    assert line.startswith("Next for the job: fp32-matmul — ") and "for the job: not found on rank 0" in line


def test_rank_table_text_has_the_waits_column(resnet):
    console = Console(record=True, width=220)
    reports = [with_gaps(resnet, f"run_{i}.sqlite", LOADER if i == 0 else WAITING) for i in range(2)]
    ranks_render.render_text(ranks.cross_rank(reports), console)
    text = console.export_text()
    assert "waits" in text and "│ 250.0 ms │" in text


# ---- collectives by pattern -----------------------------------------------------------------------------

def ev(scope="step median", facts=None, framework="pytorch", **m):
    # the host runs ahead and waits 50 ms a step on the full launch queue: the GPU's work sets the step
    base = {"window_ns": 100 * MS, "idle_fraction": 0.0, "idle_ns": 0.0, "launch_ns": 50 * MS}
    base.update(m)
    gaps = Evidence.__dataclass_fields__["gaps"].default_factory()
    return Evidence(globalPid=1, deviceId=0, scope=scope, m=base, facts={"gpu_devices": 2, **(facts or {})},
                    framework=framework, ledger=ledger_of(base, gaps))


def nccl(kind, count, ns, exposed):
    return {"nccl_count": count, "nccl_ns": ns, f"nccl_{kind}_count": count, f"nccl_{kind}_ns": ns,
            f"nccl_{kind}_exposed_ns": exposed}


def test_a_lone_all_gather_is_not_fsdp():
    found = diagnose([ev(**nccl("allgather", 1, 20 * MS, 20 * MS))])
    rules = [f.rule for f in found]
    assert "fsdp-collectives" not in rules and "shard-collective-exposed" in rules
    f = next(f for f in found if f.rule == "shard-collective-exposed")
    assert "FSDP" not in f.title + f.fix and f.gain_ns == 10 * MS


def test_every_collective_finding_claims_the_nccl_time_its_fix_removes():
    """Hand-built evidence (not a trace): the collective rules pass their busy class themselves, so the
    all-gather that is not FSDP claims the exposed NCCL row like the FSDP rule does (before, a table of rule
    ids left shard-collective-exposed out: its gain was unbounded and it claimed nothing)."""
    e = ev(**nccl("allgather", 1, 20 * MS, 20 * MS), busy_ns=30 * MS)
    (f,) = [f for d in diagnose_devices([e]) for f in d.findings if f.rule == "shard-collective-exposed"]
    (row,) = f.claimed
    assert e.ledger.rows.iloc[row][["kind", "what", "ns"]].tolist() == ["busy", "nccl", 20 * MS]
    assert f.gain_ns == 10 * MS and "bound" in f.evidence


def test_fsdp_only_on_its_per_layer_pattern():
    m = {**nccl("allgather", 24, 20 * MS, 15 * MS), "nccl_reducescatter_count": 24, "nccl_reducescatter_ns": 10 * MS,
         "nccl_reducescatter_exposed_ns": 5 * MS, "nccl_count": 48}
    (f,) = [f for f in diagnose([ev(**m)]) if f.rule == "fsdp-collectives"]
    assert "per-layer pattern" in f.title and "forward_prefetch=True" in f.snippet


def test_a_capture_of_one_collective_is_not_a_training_step():
    found = diagnose([ev(scope="capture", **nccl("allgather", 1, 2 * MS, 2 * MS))])
    assert [f.rule for f in found if f.rule.startswith(("single", "fsdp", "shard", "ddp", "allreduce"))] == \
        ["single-collective"]
    assert "one NCCL allgather kernel" in found[0].title + "".join(f.title for f in found)
    found = diagnose([ev(scope="capture", **nccl("allreduce", 1, 2 * MS, 2 * MS))])
    assert not {f.rule for f in found} & {"ddp-bucket-overlap", "ddp-static-graph", "grad-compression"}


def test_sendrecv_on_the_compute_stream_and_the_per_step_sync_are_named():
    """nsys-ai's 2-GPU trace: 2 SendRecv kernels per step, 100% exposed, on each GPU's only compute stream
    (7 and 15), and one host sync per step of 9.0 / 9.5 ms (its steps' median sync_wait_ns)."""
    d = public("nsys-ai__mfu_2gpu_after.sqlite")
    p2p = {f["deviceId"]: f for f in d["findings"] if f["rule"] == "pipeline-p2p"}
    assert set(p2p) == {0, 1}
    assert "on the compute stream (stream 7)" in p2p[0]["title"] and "(100%)" in p2p[0]["title"]
    assert "on the compute stream (stream 15)" in p2p[1]["title"]
    assert "a host sync waits 9.0 ms per step (1 call(s))" in p2p[0]["title"]
    assert p2p[0]["evidence"]["nccl_on_compute_stream_fraction"] == 1.0
    assert 9.0 * MS < p2p[0]["evidence"]["sync_wait_ns"] < 9.1 * MS
    assert "own stream" in p2p[0]["fix"]


def test_nccl_on_compute_streams_metric():
    """Exact values on a hand-made frame: stream 7 runs compute and NCCL (6 ns of NCCL), stream 9 NCCL only (2 ns)."""
    from nsysanalyze.metrics import nccl_on_compute_streams

    k = pd.DataFrame({"globalPid": [1] * 4, "deviceId": [0] * 4, "streamId": [7, 7, 7, 9], "nameId": [1, 2, 2, 2],
                      "start": [0, 10, 30, 40], "end": [10, 14, 32, 42]})
    out = nccl_on_compute_streams([k], [2]).iloc[0]
    assert out["nccl_on_compute_stream_fraction"] == 6 / 8 and out["nccl_compute_stream"] == 7


def test_nccl_on_compute_streams_per_device():
    """Stream 7 runs compute on device 0 only: device 1's NCCL on its own stream 7 is on no compute stream;
    device 2 has compute on streams 7 and 9, NCCL on both (3 ns on 9, 1 ns on 7: stream 9 is named)."""
    from nsysanalyze.metrics import nccl_on_compute_streams

    k = pd.DataFrame({"globalPid": [1] * 8, "deviceId": [0, 0, 1, 1, 2, 2, 2, 2],
                      "streamId": [7, 7, 7, 8, 7, 9, 7, 9], "nameId": [1, 2, 2, 1, 1, 1, 2, 2],
                      "start": [0, 10, 20, 30, 0, 0, 10, 10], "end": [10, 14, 25, 31, 5, 5, 11, 13]})
    out = nccl_on_compute_streams([k], [2]).set_index("deviceId")
    assert out["nccl_on_compute_stream_fraction"].tolist() == [1.0, 0.0, 1.0]
    assert out["nccl_compute_stream"].tolist() == [7, -1, 9]


def test_allreduce_through_host_memory_is_a_finding_of_its_own():
    """25 MB of gradients out and 25 MB back per step, no NCCL kernel, 40 ms of GPU idle in host waits:
    the gain is that wait (what an all-reduce on the GPUs would no longer leave idle, at most)."""
    from nsysanalyze.rules import ddp

    def make(cause_kind="os_wait", cause="pthread_cond_wait", **m):
        m = {"window_ns": 100 * MS, "idle_ns": 40 * MS, "dtoh_bytes": 25e6, "htod_bytes": 25.3e6, **m}
        gaps = pd.DataFrame({"cause_kind": [cause_kind], "cause": [cause], "ns": [40.0 * MS],
                             "before_launch_ns": [0.0], "after_sync_ns": [0.0], "short_gap_ns": [0.0],
                             "short_after_sync_ns": [0.0]})
        return Evidence(globalPid=1, deviceId=0, scope="step median", m=m, gaps=gaps, framework="pytorch",
                        ledger=ledger_of(m, gaps))
    f = ddp.host_allreduce(make())
    assert f.rule == "allreduce-through-host" and f.gain_ns == 40 * MS and 'init_process_group("nccl")' in f.snippet
    assert ddp.host_allreduce(make(nccl_count=4)) is None           # NCCL does the reduction
    assert ddp.host_allreduce(make(htod_bytes=200e6)) is None       # an input upload, not gradients coming back
    plain = ddp.host_allreduce(Evidence(**{**make().__dict__, "framework": "cuda"}))
    assert plain.snippet == "" and "CUDA-aware MPI" in plain.fix
    mpi = make(cause_kind="cuda_blocking", cause="MPI_Allreduce")  # a host-staged MPI all-reduce's wait
    assert ddp.host_allreduce(mpi).gain_ns == 40 * MS


# ---- the 8-rank gloo jobs (fixtures/gloo_8rank_*: 8 DDP ranks on one H200, gloo backend; skipped when absent) ----

def gloo_job(variant: str) -> list[dict]:
    """The 8 rank files of one gloo job, analyzed ('8rank': balanced; '8rank_slow': rank 3's loader spends
    200 ms of CPU work per step)."""
    files = [fixture_trace(f"gloo_{variant}_{r}.sqlite") for r in range(8)]
    return [analyze_file(f) for f in files]


@pytest.fixture(scope="module")
def gloo_slow():
    return gloo_job("8rank_slow")


@pytest.fixture(scope="module")
def gloo_balanced():
    return gloo_job("8rank")


def test_gloo_slow_rank_is_named_by_waiting_with_its_cause(gloo_slow):
    assert [j["traces"] for j in ranks.jobs(gloo_slow)] == [list(range(8))]
    view = ranks.cross_rank(gloo_slow)
    s = view["summary"]
    assert s["ranks"] == 8 and s["spread_ns"] < s["noise_ns"]  # every step as long as the slow rank's
    assert s["likely_straggler"] == 3 and s["wait_kind"] == "host"
    assert s["straggler_cause"] == ranks.BEFORE_LAUNCH and 190 * MS < s["straggler_cause_ns"] < 230 * MS
    assert 190 * MS < s["others_wait_ns"] < 300 * MS and s["straggler_wait_ns"] < 50 * MS
    assert s["straggler_next"]["rule"] == "dataloader-workers"
    text = " ".join(ranks_render.verdict(view))
    assert "Likely straggler: rank 3: host work before the first launch" in text
    assert "Next: rank 3's dataloader-workers" in text


def test_gloo_balanced_job_has_no_straggler_and_is_bound_by_the_host_all_reduce(gloo_balanced):
    s = ranks.cross_rank(gloo_balanced)["summary"]
    assert s["ranks"] == 8 and "likely_straggler" not in s and s["noise_ns"] > s["wait_ns_max"]
    view = ranks.cross_rank(gloo_balanced)
    assert all(r["host_wait_ns"] > 15 * MS for r in view["ranks"])  # every rank waits in the host all-reduce
    assert "Next for the job: allreduce-through-host — " in " ".join(ranks_render.verdict(view))
    for rep in gloo_balanced:
        (f,) = [f for f in rep["findings"] if f["rule"] == "allreduce-through-host"]
        # 6.3M fp32 parameters: 25 MB of gradients to the host and back per step
        assert 24e6 < f["evidence"]["dtoh_bytes"] < 27e6 and 24e6 < f["evidence"]["htod_bytes"] < 27e6
        assert rep["trace"]["framework"] == "pytorch"


def test_job_gains_follow_the_rank_that_bounds_the_job(gloo_slow, gloo_balanced):
    """The gloo ranks meet in a host all-reduce every step, so a fix shortens the job only as far as every rank's
    step gives way. The other ranks' 'all-reduce' idle (~223 ms) is mostly their wait for rank 3's loader: the job
    banks rank 3's own 24 ms from NCCL, not 223. Fixing rank 3's loader (the balanced job) realized the slow job's
    median step less the balanced one's: inside the job's bounds for dataloader-workers, within 5%."""
    view = ranks.cross_rank(gloo_slow)
    job = {f["rule"]: f for f in view["findings"]}
    host = job["allreduce-through-host"]
    assert host["synchronized"] and host["ranks"] == list(range(8)) and not host["missing_ranks"]
    assert host["bound_rank"] == 3 and host["largest_rank_gain_ns"] > 200 * MS
    assert host["job_gain_ns"] == host["job_gain_max_ns"] == host["gain_ns_by_rank"]["3"] < 30 * MS
    loader = job["dataloader-workers"]
    assert loader["ranks"] == [3] and loader["missing_ranks"] == [0, 1, 2, 4, 5, 6, 7]
    waits = {r["rank"]: r["wait_ns"] for r in view["ranks"]}
    assert loader["job_gain_ns"] == min(waits[r] for r in loader["missing_ranks"])
    assert loader["job_gain_max_ns"] == loader["gain_ns_by_rank"]["3"] + waits[3]
    realized = view["summary"]["step_ns_median"] - ranks.cross_rank(gloo_balanced)["summary"]["step_ns_median"]
    assert 0.95 * loader["job_gain_ns"] < realized < 1.05 * loader["job_gain_max_ns"]
    # what the host all-reduce itself costs a rank that waits for nobody: the balanced job's, rank by rank
    balanced = {f["rule"]: f for f in ranks.cross_rank(gloo_balanced)["findings"]}["allreduce-through-host"]
    own = sorted(balanced["gain_ns_by_rank"].values())
    assert own[0] * 0.7 < host["job_gain_max_ns"] < own[-1] * 1.3
    # every rank's fixes together: the least over ranks of its ledger's combined gain + its wait
    sums = {r["rank"]: rep["ledger"][0]["combined_gain_ns"] + r["wait_ns"] for r, rep in zip(view["ranks"], gloo_slow)}
    assert view["summary"]["job_combined_bound_rank"] == 3 == min(sums, key=sums.get)
    assert view["summary"]["job_combined_gain_ns"] == sums[3] < view["summary"]["step_ns_median"]
    text = " ".join(ranks_render.verdict(view))
    assert "All fixes together, for the job: up to" in text
    assert "Next for the job" not in text  # the straggler's Next: line says it
    shown = ranks_render.rank_findings(view, gloo_slow)
    assert [f["rule"] for f in shown[:2]] == ["dataloader-workers", "allreduce-through-host"]
    assert shown[1]["gain_ns"] == host["job_gain_max_ns"]
    assert "as far as rank 3's step gives way" in ranks_render.ranks_where(shown[1])


def test_ranks_that_never_meet_bank_their_own_gains(resnet):
    """Two processes with no collective (no NCCL kernel, no host all-reduce, no straggler by waiting): each rule's
    job gain is its largest rank's (built from a real report; the findings are its own)."""
    base = resnet
    reports = [with_gaps(base, f"run_{i}.sqlite", LOADER) for i in (0, 1)]
    view = ranks.cross_rank(reports)
    assert view["findings"] and not any(f["synchronized"] for f in view["findings"])
    top = base["findings"][0]
    (f,) = [f for f in view["findings"] if f["rule"] == top["rule"]]
    assert f["job_gain_ns"] == f["job_gain_max_ns"] == f["largest_rank_gain_ns"] == top["gain_ns"]
    assert "job_combined_gain_ns" not in view["summary"]


def test_mpi_job_is_flagged_mpi_from_its_trace_and_domain():
    """mpi_hoststaged: mpi4py + CuPy under mpirun with --trace=mpi (MPI_* tables, an 'MPI' NVTX domain)."""
    d = analyze_file(fixture_trace("mpi_hoststaged_0.sqlite"))
    assert d["trace"]["framework"] == "cupy" and d["trace"]["mpi"]


def test_an_mpi_call_in_the_attribution_is_a_host_wait(resnet):
    rep = with_gaps(resnet, "run_0.sqlite", [("cuda_blocking", "MPI_Allreduce", 40 * MS, 0)])
    assert ranks.cross_rank([rep])["ranks"][0]["host_wait_ns"] == 40 * MS
