"""Self-contained HTML report: header, notes, summary, per-step chart, findings with fixes, comparison.

One file, no network requests: CSS inline, chart as inline SVG (text drawn as paths), no script.
Every string goes through :func:`h`, which escapes anything that is not :class:`Safe` markup,
so text from a trace (NVTX names, kernel names, paths, process names) is always escaped.
"""
from __future__ import annotations

import html

from .compare import finding_lines, metric_cells, metric_headers, metric_scopes, shown_metrics, verdict_line
from .format import (STEP_COLUMNS, summary_cells, device_label, evidence_value, gain_text, ms, pct, step_cells,
                     subrange_table, trace_name)

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1150px;
padding:16px 24px;color:#1d232a;background:#fff}
h1{font-size:22px;margin:8px 0 4px;word-break:break-all}h2{font-size:18px;margin:28px 0 8px;
border-bottom:1px solid #e3e6ea;padding-bottom:4px}h3{font-size:15px;margin:4px 0}
table{border-collapse:collapse;margin:8px 0;font-size:13px}th,td{padding:3px 10px;border-bottom:1px solid #eceff2;
text-align:right;vertical-align:top}th{background:#f6f8fa}td:first-child,th:first-child{text-align:left}
td:first-child{max-width:420px;overflow-wrap:anywhere}
.meta{color:#57606a}.note{background:#fff8e1;border-left:4px solid #f2b600;padding:6px 10px;margin:6px 0}
.finding{border:1px solid #e3e6ea;border-radius:6px;padding:10px 14px;margin:12px 0}
.sev{display:inline-block;border-radius:10px;padding:0 8px;color:#fff;font-size:12px;margin-right:6px}
.high{background:#c62828}.medium{background:#e08a00}.low{background:#1f7a8c}.info{background:#2e7d32}
pre{background:#f6f8fa;border:1px solid #e3e6ea;border-radius:4px;padding:8px 10px;overflow-x:auto;font-size:12.5px}
code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
.chart svg{width:100%;max-width:960px;height:auto}table.facts td{text-align:left}
.fail{color:#c62828;font-weight:600}.pass{color:#2e7d32;font-weight:600}
ul.ev{margin:4px 0 8px;padding-left:20px}
"""


class Safe(str):
    """Markup built here (trusted): :func:`h` inserts it as-is."""


def esc(x) -> Safe:
    return x if isinstance(x, Safe) else Safe(html.escape(str(x), quote=True))


def h(tag: str, *children, cls: str | None = None) -> Safe:
    """``<tag class=cls>children</tag>``; children that are not Safe are escaped, lists are joined."""
    inner = "".join(esc(c) if not isinstance(c, (list, tuple)) else "".join(esc(x) for x in c) for c in children)
    attr = f' class="{html.escape(cls, quote=True)}"' if cls else ""
    return Safe(f"<{tag}{attr}>{inner}</{tag}>")


def table(headers: list, rows: list[list]) -> Safe:
    head = h("tr", [h("th", x) for x in headers])
    return h("table", h("thead", head), h("tbody", [h("tr", [h("td", c) for c in r]) for r in rows]))


def header(report: dict) -> list[Safe]:
    t = report["trace"]
    procs = ", ".join(f"{p['name']} (pid {p['pid']})" for p in t["processes"]) or "-"
    gpus = ", ".join(sorted({d["name"] or f"GPU {d['deviceId']}" for d in t["devices"]})) or "-"
    facts = [("file", t["path"]), ("nsys", f"{t['nsys_version'] or '?'} (schema {t['schema_version'] or '?'})"),
             ("processes", procs), ("GPUs", f"{gpus} ({len(t['devices'])} in use)"),
             ("steps", t.get("step_family") or "none found (one window per device)")]
    rows = [h("tr", h("td", h("b", k)), h("td", v)) for k, v in facts]
    out = [h("h1", "nsysanalyze: ", trace_name(report)), h("table", h("tbody", rows), cls="facts")]
    out += [h("div", n, cls="note") for n in report["notes"]]
    return out


def summary(report: dict) -> list[Safe]:
    devices = report["summary"]["devices"]
    if not devices:
        return []
    headers = ["metric"] + [device_label(d, report["trace"]["processes"]) for d in devices]
    rows = summary_cells(devices)
    return [h("h2", "Summary (whole capture; step medians where marked)"), table(headers, rows)]


def steps(report: dict) -> list[Safe]:
    if not report["steps"]:
        return []
    out = [h("h2", "Per step"), table([c for c, _, _ in STEP_COLUMNS], [step_cells(s) for s in report["steps"]])]
    sub = subrange_table(report)
    if sub:
        out += [h("h3", "CPU sub-ranges (median per step)"),
                table(["range", "time", "share of step"], [[n, ms(ns), pct(sh)] for n, ns, sh in sub])]
    return out


def findings(report: dict) -> list[Safe]:
    out = [h("h2", "Findings (largest possible gain first)")]
    if not report["findings"]:
        out.append(h("p", "No finding: no rule matched this trace."))
    for i, f in enumerate(report["findings"], 1):
        sev = f["severity"] if f["severity"] in ("high", "medium", "low", "info") else "info"
        body = [h("h3", h("span", f["severity"], cls=f"sev {sev}"), f"{i}. ", f["title"]),
                h("div", h("code", f["rule"]), f" · confidence {f['confidence']:.0%} · {gain_text(f)}", cls="meta"),
                h("ul", [h("li", f"{k}: ", evidence_value(k, v)) for k, v in f["evidence"].items()], cls="ev"),
                h("p", h("b", "Fix: "), f["fix"])]
        if f["snippet"]:
            body.append(h("pre", h("code", f["snippet"])))
        out.append(h("div", body, cls="finding"))
    return out


def comparison(c: dict) -> list[Safe]:
    """The --baseline section: verdict, metric deltas, finding changes (see render/compare.py)."""
    scopes = metric_scopes(c)
    rows = [[h("span", r["label"], " ", h("code", r["name"])), *metric_cells(r, scopes, label=False)[1:]]
            for r in shown_metrics(c, scopes)]
    out = [h("h2", "Comparison with the baseline"),
           h("p", "BASE ", h("code", c["base"]["path"]), " → NEW ", h("code", c["new"]["path"]), cls="meta")]
    out += [h("div", n, cls="note") for n in c["notes"]]
    if c["gates"]:
        out.append(h("p", verdict_line(c), cls="fail" if c["tripped"] else "pass"))
    out.append(table(metric_headers(scopes), rows))
    out += [h("h3", "Findings"), h("ul", [h("li", x) for x in finding_lines(c) or ["no finding in either trace"]])]
    return out


def render(report: dict, chart_svg: str | None = None, compared: dict | None = None) -> str:
    """The whole page. ``chart_svg`` is trusted markup from ``render.plot.svg``."""
    chart = []
    if chart_svg:
        caption = "GPU time per step (ms)" + (": baseline left, this trace right" if compared else "")
        chart = [h("h2", caption), h("div", Safe(chart_svg), cls="chart")]
    body = [*header(report), *summary(report), *chart, *steps(report), *findings(report)]
    if compared:
        body += comparison(compared)
    title = h("title", "nsysanalyze: ", trace_name(report))
    head = h("head", Safe('<meta charset="utf-8">'),
             Safe('<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
                  'style-src \'unsafe-inline\'; img-src data:">'), title, h("style", Safe(CSS)))
    return "<!DOCTYPE html>\n" + Safe(f'<html lang="en">{head}{h("body", body)}</html>') + "\n"
