"""Render a comparison (``nsysanalyze.compare.compare``): terminal (rich) and markdown (PR comments)."""
from __future__ import annotations

from rich.console import Console
from rich.text import Text

from .format import by_unit, ms, rel_change, signed_by_unit
from .markdown import _table as md_table
from .sanitize import MARKDOWN_VERBATIM, code_span, for_markdown, for_text
from .terminal import table_of

VERDICT = {True: "TRIPPED", False: "ok", None: "n/a"}


def shown_metrics(comparison: dict, scopes: tuple[str, ...]) -> list[dict]:
    """Metric rows with something to show: step time always, others when non-zero in a trace and scope."""
    def nonzero(v):
        return v is not None and v != 0
    return [r for r in comparison["metrics"] if r["name"] == "step_time"
            or any(nonzero(r[s][side]) for s in scopes for side in ("base", "new"))]


SCOPE_TITLE = {"step": "step median", "whole": "whole capture"}


def metric_cells(row: dict, scopes: tuple[str, ...], label: bool = True) -> list[str]:
    """metric, then per scope: BASE, NEW, change, change %."""
    unit = row["unit"]
    cells = [f"{row['label']} `{row['name']}`" if label else row["name"]]
    for s in scopes:
        v = row[s]
        cells += [by_unit(unit, v["base"]), by_unit(unit, v["new"]), signed_by_unit(unit, v["abs"]),
                  rel_change(v["rel"])]
    return cells


def metric_headers(scopes: tuple[str, ...]) -> list[str]:
    cols = ["metric"]
    for s in scopes:
        suffix = f" ({SCOPE_TITLE[s]})" if len(scopes) > 1 else ""
        cols += [f"BASE{suffix}", f"NEW{suffix}", "change", "change %"]
    return cols


def metric_scopes(comparison: dict) -> tuple[str, ...]:
    return ("step", "whole") if comparison["gate_scope"] == "step" else ("whole",)


def gate_cells(g: dict) -> list[str]:
    """expr | BASE | NEW | measured change or value | verdict."""
    unit = g["unit"]
    measured = (rel_change(g["measured"]) if g["kind"] == "relative" else
                signed_by_unit(unit, g["measured"]) if g["kind"] == "absolute" else by_unit(unit, g["measured"]))
    return [g["expr"], by_unit(unit, g["base"]), by_unit(unit, g["new"]), measured, VERDICT[g["tripped"]]]


GATE_HEADERS = ["gate", "BASE", "NEW", "measured", "verdict"]


def verdict_line(comparison: dict) -> str:
    gates = comparison["gates"]
    if not gates:
        return "No gate given (--fail-on)."
    bad = [g["expr"] for g in gates if g["tripped"]]
    na = [g["expr"] for g in gates if g["tripped"] is None]
    accepted = comparison.get("allow_missing")
    tail = (f"; {len(na)} n/a ({'accepted with --allow-missing' if accepted else 'a metric not captured'}): "
            f"{', '.join(na)}" if na else "")
    if bad:
        return f"FAIL: {len(bad)} of {len(gates)} gate(s) tripped: {', '.join(bad)}{tail}"
    if na and not accepted:
        return f"FAIL: none of {len(gates)} gate(s) tripped{tail}"
    return f"PASS: none of {len(gates)} gate(s) tripped{tail}"


KERNEL_HEADERS = ["BASE", "NEW", "change", "change %", "kernel"]


def kernel_cells(k: dict) -> list[str]:
    """BASE, NEW, change, change %, then the name (last: demangled names can be thousands of characters)."""
    return [ms(k["base_ns"]), ms(k["new_ns"]), signed_by_unit("ns", k["abs"]), rel_change(k["rel"]), k["name"]]


def kernel_title(comparison: dict) -> str:
    per = "per step" if comparison["gate_scope"] == "step" else "whole capture"
    return f"Kernels: largest changes ({per}, summed over GPUs)"


def kernels_unchanged(comparison: dict) -> str | None:
    """'Kernels: no kernel's time changed (…)' when both traces have kernels and none moved, else None."""
    row = next(r for r in comparison["metrics"] if r["name"] == "kernel_time")[comparison["gate_scope"]]
    if comparison.get("kernels") or row["base"] is None or row["new"] is None:
        return None
    return kernel_title(comparison).replace("largest changes", "no kernel's time changed")


def scope_line(comparison: dict) -> str:
    return f"Gates compare {SCOPE_TITLE[comparison['gate_scope']]} values."


