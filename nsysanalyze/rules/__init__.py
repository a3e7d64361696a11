"""Diagnosis: rules are pure functions from one device's :class:`Evidence` to a :class:`Finding`.

Each rule module holds one family (input pipeline, DDP, launch overhead). ``diagnose`` runs
them in order of precedence (:func:`all_rules`: the most specific cause first) on each device's
ledger (nsysanalyze.ledger): each finding claims the ledger rows its fix removes, a claimed row is
no longer there for the rules after it, and a finding's gain is its what-if bound (the time the fix
could remove at most). Findings are ordered by gain, largest first; informational ones (gain 0) last.

Confidence is the rule's own, times how much the window can be trusted (``confidence_factor``):
×0.8 for steps inferred from the kernel sequence, ×0.8 for a capture analyzed as one window (no
steps: a one-shot program or no step ranges), ×0.85 with 2 steady steps and ×0.7 with one, and ×(steps'
share of the capture / 0.5), at least 0.4, when the steps cover less than half of the capture. When the
``warmup-capture`` finding holds at least half of the GPU idle, the other findings' confidence is halved
(steady-state advice read from a warm-up capture).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Callable

import numpy as np
import pandas as pd

from ..ledger import EMPTY_LEDGER_ROWS, Ledger, WhatIf, combined

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
    ledger: Ledger = field(default_factory=lambda: Ledger(EMPTY_LEDGER_ROWS, 0.0, 0.0, 0.0))

    @property
    def window_ns(self) -> float:
        return float(self.m.get("window_ns") or 0.0)

    @property
    def per(self) -> str:
        """What the numbers are per: 'step' (medians) or 'capture' (whole-capture totals)."""
        return "step" if self.scope == "step median" else "capture"

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
    claimed: list[int] = field(default_factory=list)  # positions of the ledger rows this finding claims
    what_if: WhatIf | None = None                      # the bound of its gain (None: nothing to gain)
    residual: bool = False  # gpu-idle-unexplained beside findings that name their causes: ranked after them

    def to_dict(self) -> dict:
        out = asdict(self)
        out.pop("what_if")
        out.pop("residual")
        return out


Rule = Callable[[Evidence], "Finding | None"]


def make_finding(ev: Evidence, rule: str, title: str, confidence: float, gain_ns: float,
                 evidence: dict, fix: str, snippet: str, severity: str | None = None,
                 claim: np.ndarray | None = None, what_if: WhatIf | None = None, busy: tuple[str, ...] = ()) -> Finding:
    """Build a finding; severity from the gain share unless given (>=20% high, >=5% medium, else low).

    ``claim`` (a mask of ``ev.ledger``'s rows) and ``what_if`` (its bound) come from the rule. A rule whose
    fix takes GPU work off the critical path instead names its ``busy`` classes (metrics.BUSY_CLASSES, e.g.
    ``("nccl",)``): it claims their rows, and its ``gain_ns`` estimate is bounded by them and by the
    two-resource model. The gain is the bound's; its terms join the evidence."""
    ledger = ev.ledger
    if what_if is None and gain_ns > 0 and busy:
        claim = ledger.busy(*busy)
        taken = min(float(gain_ns), ledger.ns(claim)) if len(ledger) else float(gain_ns)
        what_if = ledger.what_if(taken, busy_removed_ns=taken)
    if what_if is not None:
        gain_ns = what_if.gain_ns
        evidence = {**evidence, **what_if.terms()}
    gain_ns = max(0.0, min(float(gain_ns), ev.window_ns)) if ev.window_ns else max(0.0, float(gain_ns))
    pct = 100.0 * gain_ns / ev.window_ns if ev.window_ns else 0.0
    if severity is None:
        severity = "high" if pct >= 20 else "medium" if pct >= 5 else "low"
    claimed = np.flatnonzero(claim & ledger.free).tolist() if claim is not None and claim.size else []
    return Finding(rule=rule, title=title, severity=severity, confidence=round(confidence, 2), gain_ns=gain_ns,
                   gain_pct=round(pct, 1), evidence=evidence, fix=fix, snippet=snippet.strip("\n"),
                   globalPid=ev.globalPid, deviceId=ev.deviceId, scope=ev.scope, claimed=claimed, what_if=what_if)


def all_rules() -> list[Rule]:
    """Every rule in order of precedence: a ledger row goes to the first rule that claims it. The most
    specific cause first: warm-up (compilation, module loading), an all-reduce through host memory (its
    copies and the host's waits), pinning (idle in blocking copy calls and munmap, the pageable copies), the other host causes (file writes, allocator churn, unified memory,
    MPI), then the loader (host work before the step's first launch), copies back and host syncs (idle
    in and after syncs), launch overhead (a per-parameter optimizer, then short gaps no sync explains), copy
    overlap and the link (pinned copies not hidden), the DDP and collective rules (device-to-device copies,
    exposed NCCL), matrix work in full fp32 (the compute rows), and periodic stalls (slow steps outside the median step's ledger: they claim no row)."""
    from . import collectives, ddp, host_causes, host_sync, input_pipeline, launch, periodic, precision
    ip = input_pipeline
    return [launch.launch_blocking, host_causes.warmup_capture, ddp.host_allreduce, ip.pin_memory, *host_causes.RULES,
            ip.dataloader_workers, *host_sync.RULES,
            *launch.RULES, ip.copy_compute_overlap, ip.link_bound, ip.input_pipeline_ok, *ddp.RULES, *collectives.RULES,
            *precision.RULES, *periodic.RULES]


BOUNDED_MIN_SHARE = 0.01  # a finding its bound cuts below this share of the window is dropped
WARMUP_DOMINATES = 0.5   # warm-up idle share of all idle that halves the other findings' confidence
SIGNIFICANT_PCT = 5.0     # a finding this large (% of the step) silences input-pipeline-ok


@dataclass
class Diagnosis:
    """One device's findings, its ledger with the rows each finding claimed, and the window after all of
    the proposed fixes together (``combined``: nsysanalyze.ledger.combined; gpu-idle-unexplained, the idle no
    fix names, is not one of them)."""

    evidence: Evidence
    findings: list[Finding]
    ledger: Ledger
    combined: dict[str, float]


def order(findings: list[Finding]) -> list[Finding]:
    """Largest gain first, then severity, then rule id; a residual ``gpu-idle-unexplained`` after its device's
    findings of SIGNIFICANT_PCT or more (the next step is a fix that names its cause)."""
    return sorted(findings, key=lambda f: (f.residual, -f.gain_ns, SEVERITY_ORDER[f.severity], f.rule))


def diagnose(evidence: list[Evidence]) -> list[Finding]:
    """Every device's findings (:func:`diagnose_devices`), ordered by gain (desc), then severity."""
    return order([f for d in diagnose_devices(evidence) for f in d.findings])


def diagnose_devices(evidence: list[Evidence]) -> list[Diagnosis]:
    """Run the rules in order of precedence on every device, each on the ledger rows the rules before it
    left unclaimed, then ``gpu-idle-unexplained`` on the idle no finding claimed."""
    from .residual import unexplained_idle
    out = []
    for ev in evidence:
        mine = []
        for rule in all_rules():
            f = rule(ev)
            if f is None or bounded_to_nothing(f, ev.window_ns):
                continue
            f.confidence = round(f.confidence * ev.facts.get("confidence_factor", 1.0), 2)
            mine.append(f)
            if f.claimed:
                claim = np.zeros(len(ev.ledger), dtype=bool)
                claim[f.claimed] = True
                ev = replace(ev, ledger=ev.ledger.claim(f.rule, claim))
        rest = unexplained_idle(ev, mine)
        if rest is not None:
            rest.confidence = round(rest.confidence * ev.facts.get("confidence_factor", 1.0), 2)
            mine.append(rest)
            ev = replace(ev, ledger=ev.ledger.claim(rest.rule, ev.ledger.idle()))
        if any(f.gain_pct >= SIGNIFICANT_PCT for f in mine):  # "nothing to fix here" only when nothing else is big
            mine = [f for f in mine if f.rule != "input-pipeline-ok"]
        if rest is not None and any(f.gain_pct >= SIGNIFICANT_PCT for f in mine if f is not rest):
            rest.residual = True  # the idle no fix names comes after the fixes that name theirs
        warmup = [f for f in mine if f.rule == "warmup-capture"]
        if warmup and (warmup[0].gain_ns >= WARMUP_DOMINATES * ev.get("idle_ns") or
                       warmup[0].evidence.get("warmup_share_of_capture", 0.0) >= WARMUP_DOMINATES):
            for f in mine:  # steady-state advice read from a warm-up capture is a guess: the warm-up leads
                if f.rule != "warmup-capture":
                    f.confidence, f.residual = round(f.confidence * 0.5, 2), True
        fixes = [f.what_if for f in mine if f.what_if and f.rule != "gpu-idle-unexplained"]  # the residual is no fix
        out.append(Diagnosis(ev, order(mine), ev.ledger, combined(ev.ledger, fixes)))
    return out


def bounded_to_nothing(f: Finding, window_ns: float) -> bool:
    """A finding whose what-if bound, not the size of its cause, leaves less than BOUNDED_MIN_SHARE of the
    window: the other resource (GPU or host work) keeps the step as long; it promises nothing and is dropped."""
    w = f.what_if
    return (w is not None and w.gain_ns < w.removable_ns and window_ns > 0
            and w.gain_ns < BOUNDED_MIN_SHARE * window_ns)
