"""Self-contained HTML report: the verdict first (baseline change, headline and next step per GPU),
findings (evidence as labelled values with units, fix, snippet), a timeline of one steady step, the
per-step chart, the per-metric comparison, then the tables; several files lead with the cross-rank view.

One file, no network requests: CSS inline, chart as inline SVG (text drawn as paths), no script.
Every string goes through :func:`h`, which escapes anything that is not :class:`Safe` markup,
so text from a trace (NVTX names, kernel names, paths, process names) is always escaped.
"""
from __future__ import annotations

import html
import math

from .compare import (KERNEL_HEADERS, finding_lines, kernel_cells, kernel_title, kernels_unchanged, metric_cells,
                      metric_headers, metric_scopes, shown_metrics, verdict_line)
from .format import (FINDINGS_TITLE, GAP_HEADERS, STEP_COLUMNS, STEPS_TITLE, SUBRANGES_TITLE, SUMMARY_TITLE,
                     device_label, evidence_pairs, gain_text, gap_cells, gaps_title,
                     headlines, ms, pct, rel_change, step_cells, subrange_table, summary_cells, timeline_hint,
                     trace_line, trace_name)
from .ranks import RANK_HEADERS, rank_cells, rank_findings, ranks_where, top_rules, verdict

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1400px;
padding:16px 24px;color:#1d232a;background:#fff}
h1{font-size:22px;margin:8px 0 4px;word-break:break-all}h2{font-size:18px;margin:28px 0 8px;
border-bottom:1px solid #e3e6ea;padding-bottom:4px}h3{font-size:15px;margin:4px 0}
table{border-collapse:collapse;margin:8px 0;font-size:13px}th,td{padding:3px 10px;border-bottom:1px solid #eceff2;
text-align:right;vertical-align:top}th{background:#f6f8fa}td:first-child,th:first-child{text-align:left}
td:first-child{max-width:420px;overflow-wrap:anywhere}.tablebox{max-width:100%;overflow-x:auto}
th.t,td.t{text-align:left;overflow-wrap:anywhere;word-break:break-word;min-width:8em}td:not(.t){white-space:nowrap}
.meta{color:#57606a}.note{background:#fff8e1;border-left:4px solid #f2b600;padding:6px 10px;margin:6px 0}
.finding{border:1px solid #e3e6ea;border-radius:6px;padding:10px 14px;margin:12px 0}
.sev{display:inline-block;border-radius:10px;padding:0 8px;color:#fff;font-size:12px;margin-right:6px}
.high{background:#c62828}.medium{background:#e08a00}.low{background:#1f7a8c}.info{background:#2e7d32}
pre{background:#f6f8fa;border:1px solid #e3e6ea;border-radius:4px;padding:8px 10px;overflow-x:auto;font-size:12.5px}
code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
.chart svg{width:100%;max-width:960px;height:auto}table.facts td{text-align:left}
.fail{color:#c62828;font-weight:600}.pass{color:#2e7d32;font-weight:600}
table.ev th{text-align:left;font-weight:normal;color:#57606a;background:none}table.ev td{text-align:right}
ul.headline{list-style:none;padding:0;margin:8px 0;font-size:15px}ul.headline li{margin:6px 0}
.delta{font-size:20px;font-weight:700;margin:8px 0}.delta.better{color:#2e7d32}.delta.worse{color:#c62828}
.timeline svg{font:11px system-ui,sans-serif}
.timeline text.tick{fill:#57606a;text-anchor:middle}.timeline line.tick{stroke:#eceff2}
.timeline rect.window{fill:#f6f8fa}.timeline rect.cpu{stroke:#fff;stroke-width:0.8}
.timeline text.range{fill:#1d232a;font-size:10px}.legend span{margin-right:12px;font-size:12px;white-space:nowrap}
.legend i.sw{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}
"""


class Safe(str):
    """Markup built here (trusted): :func:`h` inserts it as-is."""


def esc(x) -> Safe:
    return x if isinstance(x, Safe) else Safe(html.escape(str(x), quote=True))


def h(tag: str, *children, cls: str | None = None, id: str | None = None) -> Safe:  # noqa: A002 (the attribute)
    """``<tag class=cls id=id>children</tag>``; children that are not Safe are escaped, lists are joined."""
    inner = "".join(esc(c) if not isinstance(c, (list, tuple)) else "".join(esc(x) for x in c) for c in children)
    attr = f' class="{html.escape(cls, quote=True)}"' if cls else ""
    attr += f' id="{html.escape(id, quote=True)}"' if id else ""
    return Safe(f"<{tag}{attr}>{inner}</{tag}>")


def table(headers: list, rows: list[list], text: tuple[int, ...] = (0,)) -> Safe:
    """A table in a box that scrolls sideways rather than widen the page; the ``text`` columns are
    left-aligned and wrap anywhere (kernel names), the others are numbers (right-aligned)."""
    def cell(tag, i, x):
        return h(tag, x, cls="t" if i in text else None)
    head = h("tr", [cell("th", i, x) for i, x in enumerate(headers)])
    body_rows = [h("tr", [cell("td", i, c) for i, c in enumerate(r)]) for r in rows]
    return h("div", h("table", h("thead", head), h("tbody", body_rows)), cls="tablebox")


def header(report: dict) -> list[Safe]:
    procs = ", ".join(f"{p['name']} (pid {p['pid']})" for p in report["trace"]["processes"]) or "-"
    return [h("h1", "nsysanalyze: ", trace_name(report)), h("p", trace_line(report), h("br"), "processes: ", procs,
                                                           cls="meta")]


def notes(report: dict) -> list[Safe]:
    return [h("div", n, cls="note") for n in report["notes"]]


def summary(report: dict) -> list[Safe]:
    devices = report["summary"]["devices"]
    if not devices:
        return []
    headers = ["metric"] + [device_label(d, report["trace"]["processes"]) for d in devices]
    rows = summary_cells(devices)
    return [h("h2", SUMMARY_TITLE), table(headers, rows)]


def steps(report: dict) -> list[Safe]:
    if not report["steps"]:
        return []
    out = [h("h2", STEPS_TITLE), table([c for c, _, _ in STEP_COLUMNS], [step_cells(s) for s in report["steps"]])]
    sub = subrange_table(report)
    if sub:
        out += [h("h3", SUBRANGES_TITLE),
                table(["range", "time", "share of step"], [[n, ms(ns), pct(sh)] for n, ns, sh in sub])]
    return out


def headline(report: dict) -> list[Safe]:
    """Per (process, GPU): step time and GPU idle, then the Next: line."""
    items = [h("li", head, h("br"), h("b", nxt)) for head, nxt in headlines(report)]
    return [h("ul", items, cls="headline")] if items else []


def finding_box(i: int, f: dict, where: str = "") -> Safe:
    sev = f["severity"] if f["severity"] in ("high", "medium", "low", "info") else "info"
    body = [h("h3", h("span", f["severity"], cls=f"sev {sev}"), f"{i}. ", f["title"]),
            h("div", h("code", f["rule"]), f" · confidence {f['confidence']:.0%} · {gain_text(f)}{where}", cls="meta"),
            h("p", h("b", "Fix: "), f["fix"])]
    if f["snippet"]:
        body.append(h("pre", h("code", f["snippet"])))
    pairs = evidence_pairs(f)
    if pairs:
        body.append(h("table", h("tbody", [h("tr", h("th", k), h("td", v)) for k, v in pairs]), cls="ev"))
    return h("div", body, cls="finding")


def findings(report: dict, found: list[dict] | None = None, where=lambda f: "") -> list[Safe]:
    found = report["findings"] if found is None else found
    out = [h("h2", FINDINGS_TITLE)]
    if not found:
        out.append(h("p", "No finding: no rule matched this trace."))
    return out + [finding_box(i, f, where(f)) for i, f in enumerate(found, 1)]


def baseline_headline(c: dict) -> list[Safe]:
    """The comparison's verdict on top: step time BASE → NEW, green when faster, red when slower; gates."""
    step = next(r for r in c["metrics"] if r["name"] == "step_time")[c["gate_scope"]]
    rel = step["rel"]
    faster = rel is not None and rel not in ("inf", "-inf") and rel < 0
    what = "step (median)" if c["gate_scope"] == "step" else "capture"
    text = f"{what} {ms(step['base'])} → {ms(step['new'])} ({rel_change(rel)}) vs the baseline"
    out = [h("p", text, cls="delta " + ("better" if faster else "worse" if rel not in (None, 0) else ""))]
    if c["gates"]:
        out.append(h("p", verdict_line(c), cls="fail" if c["tripped"] else "pass"))
    return out


def comparison(c: dict) -> list[Safe]:
    """The --baseline section: metric deltas, finding changes (see render/compare.py)."""
    scopes = metric_scopes(c)
    rows = [[h("span", r["label"], " ", h("code", r["name"])), *metric_cells(r, scopes, label=False)[1:]]
            for r in shown_metrics(c, scopes)]
    out = [h("h2", "Comparison with the baseline"),
           h("p", "BASE ", h("code", c["base"]["path"]), " → NEW ", h("code", c["new"]["path"]), cls="meta")]
    out += [h("div", n, cls="note") for n in c["notes"]]
    out.append(table(metric_headers(scopes), rows))
    if c.get("kernels"):
        out += [h("h3", kernel_title(c)), table(KERNEL_HEADERS, [kernel_cells(k) for k in c["kernels"]], text=(4,))]
    out += [h("h3", kernels_unchanged(c))] if kernels_unchanged(c) else []
    out += [h("h3", "Findings"), h("ul", [h("li", x) for x in finding_lines(c) or ["no finding in either trace"]])]
    return out


TIMELINE_COLOURS = [("kernel", "kernel", "#4878d0"), ("nccl", "NCCL", "#8e6fd8"), ("memcpy-htod", "HtoD", "#ee854a"),
                    ("memcpy-dtoh", "DtoH", "#d65f5f"), ("memcpy-dtod", "DtoD", "#6acc65"),
                    ("memcpy-ptop", "PtoP", "#82c6e2"), ("memcpy-other", "memcpy", "#dc7ec0"),
                    ("memset", "memset", "#8c8c8c"), ("nvtx", "NVTX range", "#f2c14e"),
                    ("blocking", "blocking CUDA call", "#c62828"), ("os-munmap", "munmap", "#6d4c41"),
                    ("os-file-io", "file I/O", "#00897b"), ("os-wait", "OS wait", "#9e9d24")]
# GPU idle gaps by the cause kind that holds most of each (attribution.LEVELS)
IDLE_COLOURS = [("cuda_blocking", "idle: blocking CUDA call", "#ef9a9a"), ("os_runtime", "idle: OS call", "#bcaaa4"),
                ("launch", "idle: kernel launch", "#90caf9"), ("os_wait", "idle: OS wait", "#e6ee9c"),
                ("nvtx_range", "idle: host work in an NVTX range", "#ffe082"),
                ("untraced", "idle: untraced host work", "#d9d9d9")]
CSS += "".join(f".timeline .{k},.legend .{k}{{fill:{c};background:{c}}}" for k, _, c in TIMELINE_COLOURS + IDLE_COLOURS)
ZOOMS = (1, 2, 4, 8, 16)
CSS += """
.tl{display:flex;border:1px solid #e3e6ea;border-radius:4px}.tllabels{flex:0 0 150px;font-size:12px;color:#57606a;
border-right:1px solid #e3e6ea}.tllabels div{overflow:hidden;white-space:nowrap;text-overflow:ellipsis;padding:0 6px;
box-sizing:border-box}.tlscroll{flex:1 1 auto;overflow-x:auto;min-width:0}.tlinner{position:relative;width:100%}
.tlinner svg{display:block;width:100%}.tlticks{position:relative;font-size:11px;color:#57606a}
.tlticks span{position:absolute;top:4px;transform:translateX(-50%);white-space:nowrap}
.zoombar{margin:6px 0;font-size:13px}.zoombar label{border:1px solid #d0d7de;border-radius:4px;padding:1px 8px;
margin-left:4px;cursor:pointer}.timeline input{position:absolute;opacity:0;pointer-events:none}
.timeline rect.gap{stroke:#fff;stroke-width:0.3}
"""
PLOT_W, ROW_H, LANE_GAP, AXIS_H = 1000, 30, 10, 24
TIMELINE_MIN_PX = 560  # few lanes get taller rows: the step is read at a glance


def timeline_svg(tl: dict) -> tuple[Safe, list[tuple[str, int, int]], int]:
    """The step as inline SVG (``viewBox`` 0..PLOT_W wide, stretched to the container's width, so zooming
    widens it): one rect per item with a <title>; GPU activities have class 'act KIND', CPU items 'cpu
    KIND', idle gaps 'gap idle CAUSE'; rows at least ROW_H px, taller when few lanes (TIMELINE_MIN_PX in
    all). Returns the SVG, the lanes' (label, height px, row height px) for the labels beside it (HTML,
    outside the SVG so their text is never stretched) and the SVG's height."""
    span = max(tl["t1"] - tl["t0"], 1)
    x_of = lambda t: PLOT_W * (t - tl["t0"]) / span  # noqa: E731
    rows = sum(lane["rows"] for lane in tl["lanes"]) or 1
    row_h = max(ROW_H, int((TIMELINE_MIN_PX - LANE_GAP * len(tl["lanes"])) / rows))
    parts, labels, y = [], [], 0
    for lane in tl["lanes"]:
        height = lane["rows"] * row_h
        labels.append((lane["label"], height + LANE_GAP, row_h))
        for it in lane["items"]:
            x, w = x_of(it["start"]), max(PLOT_W * (it["end"] - it["start"]) / span, 0.15)
            kind = it["kind"]
            group = "gap" if kind == "idle" else "act" if kind not in ("nvtx", "blocking") and not kind.startswith("os-") \
                else "cpu"
            cls = f"{group} {kind}" + (f" {it['cause']}" if kind == "idle" and it.get("cause") else "")
            tip = f"{it['name']}: {(it['end'] - it['start']) / 1e3:,.1f} µs"
            parts.append(f'<rect class="{esc(cls)}" x="{x:.3f}" y="{y + it["row"] * row_h + 2}" '
                         f'width="{w:.3f}" height="{row_h - 4}"><title>{esc(tip)}</title></rect>')
        y += height + LANE_GAP
    grid = "".join(f'<line x1="{x_of(tl["t0"] + t):.2f}" x2="{x_of(tl["t0"] + t):.2f}" y1="0" y2="{y}" class="tick" '
                   f'vector-effect="non-scaling-stroke"/>' for t in nice_ticks(span))
    window = (f'<rect class="window" x="{x_of(tl["window_start"]):.3f}" y="0" '
              f'width="{x_of(tl["window_end"]) - x_of(tl["window_start"]):.3f}" height="{y}"/>')
    svg = Safe(f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {PLOT_W} {y}" preserveAspectRatio="none" '
               f'width="100%" height="{y}" role="img">{window}{grid}{"".join(parts)}</svg>')
    return svg, labels, y


def nice_ticks(span_ns: float, target: int = 8) -> list[float]:
    """Tick offsets (ns) from 0 at a 1/2/5×10^k ms step giving about ``target`` ticks."""
    raw = span_ns / target
    scale = 10 ** math.floor(math.log10(raw))
    step = next(m * scale for m in (1, 2, 5, 10) if m * scale >= raw)
    return [i * step for i in range(int(span_ns // step) + 1)]


def zoom_css(prefix: str) -> str:
    """The zoom control's rules for one timeline (ids ``{prefix}z1``…): no script, a checked radio widens it."""
    return "".join(f"#{prefix}z{z}:checked~.tl .tlinner{{width:{100 * z}%}}"
                   f"#{prefix}z{z}:checked~.zoombar label[for={prefix}z{z}]{{background:#1d232a;color:#fff}}"
                   for z in ZOOMS)


def timeline(tl: dict | None, n: int = 0) -> list[Safe]:
    """The timeline section: title, legend, zoom control (1×…16×, scroll sideways), lane labels, the SVG."""
    if tl is None:
        return []
    prefix = f"tl{n}"
    kinds = {it["kind"] for lane in tl["lanes"] for it in lane["items"]}
    causes = {it.get("cause") for lane in tl["lanes"] for it in lane["items"] if it["kind"] == "idle"}
    legend = h("div", [h("span", h("i", "", cls=f"sw {k}"), label) for k, label, _ in TIMELINE_COLOURS if k in kinds]
               + [h("span", h("i", "", cls=f"sw {k}"), label) for k, label, _ in IDLE_COLOURS if k in causes],
               cls="legend")
    title = (f"Timeline of {tl['step'] or 'one step'} (GPU {tl['deviceId']}, the steady step closest to the median): "
             f"{tl['activities']} GPU activities; the shaded band is the step's GPU window")
    svg, labels, height = timeline_svg(tl)
    span = max(tl["t1"] - tl["t0"], 1)
    ticks = h("div", Safe("".join(f'<span style="left:{100 * t / span:.3f}%{";transform:none" if t == 0 else ""}">'
                                  f'{t / 1e6:g} ms</span>' for t in nice_ticks(span))), cls="tlticks")
    lane_labels = [Safe(f'<div style="height:{AXIS_H}px"></div>')] + [
        Safe(f'<div style="height:{px}px;line-height:{row_h}px" title="{esc(label)}">{esc(label)}</div>')
        for label, px, row_h in labels]
    radios = Safe("".join(f'<input type="radio" name="{prefix}z" id="{prefix}z{z}"{" checked" if z == 1 else ""}>'
                          for z in ZOOMS))
    bar = Safe('<div class="zoombar">zoom:' + "".join(f'<label for="{prefix}z{z}">{z}×</label>' for z in ZOOMS)
               + " (scroll sideways when zoomed; hover a bar for its name and duration)</div>")
    body = Safe(f'<div class="tl"><div class="tllabels">{"".join(lane_labels)}</div><div class="tlscroll">'
                f'<div class="tlinner"><div style="height:{AXIS_H}px">{ticks}</div>{svg}</div></div></div>')
    return [h("h2", title), legend, h("style", Safe(zoom_css(prefix))),
            Safe(f'<div class="timeline" id="{"timeline" if n == 0 else prefix}">{radios}{bar}{body}</div>')]


def perfetto_hint(paths: list[str]) -> list[Safe]:
    """A paragraph pointing to the whole run's timeline in Perfetto (``nsysanalyze timeline``)."""
    return [h("p", timeline_hint(paths), cls="hint")]


def gaps(report: dict) -> list[Safe]:
    cells = gap_cells(report)
    return [h("h3", gaps_title(report)), table(GAP_HEADERS, cells, text=(0, 1, 2))] if cells else []


def body(report: dict, chart_svg: str | None = None, compared: dict | None = None, tl: dict | None = None,
         n: int = 0) -> list:
    """One report's sections, verdict first (``n``: its place on the page, for the timeline's ids)."""
    chart = []
    if chart_svg:
        caption = "GPU time per step (ms)" + (": baseline left, this trace right" if compared else "")
        chart = [h("h2", caption), h("div", Safe(chart_svg), cls="chart")]
    out = [*header(report), *(baseline_headline(compared) if compared else []), *headline(report),
           *notes(report), *findings(report), *timeline(tl, n), *perfetto_hint([report["trace"]["path"]]), *chart]
    out += comparison(compared) if compared else []
    return out + [*summary(report), *steps(report), *gaps(report)]


def ranks_section(view: dict, reports: list[dict]) -> list[Safe]:
    """The cross-rank view of several files: verdict, one row per rank, findings across ranks."""
    fastest = view["summary"].get("step_ns_min")
    rules = top_rules(view, reports)
    out = [h("h1", "nsysanalyze: ", f"{len(view['ranks'])} ranks"), h("ul", [h("li", x) for x in verdict(view)]),
           table(RANK_HEADERS, [rank_cells(r, fastest, rules.get(r["rank"])) for r in view["ranks"]], text=(0, 1, 9))]
    return out + findings({"findings": []}, rank_findings(view, reports), ranks_where)


def page(title: str, parts: list) -> str:
    head = h("head", Safe('<meta charset="utf-8">'),
             Safe('<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
                  'style-src \'unsafe-inline\'; img-src data:">'), h("title", title), h("style", Safe(CSS)))
    return "<!DOCTYPE html>\n" + Safe(f'<html lang="en">{head}{h("body", parts)}</html>') + "\n"


def render(report: dict, chart_svg: str | None = None, compared: dict | None = None, tl: dict | None = None,
           view: dict | None = None) -> str:
    """The whole page of one trace. ``chart_svg`` is trusted markup from ``render.plot.svg``; ``tl`` the
    step's lanes (``nsysanalyze.timeline``); ``view``: the cross-rank view of a file holding several
    processes or GPUs (``ranks.cross_rank``), shown first."""
    lead = [*ranks_section(view, [report]), Safe("<hr>")] if view is not None else []
    return page("nsysanalyze: " + trace_name(report), lead + body(report, chart_svg, compared, tl))


def render_ranks(reports: list[dict], view: dict, charts: list[str | None], timelines: list[dict | None]) -> str:
    """One page for several ranks: the cross-rank view first, then each rank's sections."""
    parts = ranks_section(view, reports) + perfetto_hint([r["trace"]["path"] for r in reports])
    for n, (r, chart, tl) in enumerate(zip(reports, charts, timelines)):
        parts += [Safe("<hr>"), *body(r, chart, None, tl, n)]
    return page(f"nsysanalyze: {len(view['ranks'])} ranks", parts)
