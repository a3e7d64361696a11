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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import nsysanalyze  # noqa: E402
from nsysanalyze.render.contract import report  # noqa: E402


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


def main() -> None:
    fixtures = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "fixtures"
    pairs = json.loads((fixtures / "fix_pairs.json").read_text())
    print("| bad → fixed | fix | rule | bad step | fixed step | predicted | realized (profiled) | realized (unprofiled) | within |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for p in pairs:
        reports = {}
        for side in ("bad", "fixed"):
            with nsysanalyze.open(fixtures / p[side]) as a:
                reports[side] = report(a)
        scale = samples_ratio(p)
        step = mean_step if p.get("measure") == "mean" else scope_window
        bad, fixed = step(reports["bad"]), step(reports["fixed"]) / scale
        rules = [p["rule"]] if isinstance(p["rule"], str) else p["rule"]
        gains = {f["rule"]: f["gain_ns"] for f in reports["bad"]["findings"][::-1]}  # each rule's largest
        predicted = sum(gains.get(r, 0.0) for r in rules)
        realized = bad - fixed
        unprofiled = ""
        if p.get("bad_steps_per_s") and p.get("fixed_steps_per_s"):
            unprofiled = f"{1e3 / p['bad_steps_per_s'] - 1e3 / (p['fixed_steps_per_s'] * scale):,.1f} ms"
        ok = abs(predicted - realized) <= max(0.1 * bad, 0.3 * abs(realized))
        print(f"| `{Path(p['bad']).stem}` → `{Path(p['fixed']).stem}` | {p['fix']} | {', '.join(f'`{r}`' for r in rules)} "
              f"| {bad / 1e6:,.1f} ms "
              f"| {fixed / 1e6:,.1f} ms | {predicted / 1e6:,.1f} ms | {realized / 1e6:,.1f} ms | {unprofiled} "
              f"| {'yes' if ok else 'NO'} |")


if __name__ == "__main__":
    main()
