"""The command line starts without the analysis stack: --help imports none of pandas, numpy,
matplotlib, rich or SQLAlchemy (they are imported by the commands that need them)."""
import subprocess
import sys

HEAVY = ("pandas", "numpy", "matplotlib", "rich", "sqlalchemy")


def imported_top_level_modules(*args: str) -> set[str]:
    """Top-level modules Python reports importing (-X importtime) while running ``nsysanalyze ARGS``."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "nsysanalyze", *args],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    names = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]
    return {n.split(".")[0] for n in names}


def test_help_imports_no_analysis_or_rendering_library():
    # (compare --help lists the gate metric names from nsysanalyze.compare, which imports pandas)
    for args in (["--help"], ["diagnose", "--help"], ["plot", "--help"], ["--version"]):
        mods = imported_top_level_modules(*args)
        assert "click" in mods  # the parse above did see the imports
        assert not mods & set(HEAVY), (args, mods & set(HEAVY))


def test_importing_the_package_and_cli_leaves_pandas_out_until_analysis_is_used():
    code = ("import sys, nsysanalyze, nsysanalyze.cli; before = {m for m in %r if m in sys.modules}; "
            "nsysanalyze.Analysis; after = {m for m in ('pandas', 'numpy') if m in sys.modules}; "
            "print(sorted(before), sorted(after))" % (HEAVY,))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[]", "['numpy',", "'pandas']"]
