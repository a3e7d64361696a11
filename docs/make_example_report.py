"""Regenerate docs/example-report.png: the HTML report of fixtures/resnet18_workers.sqlite against
fixtures/resnet18_baseline.sqlite, as headless Chromium shows it 1400 px wide.

    python docs/make_example_report.py          # needs chromium (or chromium-browser, google-chrome) on PATH
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
WIDTH, HEIGHT = 1400, 2000  # the verdict, findings, timeline and chart: the top of the page


def browser() -> str | None:
    """The first headless-capable Chromium on PATH."""
    return next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)


def main() -> int:
    chrome = browser()
    if chrome is None:
        print("make_example_report: no chromium on PATH (Debian: apt-get install chromium)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "report.html"
        subprocess.run([sys.executable, "-m", "nsysanalyze", "report", "fixtures/resnet18_workers.sqlite",
                        "--baseline", "fixtures/resnet18_baseline.sqlite", "-o", str(page)],
                       check=True, cwd=ROOT)
        out = ROOT / "docs" / "example-report.png"
        subprocess.run([chrome, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--window-size={WIDTH},{HEIGHT}", f"--screenshot={out}", page.as_uri()],
                       check=True, capture_output=True, timeout=120)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
