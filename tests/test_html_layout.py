"""The HTML report fits the viewport and is read at a glance (issue 23 item 4): kernel names wrap, left-aligned;
the step timeline is tall, full width, zoomable without script or network, with lanes for OS calls and idle gaps
coloured by cause; a file of several processes gets the cross-rank section; docs/example-report.png comes from a
script. The browser checks run in headless Chromium when it is installed, else they are skipped; the structural
checks always run."""
import json
import re
import shutil
import subprocess

import pytest
from click.testing import CliRunner

from conftest import ROOT, fixture_trace, shared_trace
from nsysanalyze.cli import cli

BASELINE = fixture_trace("resnet18_baseline.sqlite")
WORKERS = fixture_trace("resnet18_workers.sqlite")
BROWSER = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
OLD_TIMELINE_PX = 22 + 4 * (16 + 6)  # this page's timeline before: 16 px rows, 6 px gaps, four lanes (110 px)


def make(tmp_path, *args, name="report.html"):
    out = tmp_path / name
    result = CliRunner().invoke(cli, ["report", *map(str, args), "-o", str(out), "--force"])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    return make(tmp_path_factory.mktemp("html"), WORKERS, "--baseline", BASELINE)


def test_timeline_structure_tall_full_width_zoomable_with_os_lanes_and_idle_causes(compared):
    page = compared.read_text()
    tl = page[page.index('id="timeline"'):]
    tl = tl[:tl.index("</svg>")]
    svg = re.search(r'<svg [^>]*viewBox="0 0 (\d+) (\d+)"[^>]*preserveAspectRatio="none"[^>]*width="100%" '
                    r'height="(\d+)"', tl)
    assert svg and int(svg[3]) >= 5 * OLD_TIMELINE_PX
    assert [f'id="tl0z{z}"' in tl for z in (1, 2, 4, 8, 16)] == [True] * 5 and "<script" not in page
    assert "#tl0z4:checked~.tl .tlinner{width:400%}" in page
    for lane in ("CPU: NVTX ranges", "OS: munmap", "OS: file I/O", "OS: waits", "stream 7", "GPU idle (by cause)"):
        assert f">{lane}</div>" in tl, lane
    causes = set(re.findall(r'<rect class="gap idle ([a-z_]+)"', tl))
    assert {"nvtx_range", "os_runtime"} <= causes  # the munmap gap is an OS call's
    assert re.search(r'<rect class="gap idle os_runtime"[^>]*><title>GPU idle: os_runtime', tl)
    assert not re.search(r'(src|href)="(https?:)?//', page)  # no network


def test_kernel_names_are_text_cells_and_tables_scroll_in_their_box(compared):
    page = compared.read_text()
    movers = page[page.index("Kernels: largest changes"):]
    movers = movers[:movers.index("</table>")]
    assert re.search(r'<td class="t">[^<]*(gemm|kernel)', movers) and '<div class="tablebox">' in page
    assert "th.t,td.t{text-align:left;overflow-wrap:anywhere" in page


def test_a_file_of_several_processes_gets_the_cross_rank_section(tmp_path):
    """nsys-ai's MFU run: torchrun under one nsys, two processes on two GPUs in one file."""
    page = make(tmp_path, shared_trace("public/nsys-ai__mfu_2gpu_after.sqlite")).read_text()
    assert "<h1>nsysanalyze: 2 ranks</h1>" in page and "No straggler" in page
    assert page.index("2 ranks") < page.index("nsys-ai__mfu_2gpu_after.sqlite · nsys")


def test_the_screenshot_comes_from_a_script():
    script = (ROOT / "docs" / "make_example_report.py").read_text()
    assert "example-report.png" in script and "--screenshot" in script
    assert "docs/make_example_report.py" in (ROOT / "README.md").read_text()


MEASURE = """<script>
addEventListener('load', () => {
  const svg = document.querySelector('#timeline svg'), content = document.body.clientWidth;
  const names = [...document.querySelectorAll('td.t')].map(td => getComputedStyle(td).textAlign);
  const before = svg.getBoundingClientRect();
  document.getElementById('tl0z4').checked = true;
  const zoomed = svg.getBoundingClientRect();
  document.body.setAttribute('data-m', JSON.stringify({page: document.documentElement.scrollWidth,
    view: innerWidth, content, svg_w: before.width, svg_h: before.height, zoomed_w: zoomed.width,
    aligns: [...new Set(names)]}));
});
</script>"""


def measured(page_path, width, tmp_path):
    """The page's layout in headless Chromium at ``width`` px: a copy of it with a measuring script (the
    report itself forbids scripts) is loaded and its DOM read back."""
    page = page_path.read_text()
    page = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page).replace("</body>", MEASURE + "</body>")
    probe = tmp_path / f"probe{width}.html"
    probe.write_text(page)
    dom = subprocess.run([BROWSER, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                          f"--window-size={width},900", "--virtual-time-budget=3000", "--dump-dom", probe.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    found = re.search(r'data-m="([^"]*)"', dom)
    assert found, dom[-500:]
    return json.loads(found[1].replace("&quot;", '"'))


@pytest.mark.skipif(BROWSER is None, reason="no chromium on PATH: the browser layout check is skipped")
@pytest.mark.parametrize("width", [800, 1100, 1400])
def test_the_report_fits_the_viewport_in_a_browser(compared, width, tmp_path):
    m = measured(compared, width, tmp_path)
    assert m["page"] <= m["view"], m  # nothing wider than the window: tables scroll in their box
    assert m["aligns"] == ["left"]  # kernel names (and every text cell) left-aligned
    assert m["svg_w"] >= 0.7 * m["content"] and m["svg_h"] >= 5 * OLD_TIMELINE_PX
    assert m["zoomed_w"] == pytest.approx(4 * m["svg_w"], rel=0.02)  # the zoom control widens the timeline
