"""Markdown renderer (for PR comments): headline and next step, notes, findings with fixes, then the tables."""
from __future__ import annotations

from .format import (DETAILS_HINT, FINDINGS_TITLE, GAP_HEADERS, LEDGER_HEADERS, STEP_COLUMNS, STEPS_TITLE,
                     SUBRANGES_TITLE, SUMMARY_TITLE, code_fence, device_label, evidence_pairs, gain_text, gap_cells,
                     gaps_title, headlines, keeping_snippets, ledger_cells, ledger_title, ms, nsys_versions, pct,
                     step_cells, step_names, subrange_table, summary_cells)
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
    out = [f"### {FINDINGS_TITLE}", ""]
    if not findings:
        out += ["No finding: no rule matched this trace.", ""]
    shown = findings if top is None else findings[:top]
    for i, f in enumerate(shown, 1):
        out += finding_block(i, f, where(f))
    if len(shown) < len(findings):
        out += [f"{len(findings) - len(shown)} more finding(s) not shown (--top {top}).", ""]
    return out


def render(report: dict, sections=("summary", "steps", "findings"), top: int | None = None,
           details: bool = True) -> str:
    """The same sections as the text output: headline, notes, findings and where the GPU waited (with
    ``"findings"`` in sections), then the tables when ``details``."""
    report = keeping_snippets(report, for_markdown)  # trace strings shown literally, never as markdown
    t = report["trace"]
    out = [f"## nsysanalyze: {code_span(t['path'])}", "",
           f"{nsys_versions(t)} (schema {t.get('schema_version') or '?'}), "
           f"{len(t['processes'])} process(es), {len(t['devices'])} GPU(s)"
           + (f", steps {code_span(step_names(report))}" if t.get("step_family") else ""), ""]
    for head, nxt in headlines(report):
        out += [f"- {head}  ", f"  **{nxt}**"]
    out += [""] if report["summary"]["devices"] else []
    out += [f"> {n}" for n in report["notes"]] + ([""] if report["notes"] else [])
    if "findings" in sections:
        out += findings_blocks(report["findings"], top)
        gaps = gap_cells(report)
        out += [f"### {gaps_title(report)}", ""] + _table(GAP_HEADERS, gaps) + [""] if gaps else []
    tables = [s for s in sections if s != "findings"]
    if tables and not details:
        return "\n".join(out + [DETAILS_HINT, ""])
    devices = report["summary"]["devices"]
    if "summary" in sections and devices:
        headers = ["metric"] + [device_label(d, t["processes"]) for d in devices]
        out += [f"### {SUMMARY_TITLE}", ""] + _table(headers, summary_cells(devices)) + [""]
    if "steps" in sections and report["steps"]:
        out += [f"### {STEPS_TITLE}", ""] + _table([h for h, _, _ in STEP_COLUMNS],
                                                   [step_cells(s) for s in report["steps"]])
        sub = subrange_table(report)
        if sub:
            out += ["", f"{SUBRANGES_TITLE}:", ""]
            out += _table(["range", "time", "share of step"], [[n, ms(ns), pct(sh)] for n, ns, sh in sub])
        out.append("")
    ledger = ledger_cells(report) if "findings" in sections else []
    if ledger:
        out += [f"### {ledger_title(report)}", ""] + _table(LEDGER_HEADERS, ledger) + [""]
    return "\n".join(out)
