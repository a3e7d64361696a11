"""Cross-rank view renderers (text via rich, markdown); the view itself is ``ranks.cross_rank()`` (JSON as is)."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..ranks import STRAGGLER_MIN_SHARE
from .format import count, ms, pct
from .sanitize import for_markdown, for_text

MAX_STEP_ROWS = 12  # the per-step table shows the steps with the largest spread first

RANK_HEADERS = ["rank", "trace", "steps", "step", "vs fastest", "NCCL", "exposed", "idle", "offset"]


def _rank_cells(r: dict, fastest: float | None) -> list[str]:
    rel = (f"+{100 * (r['step_ns'] / fastest - 1):.1f}%" if fastest and r["step_ns"] is not None else "-")
    return [str(r["rank"]), r["label"] or r["trace"], count(r["steps"]), ms(r["step_ns"]), rel, ms(r["nccl_ns"]),
            ms(r["nccl_exposed_ns"]), pct(r["idle_fraction"]), ms(r["offset_ns"])]


def _step_rows(view: dict) -> list[dict]:
    return sorted(view["steps"], key=lambda s: -(s["spread_ns"] or 0))[:MAX_STEP_ROWS]


STEP_HEADERS = ["step", "ranks", "fastest", "median", "slowest", "spread", "slowest rank", "start skew"]


def _step_cells(s: dict) -> list[str]:
    return [str(s["step"]), str(s["ranks"]), ms(s["min_ns"]), ms(s["median_ns"]), ms(s["max_ns"]), ms(s["spread_ns"]),
            str(s["slowest_rank"]), ms(s["start_skew_ns"])]


def verdict(view: dict) -> list[str]:
    """The summary lines: spread, slowest rank, NCCL imbalance, likely straggler."""
    s = view["summary"]
    if not s.get("ranks"):
        return ["No rank with GPU work."]
    lines = [f"{s['ranks']} ranks; step time ({s['scope']}) {ms(s['step_ns_min'])} to {ms(s['step_ns_max'])}, "
             f"spread {ms(s['spread_ns'])} ({pct(s['spread_fraction'])} of the median); slowest rank {s['slowest_rank']}."]
    if s.get("nccl_ns_max"):
        lines.append(f"NCCL time per rank {ms(s['nccl_ns_min'])} to {ms(s['nccl_ns_max'])} "
                     f"(imbalance {ms(s['nccl_imbalance_ns'])}); least on rank {s['least_nccl_rank']}.")
    if s.get("likely_straggler") is not None:
        lines.append(f"Likely straggler: rank {s['likely_straggler']} ({s['straggler_reason']}).")
    elif s.get("ranks", 0) > 1:
        lines.append(f"No straggler: step and NCCL times differ by less than {STRAGGLER_MIN_SHARE:.0%} of the step.")
    if s.get("steps_compared"):
        lines.append(f"{s['steps_compared']} steps compared across ranks: median per-step spread "
                     f"{ms(s['step_spread_ns_median'])}; rank {s['slowest_rank_most_often']} is slowest most often.")
    lines.append("Ranks aligned by session start (UTC): first GPU activity spread " + ms(s["start_spread_ns"]) + "."
                 if s.get("aligned") else "Session start time missing in some trace: ranks are not aligned in time.")
    return lines


def render_text(view: dict, console: Console) -> None:
    view = for_text(view)
    table = Table(title="Ranks", title_justify="left")
    fastest = view["summary"].get("step_ns_min")
    for i, h in enumerate(RANK_HEADERS):
        table.add_column(h, justify="left" if i == 1 else "right")
    for r in view["ranks"]:
        table.add_row(*[Text(c) for c in _rank_cells(r, fastest)])
    console.print(table)
    steps = _step_rows(view)
    if steps:
        st = Table(title="Per step across ranks (largest spread first)", title_justify="left")
        for h in STEP_HEADERS:
            st.add_column(h, justify="right")
        for s in steps:
            st.add_row(*_step_cells(s))
        console.print(st)
    for line in verdict(view):
        console.print(Text(line))


def _md_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    esc = lambda s: str(s).replace("|", "\\|")  # noqa: E731
    return (["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
            + ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows])


def render_markdown(view: dict) -> str:
    view = for_markdown(view)
    fastest = view["summary"].get("step_ns_min")
    out = ["## Ranks", ""] + _md_table(RANK_HEADERS, [_rank_cells(r, fastest) for r in view["ranks"]]) + [""]
    steps = _step_rows(view)
    if steps:
        out += ["Per step across ranks (largest spread first):", ""]
        out += _md_table(STEP_HEADERS, [_step_cells(s) for s in steps]) + [""]
    out += [f"- {line}" for line in verdict(view)]
    return "\n".join(out) + "\n"
