"""Per-step time partition as stacked bars (matplotlib, Agg; no pyplot global state).

One panel per report and GPU (a report of several GPUs gets one panel per GPU, each with its own
median), side by side with a shared y axis (ms), so before/after runs compare at a glance. Each bar
is one step window split into the ``time_*`` partition of ``metrics.py`` plus idle; a report without
steps gets one panel with one bar per device: its whole capture.
"""
from __future__ import annotations

import io
import os
import re
import textwrap
from pathlib import Path

from ..errors import InputError
from .format import TIME_PARTITION, bar_label, device_label, partition_bars, step_names, trace_name
from .sanitize import printable

FORMATS = (".png", ".svg")
MAX_TICKS = 30
MIN_BARS = 6  # a panel is at least as wide as this many bars
LABEL_CHARS = 24  # longer step names are cut in the middle
TINY_SHARE = 0.006  # a segment under this share of the y axis also gets a 2-point line in its colour (stays visible)


def _plain(text: str) -> str:
    """Text from a trace, shown literally: control characters as visible escapes (printable: no font has
    a glyph for them), '$' escaped (matplotlib reads '$...$' as math)."""
    return printable(text).replace("$", r"\$")


def _cut(text: str, limit: int) -> str:
    """``text`` with its middle cut to ``limit`` characters (a step name's end holds its number)."""
    text = str(text)
    return text if len(text) <= limit else text[:limit // 3] + "…" + text[-(limit - limit // 3 - 1):]


def panel_title(report: dict, is_step: bool, label: str | None = None, device: str | None = None) -> str:
    t = report["trace"]
    gpus = sorted({d["name"] for d in t["devices"] if d.get("name")})
    head = ((f"{label}: " if label else "") + trace_name(report) + (f" · {device}" if device else "")
            + (f" · {', '.join(gpus)}" if gpus else ""))
    if is_step:
        family = _cut(step_names(report) if t.get("step_family") else "per --step-range", 3 * LABEL_CHARS)
        return f"{head}\nsteps: {family}"
    return f"{head}\nno steps found: whole capture as one bar per GPU"


def median_ms(rows: list[dict], is_step: bool) -> float | None:
    """Median bar height (ms) over the steady bars: closed steps when any, else every bar."""
    heights = sorted(float(r["window_ns"]) / 1e6 for r in rows if not is_step or r.get("closed", True)) or \
        sorted(float(r["window_ns"]) / 1e6 for r in rows)
    if not heights:
        return None
    mid = len(heights) // 2
    return heights[mid] if len(heights) % 2 else (heights[mid - 1] + heights[mid]) / 2


def report_panels(report: dict, label: str | None) -> list[tuple[dict, list[dict], bool, str | None, str | None]]:
    """(report, bars, is_step, label, device) per panel: one per (process, GPU) of a report with steps on
    several GPUs (each panel its own median), else one."""
    rows, is_step = partition_bars(report)
    keys = list(dict.fromkeys((r["globalPid"], r["deviceId"]) for r in rows))
    if not is_step or len(keys) < 2:
        return [(report, rows, is_step, label, None)]
    devices = {(d["globalPid"], d["deviceId"]): d for d in report["summary"]["devices"]}
    procs = report["trace"]["processes"]
    return [(report, [r for r in rows if (r["globalPid"], r["deviceId"]) == key], True, label,
             device_label(devices.get(key, {"globalPid": key[0], "deviceId": key[1]}), procs)) for key in keys]


def figure(reports: list[dict], labels: list[str] | None = None):
    """The figure (matplotlib ``Figure``) for one or several reports; ``labels`` name the panels (before/after).
    Each panel marks the median step (dashed line, value written); tiny segments stay visible."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    panels = [panel for r, name in zip(reports, labels or [None] * len(reports)) for panel in report_panels(r, name)]
    ratios = [min(max(len(rows), MIN_BARS), 60) for _, rows, _, _, _ in panels]
    width = min(24.0, max(7.0, 1.5 + sum(r * 0.3 + 0.6 for r in ratios)))
    fig = Figure(figsize=(width, 5.8), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False, width_ratios=ratios)[0]
    any_open = False
    top = max((float(r["window_ns"]) / 1e6 for _, rows, _, _, _ in panels for r in rows), default=0.0)
    for ax, (report, rows, is_step, name, device), ratio in zip(axes, panels, ratios):
        many = len({(r["globalPid"], r["deviceId"]) for r in rows}) > 1
        labels = [_plain(_cut(bar_label(r, many, is_step), LABEL_CHARS)) for r in rows]
        x = list(range(len(rows)))
        bottom = [0.0] * len(rows)
        for label, key, colour in TIME_PARTITION:
            ms = [float(r.get(key) or 0) / 1e6 for r in rows]
            ax.bar(x, ms, bottom=bottom, color=colour, label=label, width=0.8, edgecolor="white", linewidth=0.3)
            tiny = [(i, b + v / 2) for i, (b, v) in enumerate(zip(bottom, ms)) if 0 < v < TINY_SHARE * top]
            if tiny:
                ax.hlines([y for _, y in tiny], [i - 0.4 for i, _ in tiny], [i + 0.4 for i, _ in tiny],
                          colors=colour, linewidth=2)
            bottom = [b + v for b, v in zip(bottom, ms)]
        median = median_ms(rows, is_step)
        if median is not None:
            ax.axhline(median, color="#333333", linestyle="--", linewidth=0.8)
            ax.text(len(x) - 0.5, median, f"median {median:,.1f} ms", ha="right", va="bottom", fontsize=8,
                    color="#333333")
        pad = (max(len(x), MIN_BARS) - len(x)) / 2 + 0.5  # few bars stay bar-wide, centred
        ax.set_xlim(-pad, len(x) - 1 + pad)
        step = max(1, -(-len(x) // MAX_TICKS))
        slot_chars = width * ratio / sum(ratios) / max(len(x), MIN_BARS) * step * 12
        tilt = len(x) > 1 and max(map(len, labels)) > slot_chars
        ax.set_xticks(x[::step], labels[::step], rotation=45 if tilt else 0, ha="right" if tilt else "center",
                      fontsize=8)
        chars = max(24, int(width * ratio / sum(ratios) * 11))
        title = "\n".join(textwrap.fill(_plain(line), chars)
                          for line in panel_title(report, is_step, name, device).split("\n"))
        ax.set_title(title, fontsize=9)
        any_open |= is_step and any(r.get("closed") is False for r in rows)
        ax.set_xlabel("step" if is_step else "device", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
        if not rows:
            ax.text(0.5, 0.5, "no GPU activity", transform=ax.transAxes, ha="center", va="center")
    axes[0].set_ylabel("GPU time per window (ms)")
    fig.suptitle("GPU time per step: compute, copies, NCCL, idle", fontsize=11)
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="outside lower center", ncol=len(TIME_PARTITION) if width >= 12 else 3,
               fontsize=8, frameon=False, title_fontsize=8,
               title="* first step: its window starts at its own GPU work (what came before is not captured)" if any_open else None)
    return fig


def save(reports: list[dict], out: str | os.PathLike, labels: list[str] | None = None) -> Path:
    """Write the figure to ``out`` (.png or .svg, by suffix)."""
    out = Path(out)
    if out.suffix.lower() not in FORMATS:
        raise InputError(f"{out}: the plot is written as .png or .svg; give -o with one of those suffixes")
    if not out.parent.resolve().is_dir():
        raise InputError(f"{out.parent}: no such directory")
    fig = figure(reports, labels)
    try:
        fig.savefig(out, dpi=120, metadata={"Date": None} if out.suffix.lower() == ".svg" else None)
    except OSError as e:
        raise InputError(f"{out}: cannot write ({e.strerror})") from None
    return out


def svg(reports: list[dict]) -> str:
    """The figure as an inline ``<svg>`` element (no XML prolog), text drawn as paths."""
    buf = io.StringIO()
    figure(reports).savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    return re.sub(r"<metadata>.*?</metadata>\s*", "", text[text.index("<svg"):], flags=re.S)
