"""README and docs/ci.md say what works: install from a checkout (not PyPI), two set-up commands, capture flags."""
import re
from pathlib import Path

ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text()
CI = (ROOT / "docs" / "ci.md").read_text()


def test_quick_start_keeps_exactly_two_set_up_commands():
    quick = README[README.index("## Quick start"):README.index("Then on your own run")]
    block = re.search(r"```bash\n(.*?)```", quick, re.S)[1]
    commands = [line for line in block.splitlines() if line.strip()]
    assert len(commands) == 2 and "nsysanalyze diagnose --example" in commands[0] and "pytest" in commands[1]
    assert "not on PyPI" in quick and "Python ≥ 3.10" in quick


def test_no_install_from_pypi_and_the_capture_flags_that_work():
    for text in (README, CI):
        assert not re.search(r"pip install nsysanalyze\b", text)
        assert "--sample=none --cpuctxsw=none" in text
    assert "UseLZ4HighCompression=false" in README and "Symbol Files" in README
    assert "--allow-missing" in CI and "kernel:gemm>+10%" in CI
    assert "**Severity**" in README and "**Confidence**" in README


def test_dependencies_survive_click_9_and_the_suite_can_run_in_parallel():
    """No click API removed in Click 9 (PacifyFlushWrapper was); pytest-xdist in the dev extra and the README
    saying how long the suite takes and how to run it on every core (CI keeps the serial command)."""
    import subprocess
    import sys

    import pytest

    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "click>=8.1,<9" in project["dependencies"]
    assert any(d.startswith("pytest-xdist") for d in project["optional-dependencies"]["dev"])
    assert "about 11 minutes on a 2-core machine" in README and "python -m pytest -q -n auto" in README
    assert "python3 -m pytest -q -n auto" in (ROOT / ".ci" / "run").read_text()  # CI runs the README's command
    code = "import warnings; warnings.simplefilter('error', DeprecationWarning); import nsysanalyze.cli"
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0
    assert "PacifyFlushWrapper" not in (ROOT / "nsysanalyze" / "cli.py").read_text()
