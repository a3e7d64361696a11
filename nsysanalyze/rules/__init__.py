"""Diagnosis: rules are pure functions from one device's :class:`Evidence` to a :class:`Finding`.

Each rule module holds one family (input pipeline, DDP, launch overhead). ``diagnose`` runs
them all and orders findings by estimated gain (an upper bound: the time the fix could remove
at most), largest first; informational findings (gain 0) come last.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable

SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2, "info": 3}


@dataclass
class Evidence:
    """What the rules see for one (process, device).

    ``m`` holds per-step medians of every metric (over closed steps) when steps were found,
    except host<->device copy amounts, which are capture totals / steps (see
    ``analysis.CAPTURE_COPY_TOTALS``); otherwise the whole-capture window's values. Names and
    units as in ``metrics``.
    ``subranges`` maps a CPU sub-range name to (median ns per step, median share of the step).
    """

    globalPid: int
    deviceId: int
    scope: str  # "step median" or "capture"
    m: dict[str, float]
    subranges: dict[str, tuple[float, float]] = field(default_factory=dict)
    facts: dict[str, float] = field(default_factory=dict)

    @property
    def window_ns(self) -> float:
        return float(self.m.get("window_ns") or 0.0)

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
    from . import ddp, input_pipeline, launch
    return [*input_pipeline.RULES, *ddp.RULES, *launch.RULES]


def diagnose(evidence: list[Evidence]) -> list[Finding]:
    """Run every rule on every device; order by gain (desc), then severity."""
    findings = [f for ev in evidence for rule in all_rules() if (f := rule(ev)) is not None]
    return sorted(findings, key=lambda f: (-f.gain_ns, SEVERITY_ORDER[f.severity], f.rule))
