"""`nsysanalyze plot`: stacked per-step time partition, side by side, PNG and SVG."""
import pytest
from click.testing import CliRunner
from conftest import default_report, shared_trace
from hostile import hostile_copy

from nsysanalyze.cli import cli, main
from nsysanalyze.render import plot
from nsysanalyze.render.format import TIME_PARTITION

NVTX = "h200/resnet18-baseline-nvtx.sqlite"
BS8 = "h200/resnet18-bs8-nvtx0.2.17-dropped.sqlite"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def report(path):
    return default_report(path)


def test_partition_stacks_to_the_window():
    """The six stacked segments of every bar add up to its window (so bar height = step time)."""
    r = report(shared_trace(NVTX))
    for s in r["steps"]:
        assert sum(s[key] for _, key, _ in TIME_PARTITION) == s["window_ns"]
    fig = plot.figure([r])
    ax = fig.axes[0]
    assert len(ax.patches) == len(TIME_PARTITION) * len(r["steps"])
    tops = sorted({round(p.get_y() + p.get_height(), 6) for p in ax.patches[-len(r["steps"]):]})
    assert tops == sorted(round(s["window_ns"] / 1e6, 6) for s in r["steps"])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["Batch 3*", "Batch 4", "Batch 5"]
    assert ax.get_ylabel() == "GPU time per window (ms)"
    assert "steps: Batch {n}" in ax.get_title() and "NVIDIA H200" in ax.get_title()
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [label for label, _, _ in TIME_PARTITION]


def test_no_steps_is_one_whole_capture_bar():
    r = report(shared_trace(BS8))
    ax = plot.figure([r]).axes[0]
    assert "no steps found: whole capture" in ax.get_title()
    assert len(ax.patches) == len(TIME_PARTITION)
    top = ax.patches[-1].get_y() + ax.patches[-1].get_height()
    assert top == pytest.approx(r["summary"]["devices"][0]["window_ns"] / 1e6)


def test_side_by_side_png_and_svg(tmp_path):
    out = tmp_path / "before_after.png"
    result = CliRunner().invoke(cli, ["plot", str(shared_trace(BS8)), str(shared_trace(NVTX)), "-o", str(out)])
    assert result.exit_code == 0, result.output
    data = out.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 20_000
    svg = tmp_path / "p.svg"
    assert CliRunner().invoke(cli, ["plot", str(shared_trace(NVTX)), "-o", str(svg)]).exit_code == 0
    assert svg.read_text().lstrip().startswith("<?xml")
    fig = plot.figure([report(shared_trace(BS8)), report(shared_trace(NVTX))])
    assert len(fig.axes) == 2 and fig.axes[0].get_shared_y_axes().joined(fig.axes[0], fig.axes[1])


def test_hostile_names_are_drawn_literally(tmp_path):
    """NVTX names with '$' (matplotlib math) and markup are drawn as text, not parsed."""
    evil = hostile_copy(shared_trace(NVTX), tmp_path)
    out = tmp_path / "evil.png"
    assert CliRunner().invoke(cli, ["plot", str(evil), "-o", str(out)]).exit_code == 0
    assert out.read_bytes()[:8] == PNG_MAGIC
    labels = [t.get_text() for t in plot.figure([report(evil)]).axes[0].get_xticklabels()]
    assert all(lbl.endswith(("Batch 3*", "Batch 4", "Batch 5")) and len(lbl.replace("\\$", "$")) <= 24
               for lbl in labels)
    svg = plot.svg([report(evil)])
    assert svg.startswith("<svg") and "<script" not in svg and "<metadata" not in svg


@pytest.mark.parametrize("args", [["-o", "x.pdf"], ["-o", "/no/such/dir/x.png"], []])
def test_bad_output_exit_2(args, capsys):
    with pytest.raises(SystemExit) as e:
        main(["plot", str(shared_trace(NVTX)), *args])
    assert e.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_medians_labels_and_tiny_segments():
    from conftest import fixture_trace
    from nsysanalyze.cli import analyze

    pinned = analyze(fixture_trace("resnet18_pinned.sqlite"), None)
    base = analyze(fixture_trace("resnet18_baseline.sqlite"), None)
    fig = plot.figure([base, pinned], ["before", "after"])
    left, right = fig.axes[0], fig.axes[1]
    assert left.get_title().startswith("before: resnet18_baseline.sqlite") and right.get_title().startswith("after:")
    steady = sorted(s["window_ns"] / 1e6 for s in pinned["steps"] if s["closed"])
    texts = [t.get_text() for t in right.texts]
    assert f"median {sum(steady) / len(steady):,.1f} ms" in texts  # two steady steps: the mean of the middle pair
    # pinned's idle is ~0.6 ms of a 337 ms axis: drawn as a line too, so it stays visible
    top = max(s["window_ns"] for s in base["steps"]) / 1e6
    tiny = [s for s in pinned["steps"] if 0 < s["idle_ns"] / 1e6 < plot.TINY_SHARE * top]
    assert tiny and sum(len(c.get_segments()) for c in right.collections) >= len(tiny)


def test_label_count_must_match_the_files(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["plot", str(shared_trace(NVTX)), "--label", "a", "--label", "b", "-o", str(tmp_path / "x.png")])
    assert e.value.code == 2 and "--label given 2 time(s) for 1 file(s)" in capsys.readouterr().err
