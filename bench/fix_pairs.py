"""Predicted vs realized gains on the project's own bad→fixed capture pairs (fixtures/fix_pairs.json).

    python bench/fix_pairs.py [FIXTURES_DIR]     # markdown table, as in fixtures/README.md

For each pair: the bad capture's gain for the rule(s) the fix addresses (their what-if bounds), the realized
difference of the profiled step medians (the ledgers' windows; per sample when the fix changed the batch;
the mean steady step for a periodic stall, which the median hides)
and of the unprofiled steps/s, and whether |predicted − realized| ≤ max(10% of the bad step, 30% of the
realized gain) — the test in tests/test_ledger.py.
"""
from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nsysanalyze import ranks  # noqa: E402
from nsysanalyze.render.contract import report_of  # noqa: E402


def scope_window(report: dict) -> float:
    """The first GPU's window at the findings' scope (the median steady step)."""
    return report["ledger"][0]["window_ns"]


def mean_step(report: dict) -> float:
    """The first GPU's mean steady-step window (periodic stalls, which the median hides)."""
    dev = report["ledger"][0]["deviceId"]
    w = [s["window_ns"] for s in report["steps"] if s["closed"] and s["deviceId"] == dev]
    return sum(w) / len(w)


def samples_ratio(pair: dict) -> float:
    """How many bad steps' samples one fixed step holds (a fix that changed the batch), else 1."""
    return pair["fixed_batch"] / pair["bad_batch"] if pair.get("per") == "sample" else 1.0


def job_evaluate(pair: dict, fixtures: Path, analyze: Callable[[Path], dict]) -> tuple[float, float, dict[str, float]]:
    """A job's pair (``ranks``: N rank files, ``{rank}`` in the names): the bad and fixed jobs' median rank steps
    and the bad job's gain per rule for the job (the cross-rank view's ``job_gain_max_ns``)."""
    views = {side: ranks.cross_rank([analyze(fixtures / pair[side].format(rank=r)) for r in range(pair["ranks"])])
             for side in ("bad", "fixed")}
    gains = {f["rule"]: f["job_gain_max_ns"] for f in views["bad"]["findings"]}
    return views["bad"]["summary"]["step_ns_median"], views["fixed"]["summary"]["step_ns_median"], gains


def evaluate(pair: dict, fixtures: Path, analyze: Callable[[Path], dict] = report_of) -> dict:
    """One pair's bad step, fixed step (per the bad step's samples), predicted and realized gains (ns), and
    whether |predicted − realized| ≤ max(10% of the bad step, 30% of the realized gain). A job's pair (``ranks``)
    compares the jobs' median rank steps against the gain for the job. ``analyze``: an export's default report."""
    if pair.get("ranks"):
        bad, fixed, gains = job_evaluate(pair, fixtures, analyze)
    else:
        reports = {side: analyze(fixtures / pair[side]) for side in ("bad", "fixed")}
        step = mean_step if pair.get("measure") == "mean" else scope_window
        bad, fixed = step(reports["bad"]), step(reports["fixed"]) / samples_ratio(pair)
        gains = {f["rule"]: f["gain_ns"] for f in reports["bad"]["findings"][::-1]}  # each rule's largest
    rules = [pair["rule"]] if isinstance(pair["rule"], str) else pair["rule"]
    predicted, realized = sum(gains.get(r, 0.0) for r in rules), bad - fixed
    return {"rules": rules, "bad": bad, "fixed": fixed, "predicted": predicted, "realized": realized,
            "within": abs(predicted - realized) <= max(0.1 * bad, 0.3 * abs(realized))}


def main() -> None:
    fixtures = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "fixtures"
    pairs = json.loads((fixtures / "fix_pairs.json").read_text())
    print("| bad → fixed | fix | rule | bad step | fixed step | predicted | realized (profiled) | realized (unprofiled) | within |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for p in pairs:
        e = evaluate(p, fixtures)
        unprofiled = ""
        if p.get("bad_steps_per_s") and p.get("fixed_steps_per_s"):
            unprofiled = f"{1e3 / p['bad_steps_per_s'] - 1e3 / (p['fixed_steps_per_s'] * samples_ratio(p)):,.1f} ms"
        print(f"| `{Path(p['bad']).stem}` → `{Path(p['fixed']).stem}` | {p['fix']} | "
              f"{', '.join(f'`{r}`' for r in e['rules'])} | {e['bad'] / 1e6:,.1f} ms | {e['fixed'] / 1e6:,.1f} ms "
              f"| {e['predicted'] / 1e6:,.1f} ms | {e['realized'] / 1e6:,.1f} ms | {unprofiled} "
              f"| {'yes' if e['within'] else 'no: ' + p['known_miss'] if p.get('known_miss') else 'NO'} |")


if __name__ == "__main__":
    main()
