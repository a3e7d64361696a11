"""Cross-rank view renderers (text via rich, markdown); the view itself is ``ranks.cross_rank()`` (JSON as is).

The verdict comes first, then one row per rank (with its top finding), then the findings of all
ranks grouped by rule (each rule once, with the ranks it was found on).
"""
from __future__ import annotations

from rich.console import Console
from rich.text import Text

from ..ranks import NOISE_MADS, STRAGGLER_MIN_SHARE, findings_by_rank
from .format import count, keeping_snippets, ms, pct, timeline_hint
from .markdown import _table as md_table
from .markdown import findings_blocks
from .sanitize import for_markdown, for_text
from .terminal import indented, print_findings, table_of

MAX_STEP_ROWS = 12  # the per-step table shows the steps with the largest spread first

RANK_HEADERS = ["rank", "trace", "steps", "step", "vs fastest", "NCCL", "exposed", "waits", "idle", "offset", "next"]


def rank_findings(view: dict, reports: list[dict]) -> list[dict]:
    """Findings of every rank, one per rule (the text of its largest), gains for the job (``view["findings"]``,
    ranks.job_findings: at most what the rank that bounds the job gives up), largest first — the straggler's top
    finding first when a straggler by waiting is named (the others' waits are waits for it); ``ranks`` lists where
    each was found, ``job`` its job-gain entry."""
    largest: dict[str, dict] = {}
    for _, f in findings_by_rank(reports, view["ranks"]):
        if f["rule"] not in largest or f["gain_ns"] > largest[f["rule"]]["gain_ns"]:
            largest[f["rule"]] = f
    step = view["summary"].get("step_ns_median") or 0.0
    out = [{**largest[j["rule"]], "ranks": j["ranks"], "job": j, "gain_ns": j["job_gain_max_ns"],
            "gain_pct": round(100.0 * j["job_gain_max_ns"] / step, 1) if step and j["synchronized"]
            else largest[j["rule"]]["gain_pct"]}
           for j in view.get("findings", []) if j["rule"] in largest]
    first = (view["summary"].get("straggler_next") or {}).get("rule")
    return sorted(out, key=lambda f: (f["rule"] != first, -f["gain_ns"]))


def top_rules(view: dict, reports: list[dict]) -> dict[int, str]:
    """rank -> rule of its top finding (a report's findings are ranked: its first per rank)."""
    out: dict[int, str] = {}
    for rank, f in findings_by_rank(reports, view["ranks"]):
        out.setdefault(rank, f["rule"])
    return out


def rank_cells(r: dict, fastest: float | None, top_rule: str | None = None) -> list[str]:
    rel = (f"+{100 * (r['step_ns'] / fastest - 1):.1f}%" if fastest and r["step_ns"] is not None else "-")
    return [str(r["rank"]), r["label"] or r["trace"], count(r["steps"]), ms(r["step_ns"]), rel, ms(r["nccl_ns"]),
            ms(r["nccl_exposed_ns"]), ms(r.get("wait_ns")), pct(r["idle_fraction"]), ms(r["offset_ns"]), top_rule or "-"]


RANK_DROP_ORDER = ["offset", "exposed", "steps", "NCCL", "vs fastest", "idle", "trace"]  # first left out


def rank_line(r: dict, fastest: float | None, top_rule: str | None = None) -> str:
    """'rank 1: step 19.7 ms (+4.2%), idle 12.6% → pin-memory': one rank's verdict in a short line."""
    cells = dict(zip(RANK_HEADERS, rank_cells(r, fastest, top_rule)))
    rel = f" ({cells['vs fastest']})" if cells["vs fastest"] != "-" else ""
    return f"rank {r['rank']}: step {cells['step']}{rel}, idle {cells['idle']} → {top_rule or 'nothing flagged'}"


