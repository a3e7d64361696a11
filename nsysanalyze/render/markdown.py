"""Markdown renderer (for PR comments): header, notes, summary, steps, findings with fixes."""
from __future__ import annotations

from .sanitize import code_span, for_markdown
from .format import STEP_COLUMNS, summary_cells, device_label, evidence_value, ms, pct, step_cells, subrange_table


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    esc = lambda s: str(s).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    lines = ["| " + " | ".join(esc(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return lines


def render(report: dict, sections=("summary", "steps", "findings")) -> str:
    report = for_markdown(report)  # trace strings shown literally, never as markdown
    t = report["trace"]
    out = [f"## nsysanalyze: {code_span(t['path'])}", "",
           f"nsys {t['nsys_version'] or '?'} (schema {t['schema_version'] or '?'}), "
           f"{len(t['processes'])} process(es), {len(t['devices'])} GPU(s)"
           + (f", step range {code_span(t['step_family'])}" if t.get("step_family") else ""), ""]
    out += [f"> {n}" for n in report["notes"]] + ([""] if report["notes"] else [])
    devices = report["summary"]["devices"]
    if "summary" in sections and devices:
        headers = ["metric"] + [device_label(d, t["processes"]) for d in devices]
        rows = summary_cells(devices)
        out += ["### Summary", ""] + _table(headers, rows) + [""]
    if "steps" in sections and report["steps"]:
        out += ["### Steps", ""] + _table([h for h, _, _ in STEP_COLUMNS], [step_cells(s) for s in report["steps"]])
        sub = subrange_table(report)
        if sub:
            out += ["", "CPU sub-ranges (median per step):", ""]
            out += _table(["range", "time", "share of step"], [[n, ms(ns), pct(sh)] for n, ns, sh in sub])
        out.append("")
    if "findings" in sections:
        out += ["### Findings", ""]
        if not report["findings"]:
            out += ["No finding: no rule matched this trace.", ""]
        for i, f in enumerate(report["findings"], 1):
            gain = f"up to {ms(f['gain_ns'])} ({f['gain_pct']:.1f}% of the step)" if f["gain_ns"] else "no gain expected"
            out += [f"**{i}. `{f['rule']}`** ({f['severity']}, confidence {f['confidence']:.0%}, {gain}): {f['title']}", ""]
            out += [f"- {k}: {evidence_value(k, v)}" for k, v in f["evidence"].items()]
            out += ["", f"Fix: {f['fix']}", ""]
            if f["snippet"]:
                out += ["```python", f["snippet"], "```", ""]
    return "\n".join(out)
