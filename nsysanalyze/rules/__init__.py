"""Diagnosis: rules are pure functions from one device's :class:`Evidence` to a :class:`Finding`.

Each rule module holds one family (input pipeline, DDP, launch overhead). ``diagnose`` runs
them all and orders findings by estimated gain (an upper bound: the time the fix could remove
at most), largest first; informational findings (gain 0) come last.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable

import pandas as pd

from ..units import ms

SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2, "info": 3}


@dataclass
class Evidence:
    """What the rules see for one (process, device).

    ``m`` holds per-step medians of every metric (over closed steps) when steps were found,
    except host<->device copy amounts, which are capture totals / steps (see
    ``analysis.CAPTURE_COPY_TOTALS``); otherwise the whole-capture window's values. Names and
    units as in ``metrics``.
    ``subranges`` maps a CPU sub-range name to (median ns per step, median share of the step).
    ``gaps``: the idle-gap attribution (cause_kind, cause, ns, before_launch_ns; per-step medians or
    capture totals, as ``m``; see ``attribution.summarize``). ``framework``: what produced the trace
    (``framework.detect``), which picks the language of each fix.
    """

    globalPid: int
    deviceId: int
    scope: str  # "step median" or "capture"
    m: dict[str, float]
    subranges: dict[str, tuple[float, float]] = field(default_factory=dict)
    facts: dict[str, float] = field(default_factory=dict)
    gaps: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(
        {"cause_kind": [], "cause": [], "ns": [], "before_launch_ns": [], "after_sync_ns": [], "short_gap_ns": [],
         "short_after_sync_ns": []}))
    framework: str = "unknown"
    gpu_name: str = ""

    @property
    def window_ns(self) -> float:
        return float(self.m.get("window_ns") or 0.0)

    @property
    def per(self) -> str:
        """What the numbers are per: 'step' (medians) or 'capture' (whole-capture totals)."""
        return "step" if self.scope == "step median" else "capture"

    def idle_by(self, kinds: tuple[str, ...] = (), causes: tuple[str, ...] = (), tag: str = "ns") -> float:
        """Attributed GPU idle ns whose cause_kind is in ``kinds`` or whose cause matches a regex in ``causes``;
        ``tag`` (a column of ``gaps``: 'before_launch_ns', 'after_sync_ns', ...) restricts it to idle so tagged."""
        g = self.gaps
        if g.empty:
            return 0.0
        mask = g["cause_kind"].isin(kinds)
        for pattern in causes:
            mask |= g["cause"].str.fullmatch(pattern)
        return float(g.loc[mask, tag].sum())

    @property
    def after_sync_idle_ns(self) -> float:
        """GPU idle after host syncs, except where the host is in an OS call (munmap, write, a wait: those
        are causes of their own): without the sync the host's later work would overlap queued GPU work."""
        return self.idle_by(kinds=("untraced", "launch", "cuda_blocking", "nvtx_range"), tag="after_sync_ns")

    @property
    def free_short_gap_ns(self) -> float:
        """GPU idle in short gaps (attribution.SHORT_GAP_NS) that no host sync explains: launch overhead."""
        g = self.gaps
        return float(g["short_gap_ns"].sum() - g["short_after_sync_ns"].sum()) if not g.empty else 0.0

    def get(self, name: str, default: float = 0.0) -> float:
        v = self.m.get(name)
        return default if v is None or v != v else float(v)  # NaN -> default


@dataclass
class Finding:
    """One diagnosis: what, how sure, how much it could gain at most, and the fix."""

    rule: str
    title: str
    severity: str
    confidence: float
    gain_ns: float
    gain_pct: float  # of the step (or capture window) time
    evidence: dict[str, float | str]
    fix: str
    snippet: str
    globalPid: int = 0
    deviceId: int = 0
    scope: str = "step median"

    def to_dict(self) -> dict:
        return asdict(self)


Rule = Callable[[Evidence], "Finding | None"]