def ranks_where(f: dict) -> str:
    """' · ranks 0, 1' and, for ranks that meet every step, what bounds the job's gain."""
    ranks = sorted(f["ranks"])
    where = f" · rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"
    job = f.get("job") or {}
    if not job.get("synchronized"):
        return where
    if job["missing_ranks"] and job["job_gain_ns"] < job["job_gain_max_ns"]:
        missing, many = job["missing_ranks"], len(job["missing_ranks"]) > 1
        return (f"{where} · for the job {ms(job['job_gain_ns'])} to {ms(job['job_gain_max_ns'])}: "
                f"rank{'s' if many else ''} {', '.join(map(str, missing))} {'have' if many else 'has'} no such finding "
                f"({'their' if many else 'its'} gain is under the rule's threshold, if any) and "
                f"hold{'' if many else 's'} the job's step to {'theirs' if many else 'its own'}, "
                f"{'at least ' if many else ''}{ms(job['job_gain_ns'])} of it waiting for the others")
    if job["job_gain_max_ns"] < job["largest_rank_gain_ns"]:
        bound = job["bound_rank"]
        own = job["gain_ns_by_rank"][str(bound)]
        return (f"{where} · for the job as far as rank {bound}'s step gives way: its gain {ms(own)} plus its wait "
                f"for the others {ms(job['job_gain_max_ns'] - own)} ({ms(job['largest_rank_gain_ns'])} on one rank, "
                f"which then waits for rank {bound})")
    return where


def _step_rows(view: dict) -> list[dict]:
    return sorted(view["steps"], key=lambda s: -(s["spread_ns"] or 0))[:MAX_STEP_ROWS]


STEP_HEADERS = ["step", "ranks", "fastest", "median", "slowest", "spread", "slowest rank", "start skew"]


def _step_cells(s: dict) -> list[str]:
    return [str(s["step"]), str(s["ranks"]), ms(s["min_ns"]), ms(s["median_ns"]), ms(s["max_ns"]), ms(s["spread_ns"]),
            "-" if s["slowest_rank"] is None else str(s["slowest_rank"]), ms(s["start_skew_ns"])]


def verdict(view: dict) -> list[str]:
    """The summary lines: spread against the noise threshold, slowest rank, NCCL imbalance, likely straggler."""
    s = view["summary"]
    if not s.get("ranks"):
        return ["No rank with GPU work."]
    slowest = f"; slowest rank {s['slowest_rank']}" if s.get("slowest_rank") is not None else ""
    lines = [f"{s['ranks']} ranks; step time ({s['scope']}) {ms(s['step_ns_min'])} to {ms(s['step_ns_max'])}, "
             f"spread {ms(s['spread_ns'])} ({pct(s['spread_fraction'])} of the median){slowest}."]
    if s.get("nccl_ns_max"):
        least = f"; least on rank {s['least_nccl_rank']}" if s.get("least_nccl_rank") is not None else ""
        lines.append(f"NCCL time per rank {ms(s['nccl_ns_min'])} to {ms(s['nccl_ns_max'])} "
                     f"(imbalance {ms(s['nccl_imbalance_ns'])}){least}.")
    threshold = (f"the noise threshold {ms(s['noise_ns'])} (the larger of {STRAGGLER_MIN_SHARE:.0%} of the median "
                 f"step and {NOISE_MADS:g}× the ranks' step-time MAD)")
    if s.get("wait_ns_max"):
        lines.append(f"Time each rank's step waits for the others {ms(s['wait_ns_min'])} to {ms(s['wait_ns_max'])} "
                     f"(NCCL time and host waits while the GPU idles, beyond the least rank's); least on rank "
                     f"{s['least_wait_rank']}.")
    if s.get("straggler_cause") is not None:
        where = "in their NCCL kernels" if s["wait_kind"] == "nccl" else "in host waits (the all-reduce)"
        lines.append(f"Likely straggler: rank {s['likely_straggler']}: {s['straggler_cause']}, "
                     f"{ms(s['straggler_cause_ns'])} per {per(s)}; the other ranks wait {ms(s['others_wait_ns'])} {where} "
                     f"(rank {s['likely_straggler']} waits {ms(s['straggler_wait_ns'])}; beyond {threshold}).")
        if s.get("straggler_next"):
            lines.append(f"Next: rank {s['likely_straggler']}'s {s['straggler_next']['rule']} — {s['straggler_next']['title']}.")
    elif s.get("likely_straggler") is not None:
        lines.append(f"Likely straggler: rank {s['likely_straggler']} ({s['straggler_reason']}; beyond {threshold}).")
    elif s.get("ranks", 0) > 1:
        lines.append(f"No straggler: step times, NCCL times and waits differ by less than {threshold}.")
    if s.get("straggler_cause") is None and (top := job_next(view)) is not None:
        lines.append(top)
    if s.get("job_combined_gain_ns") is not None and len(view.get("findings") or []) > 1:
        share = f" ({pct(s['job_combined_gain_ns'] / s['step_ns_median'])} of the median step)" if s.get("step_ns_median") else ""
        lines.append(f"All fixes together, for the job: up to {ms(s['job_combined_gain_ns'])}{share}, as far as rank "
                     f"{s['job_combined_bound_rank']}'s step gives way (its ledger's combined gain and its wait for the others).")
    if s.get("steps_compared"):
        often = (f"; rank {s['slowest_rank_most_often']} is slowest most often"
                 if s.get("slowest_rank_most_often") is not None else "")
        lines.append(f"{s['steps_compared']} steps compared across ranks: median per-step spread "
                     f"{ms(s['step_spread_ns_median'])}{often}.")
    lines.append("Ranks aligned by session start (UTC): first GPU activity spread " + ms(s["start_spread_ns"]) + "."
                 if s.get("aligned") else "Session start time missing in some trace: ranks are not aligned in time.")
    return lines