def predicted_realized(x: dict) -> str:
    """'predicted 41.2 ms, realized 41.7 ms' for a finding that disappeared (realized: n/a when unknown)."""
    realized = x.get("realized_ns")
    return (f"predicted {x['gain_ns'] / 1e6:,.1f} ms, "
            + ("realized n/a" if realized is None else f"realized {realized / 1e6:,.1f} ms"))


def finding_lines(comparison: dict) -> list[str]:
    """'appeared: rule (severity, gain): title' lines, then disappeared, then still present."""
    f = comparison["findings"]
    out = [f"appeared: {x['rule']} ({x['severity']}, {x['gain_pct']:.1f}% of the step): {x['title']}"
           for x in f["appeared"]]
    out += [f"disappeared: {x['rule']} (was {x['severity']}; {predicted_realized(x)}): {x['title']}"
            for x in f["disappeared"]]
    out += [f"still present: {x['rule']} ({x['base_severity']} -> {x['severity']}, gain "
            f"{x['base_gain_pct']:.1f}% -> {x['gain_pct']:.1f}% of the step)" for x in f["kept"]]
    return out


def _trace_desc(h: dict) -> str:
    steps = f"{h['steps']} step rows ({h['step_family']})" if h["steps"] else "no steps (whole capture)"
    return f"nsys {h['nsys_version'] or '?'}, {h['devices']} GPU(s), {steps}"


def render_text(comparison: dict, console: Console) -> None:
    """The comparison on a terminal: traces, verdict and gates, metric table, finding changes."""
    c = for_text(comparison)
    for side in ("base", "new"):
        console.print(Text.assemble((f"{side.upper():5}", "bold"), c[side]["path"], ": ", _trace_desc(c[side])))
    for n in c["notes"]:
        console.print(Text(n, style="yellow"))
    style = "bold red" if c["tripped"] else "bold green" if c["gates"] else "dim"
    console.print(Text(verdict_line(c), style=style))
    if c["gates"]:
        t = table_of(scope_line(c), GATE_HEADERS, [])
        for g in c["gates"]:
            cells = gate_cells(g)
            t.add_row(*[Text(x) for x in cells[:-1]], Text(cells[-1], style="bold red" if g["tripped"] else "green"))
        console.print(t)
    for scope in metric_scopes(c):
        console.print(table_of(f"Metrics ({SCOPE_TITLE[scope]})", metric_headers((scope,)),
                               [metric_cells(r, (scope,), label=False) for r in shown_metrics(c, (scope,))]))
    if c.get("kernels"):
        console.print(table_of(kernel_title(c), KERNEL_HEADERS, [kernel_cells(k) for k in c["kernels"]], left=(4,)))
    if kernels_unchanged(c):
        console.print(Text(kernels_unchanged(c), style="bold"))
    lines = finding_lines(c)
    console.print(Text("Findings", style="bold"))
    for line in lines or ["no finding in either trace"]:
        console.print(Text("  " + line))


def render_markdown(comparison: dict) -> str:
    """The comparison as GitHub-flavoured markdown, ready for a PR comment or $GITHUB_STEP_SUMMARY."""
    c = for_markdown(comparison, MARKDOWN_VERBATIM - {"step_family"} | {"name", "expr"})  # metric names: code
    mark = "❌ " if c["tripped"] else "✅ " if c["gates"] else ""
    out = ["## nsysanalyze compare", "", f"- BASE {code_span(c['base']['path'])}: {_trace_desc(c['base'])}",
           f"- NEW {code_span(c['new']['path'])}: {_trace_desc(c['new'])}", "",
           f"**{mark}{verdict_line(c)}**", ""]
    out += [f"> {n}" for n in c["notes"]] + ([""] if c["notes"] else [])
    if c["gates"]:
        out += [scope_line(c), ""] + md_table(GATE_HEADERS, [gate_cells(g) for g in c["gates"]]) + [""]
    scopes = metric_scopes(c)
    out += ["### Metrics", ""]
    out += md_table(metric_headers(scopes), [metric_cells(r, scopes) for r in shown_metrics(c, scopes)]) + [""]
    if c.get("kernels"):
        out += [f"### {kernel_title(c)}", ""] + md_table(KERNEL_HEADERS, [kernel_cells(k)[:-1] + [code_span(k["name"])]
                                                                     for k in c["kernels"]]) + [""]
    out += [f"### {kernels_unchanged(c)}", ""] if kernels_unchanged(c) else []
    out += ["### Findings", ""] + [f"- {line}" for line in finding_lines(c) or ["no finding in either trace"]]
    return "\n".join(out) + "\n"
