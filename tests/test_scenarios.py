"""The project's own H200 captures (fixtures/, nsys 2023.4 with --trace=cuda,nvtx,osrt) of scenarios beyond the
articles' ladder: each top finding follows the cause the workload was built to have."""
import pytest

import nsysanalyze

from conftest import fixture_trace


def findings(name):
    with nsysanalyze.open(fixture_trace(name)) as a:
        return a.findings()


@pytest.mark.parametrize("name,top", [
    ("dtoh_pageable.sqlite", "dtoh-sync"),                 # .cpu() of 100 MB + .item() every step
    ("tinyops_eager.sqlite", "launch-bound"),              # ~1000 kernels of ~1.3 us per step, eager
    ("resnet18_loader_unnamed.sqlite", "dataloader-workers"),   # main-process loader in a range named 'prep'
    ("resnet18_loader_noranges.sqlite", "dataloader-workers"),  # ... with no sub-ranges at all
])
def test_top_finding_follows_the_cause(name, top):
    assert findings(name)[0].rule == top


@pytest.mark.parametrize("name", ["dtoh_pinned_async.sqlite", "dtoh_deferred.sqlite", "tinyops_graphs.sqlite",
                                  "gpu_bound.sqlite"])
def test_fixed_or_healthy_loops_have_nothing_to_fix(name):
    """The fixes of the scenarios above (pinned async copies, deferred syncs, CUDA graphs) and a GPU-bound loop."""
    assert [f.rule for f in findings(name)] == ["input-pipeline-ok"]


def test_unnamed_loader_is_named_by_its_range():
    (f,) = [f for f in findings("resnet18_loader_unnamed.sqlite") if f.rule == "dataloader-workers"]
    assert f.evidence["top_cause"] == "prep" and "num_workers" in f.snippet
    (g,) = [f for f in findings("resnet18_loader_noranges.sqlite") if f.rule == "dataloader-workers"]
    assert g.evidence["top_cause_kind"] == "untraced"


def test_workers_pin_memory_cites_munmap_with_gpu_idle():
    """The first article's pattern: DataLoader workers hand batches over shared memory, the main process
    munmaps them after the blocking pageable copy while the GPU waits."""
    top = findings("resnet18_workers.sqlite")[0]
    assert top.rule == "pin-memory"
    assert top.evidence["munmap_count"] >= 1 and top.evidence["munmap_gpu_idle_ns"] > 0
    assert "munmap" in top.title


def test_launch_bound_counts_every_thread():
    with nsysanalyze.open(fixture_trace("tinyops_eager.sqlite")) as a:
        step = a.steps().iloc[-1]
        # launches of the main thread and of autograd's backward thread both count
        assert step["launch_calls"] >= step["kernel_count"] * 0.9


def test_per_parameter_item_calls_are_host_syncs():
    """sync-per-param: ResNet-18 at batch 32 reading each of its 62 gradient norms with .item() every step.
    The 4-byte copies are not a device-to-host volume problem; the syncs are. (At batch 32 the loop is also
    launch-bound between the syncs: both causes are reported, each with its own idle.)"""
    found = {f.rule: f for f in findings("sync_per_param.sqlite")}
    assert found["host-sync"].evidence["sync_wait_calls"] == 62
    assert "'grad norms'" in found["host-sync"].title
    assert "dtoh-sync" not in found and "launch-bound" in found


def test_file_io_inside_the_step_is_named():
    """io-midstep: 64 MB written and fsynced inside the step: the GPU waits on the OS calls (OSRT); the fix is
    to write less often and off the training thread, and no idle is left unexplained."""
    found = findings("io_midstep.sqlite")
    top = found[0]
    assert top.rule == "file-io" and "write less often" in top.fix.lower() or "less often" in top.fix
    assert {top.evidence["cause_1"], top.evidence["cause_2"]} == {"fsync", "write"}
    assert top.gain_pct > 50 and "gpu-idle-unexplained" not in {f.rule for f in found}


def test_attribution_in_slices_equals_one_pass(monkeypatch):
    """The attribution walks the idle intervals a slice at a time (bounded memory); the result is the same as
    one pass over all of them."""
    from nsysanalyze import attribution

    def gaps(chunk):
        monkeypatch.setattr(attribution, "IDLE_CHUNK", chunk)
        with nsysanalyze.open(fixture_trace("tinyops_eager.sqlite")) as a:
            g = a.gaps()
        keys = [c for c in attribution.GAP_COLUMNS if c != "ns"]
        return g.groupby(keys)["ns"].sum().sort_index()

    one, sliced = gaps(1 << 30), gaps(97)
    assert len(one) > 5 and one.equals(sliced)