def job_next(view: dict) -> str | None:
    """'Next for the job: rule — title (up to … for the job)' for ranks that meet every step: the finding with the
    largest gain for the job; None when they do not meet or nothing gains."""
    top = next(iter(view.get("findings") or []), None)
    if top is None or not top["synchronized"] or not top["job_gain_max_ns"]:
        return None
    low, high, missing = top["job_gain_ns"], top["job_gain_max_ns"], top["missing_ranks"]
    gain = (f"up to {ms(high)} for the job, as far as rank {top['bound_rank']}'s step gives way" if low == high else
            f"{ms(low)} to {ms(high)} for the job: not found on rank{'s' if len(missing) > 1 else ''} "
            + ", ".join(map(str, missing)))
    return f"Next for the job: {top['rule']} — {top['title']} ({gain})."


def per(summary: dict) -> str:
    return "step" if summary.get("scope") == "step median" else "capture"


def render_text(view: dict, console: Console, reports: list[dict] = (), top: int | None = None,
                details: bool = False) -> None:
    """Verdict, one row per rank, the findings across ranks; the per-step spread table with ``details``."""
    view, reports = for_text(view), [keeping_snippets(r, for_text) for r in reports]  # printed, never obeyed
    console.print(Text("Ranks", style="bold underline"))
    fastest = view["summary"].get("step_ns_min")
    rules = top_rules(view, reports)
    for r in view["ranks"]:  # every rank's verdict first, one short line each
        console.print(indented(console, rank_line(r, fastest, rules.get(r["rank"])), "  ", 4))
    for line in verdict(view):
        console.print(indented(console, line, "  ", 4))
    console.print(table_of("One row per rank", RANK_HEADERS,
                           [rank_cells(r, fastest, rules.get(r["rank"])) for r in view["ranks"]], left=(0, 1, 10),
                           drop=RANK_DROP_ORDER))
    steps = _step_rows(view)
    if steps and details:
        console.print(table_of("Per step across ranks (largest spread first)", STEP_HEADERS,
                               [_step_cells(s) for s in steps]))
    if reports:
        print_findings(console, rank_findings(view, reports), top, ranks_where)
        console.print(Text(timeline_hint([r["trace"]["path"] for r in reports]), style="dim"))


def render_markdown(view: dict, reports: list[dict] = (), top: int | None = None, details: bool = True) -> str:
    """Verdict, the rank table, the per-step spread table (with ``details``), the findings across ranks
    (markdown: the sections of :func:`render_text`)."""
    view, reports = for_markdown(view), [keeping_snippets(r, for_markdown) for r in reports]  # never as markdown
    fastest = view["summary"].get("step_ns_min")
    rules = top_rules(view, reports)
    out = ["## Ranks", ""] + [f"- {line}" for line in verdict(view)] + [""]
    out += md_table(RANK_HEADERS, [rank_cells(r, fastest, rules.get(r["rank"])) for r in view["ranks"]]) + [""]
    steps = _step_rows(view)
    if steps and details:
        out += ["Per step across ranks (largest spread first):", ""]
        out += md_table(STEP_HEADERS, [_step_cells(s) for s in steps]) + [""]
    if reports:
        out += findings_blocks(rank_findings(view, reports), top, ranks_where)
    return "\n".join(out) + "\n"