def make_finding(ev: Evidence, rule: str, title: str, confidence: float, gain_ns: float,
                 evidence: dict, fix: str, snippet: str, severity: str | None = None) -> Finding:
    """Build a finding; severity from the gain share unless given (>=20% high, >=5% medium, else low)."""
    gain_ns = max(0.0, min(float(gain_ns), ev.window_ns)) if ev.window_ns else max(0.0, float(gain_ns))
    pct = 100.0 * gain_ns / ev.window_ns if ev.window_ns else 0.0
    if severity is None:
        severity = "high" if pct >= 20 else "medium" if pct >= 5 else "low"
    return Finding(rule=rule, title=title, severity=severity, confidence=round(confidence, 2), gain_ns=gain_ns,
                   gain_pct=round(pct, 1), evidence=evidence, fix=fix, snippet=snippet.strip("\n"),
                   globalPid=ev.globalPid, deviceId=ev.deviceId, scope=ev.scope)


def all_rules() -> list[Rule]:
    from . import collectives, ddp, host_sync, input_pipeline, launch
    return [*input_pipeline.RULES, *host_sync.RULES, *launch.RULES, *ddp.RULES, *collectives.RULES]


# Rules whose gain is GPU idle they explain (the others remove busy time: copies, exposed NCCL)
IDLE_RULES = {"dataloader-workers", "pin-memory", "launch-bound", "dtoh-sync", "host-sync"}
UNEXPLAINED_IDLE = 0.20   # GPU idle share of the step that must be explained
SIGNIFICANT_PCT = 5.0     # a finding this large (% of the step) silences input-pipeline-ok
EXPLAINED_SHARE = 0.5     # ...at least this share of it by the idle rules' findings


def diagnose(evidence: list[Evidence]) -> list[Finding]:
    """Run every rule on every device, then ``gpu-idle-unexplained`` where the GPU idles ≥ 20% of the
    step and the findings explain less than half of that idle; order by gain (desc), then severity."""
    findings = []
    for ev in evidence:
        mine = [f for rule in all_rules() if (f := rule(ev)) is not None]
        mine += [f for f in [unexplained_idle(ev, mine)] if f is not None]
        if any(f.gain_pct >= SIGNIFICANT_PCT for f in mine):  # "nothing to fix here" only when nothing else is big
            mine = [f for f in mine if f.rule != "input-pipeline-ok"]
        findings += mine
    return sorted(findings, key=lambda f: (-f.gain_ns, SEVERITY_ORDER[f.severity], f.rule))


def unexplained_idle(ev: Evidence, findings: list[Finding]) -> Finding | None:
    """GPU idle that no rule explains: show where the attribution says the GPU waited."""
    idle_ns, idle = ev.get("idle_ns"), ev.get("idle_fraction")
    explained = sum(f.gain_ns for f in findings if f.rule in IDLE_RULES)
    if idle < UNEXPLAINED_IDLE or explained >= EXPLAINED_SHARE * idle_ns or ev.gaps.empty:
        return None
    top = ev.gaps.head(3).to_dict("records")  # the three largest causes, as plain rows
    causes = "; ".join(f"{r['cause']} ({r['cause_kind']}, {ms(r['ns'])})" for r in top)
    first = top[0]
    what = {"nvtx_range": f"the host work inside '{first['cause']}'",
            "untraced": "host work that no traced call covers (Python/CPU code between GPU calls)",
            "cuda_blocking": f"the blocking {first['cause']} calls", "os_runtime": f"the {first['cause']} calls",
            "os_wait": f"what the host waits for in {first['cause']}", "launch": "kernel launch overhead"}
    return make_finding(
        ev, "gpu-idle-unexplained",
        f"GPU idle {idle:.0%} of the {ev.per}; the GPU waited on: {causes}",
        confidence=0.5, gain_ns=idle_ns - explained,
        evidence={"gpu_idle_fraction": idle, "gpu_idle_ns": idle_ns, "explained_by_findings_ns": explained,
                  **{f"cause_{i + 1}": f"{r['cause_kind']}: {r['cause']}" for i, r in enumerate(top)},
                  **{f"cause_{i + 1}_ns": float(r["ns"]) for i, r in enumerate(top)}},
        fix=f"Most of the GPU idle comes from {what[first['cause_kind']]}: take that work off the GPU's critical "
            "path (run it ahead of or beside the GPU work, in a background thread/process, or on the GPU).",
        snippet="")
