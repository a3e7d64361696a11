"""Markdown renderer (for PR comments): headline and next step, notes, findings with fixes, then the tables."""
from __future__ import annotations

from .format import (STEP_COLUMNS, code_fence, device_label, evidence_pairs, gain_text, headlines, keeping_snippets,
                     ms, nsys_versions, pct, step_cells, subrange_table, summary_cells)
from .sanitize import code_span, for_markdown


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    esc = lambda s: str(s).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    lines = ["| " + " | ".join(esc(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return lines


def finding_block(index: int, f: dict, where: str = "") -> list[str]:
    """One finding (of a report passed through ``for_markdown``): heading line, fix, snippet, evidence."""
    out = [f"**{index}. {code_span(f['rule'])}** ({f['severity']}, confidence {f['confidence']:.0%}, {gain_text(f)}{where}): "
           f"{f['title']}", "", f"Fix: {f['fix']}", ""]
    if f["snippet"]:
        out += [code_fence(f["snippet"]) + "python", f["snippet"], code_fence(f["snippet"]), ""]
    out += [f"- {k}: {v}" for k, v in evidence_pairs(f)] + [""]
    return out


def findings_blocks(findings: list[dict], top: int | None = None, where=lambda f: "") -> list[str]:
    out = ["### Findings", ""]
    if not findings:
        out += ["No finding: no rule matched this trace.", ""]
    shown = findings if top is None else findings[:top]
    for i, f in enumerate(shown, 1):
        out += finding_block(i, f, where(f))
    if len(shown) < len(findings):
        out += [f"{len(findings) - len(shown)} more finding(s) not shown (--top {top}).", ""]
    return out


def render(report: dict, sections=("summary", "steps", "findings"), top: int | None = None) -> str:
    report = keeping_snippets(report, for_markdown)  # trace strings shown literally, never as markdown
    t = report["trace"]
    out = [f"## nsysanalyze: {code_span(t['path'])}", "",
           f"{nsys_versions(t)} (schema {t['schema_version'] or '?'}), "
           f"{len(t['processes'])} process(es), {len(t['devices'])} GPU(s)"
           + (f", step range {code_span(t['step_family'])}" if t.get("step_family") else ""), ""]
    for head, nxt in headlines(report):
        out += [f"- {head}  ", f"  **{nxt}**"]
    out += [""] if report["summary"]["devices"] else []
    out += [f"> {n}" for n in report["notes"]] + ([""] if report["notes"] else [])
    if "findings" in sections:
        out += findings_blocks(report["findings"], top)
    devices = report["summary"]["devices"]
    if "summary" in sections and devices:
        headers = ["metric"] + [device_label(d, t["processes"]) for d in devices]
        out += ["### Summary", ""] + _table(headers, summary_cells(devices)) + [""]
    if "steps" in sections and report["steps"]:
        out += ["### Steps", ""] + _table([h for h, _, _ in STEP_COLUMNS], [step_cells(s) for s in report["steps"]])
        sub = subrange_table(report)
        if sub:
            out += ["", "CPU sub-ranges (median per step):", ""]
            out += _table(["range", "time", "share of step"], [[n, ms(ns), pct(sh)] for n, ns, sh in sub])
        out.append("")
    return "\n".join(out)
