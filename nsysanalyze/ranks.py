"""Cross-rank view: pure functions over report dicts (``render.contract.report``), no SQL, no formatting.

A *rank* is one process of one job: a file per rank (``-o run_%q{RANK}``) gives one rank per
report, a file holding several processes (torchrun under one nsys) gives one per process. Several
GPUs used by one process (``tensor.cuda(1).to(2)``, a model split over devices) are devices of one
program, not ranks: they make one rank, shown by its busiest step (``deviceId``, the device with the
longest median step; ``devices`` lists them all), and never a straggler among themselves. Ranks are
numbered in file order — by the number in the file name when every name carries a distinct one
(``run_3.sqlite``) — then by process id.

Per rank (times in ns): ``step_ns`` is the median GPU step time (the capture window when the trace
has no steps), ``nccl_ns``/``nccl_exposed_ns`` NCCL kernel time per step (or in the capture),
``start_utc_ns`` the first GPU activity on the UTC clock (session start + its offset), which aligns
separate files; ``offset_ns`` is that start relative to the earliest rank.

Stragglers by waiting: in synchronous data-parallel training every rank's step has the same length
— the all-reduce holds the fast ranks until the slow one arrives — so step times hide the straggler.
Each rank's ``wait_ns`` is the time its step spends waiting for the others beyond the collective
itself (the least of any rank): its NCCL kernel time beyond the least rank's, plus its host waits
(``host_wait_ns``: GPU idle while its host is in OS waits — ``pthread_cond_wait``, futex, poll …: a
gloo all-reduce inside the backward — or in MPI calls) beyond the least rank's. Its
``own_cause``/``own_cause_ns`` is its largest cause that is not a wait: host work before the step's
first launch (when it is at least ``BEFORE_LAUNCH_SHARE`` of its top idle cause), else that top
cause. The straggler is the rank that waits least while the others wait about as long as its own
cause takes (within ``CAUSE_MATCH`` times), the gap being above the noise; then ``straggler_cause`` names it, ``others_wait_ns`` is the others' median wait and
``straggler_next`` its top finding (the job's next step).

Job gains (:func:`job_findings`): ranks that meet in a collective every step (NCCL kernels on every rank, an
all-reduce through host memory found on every rank, or a straggler by waiting) run the job at its slowest
rank's pace, so a fix shortens the job's step only as far as every rank's step gives way: by min over ranks of
(the rank's own gain + its ``wait_ns``, the slack it spends waiting for the others). A rule not found on a
rank gains it nothing that the report shows (its own bound is below the rule's reporting threshold there):
``job_gain_ns`` counts it as 0 (a lower bound), ``job_gain_max_ns`` leaves it out (the least of the found ranks'
sums: an upper bound). Ranks that never meet bank their own gains: both are then the largest rank's.

Noise: a spread (step time, NCCL time) names a slowest rank or a straggler only when it is at least
``noise_ns`` = max(``STRAGGLER_MIN_SHARE`` of the median step, ``NOISE_MADS`` × the median over ranks
of each rank's step-time MAD (median absolute deviation of its steady steps)).

Jobs (:func:`jobs`): several files form one job only when they belong together: the same step
family, session starts within ``SAME_LAUNCH_NS`` (launched together: torchrun, one node or several)
with distinct (process, GPU, session) triples, or within ``MAX_START_GAP_NS`` on GPUs no other file of
the job uses. Any other file is diagnosed alone, with a note saying why.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

RANK_COLUMNS = ["rank", "label", "trace", "path", "globalPid", "pid", "deviceId", "devices", "steps", "scope", "step_ns",
                "cpu_step_ns", "idle_fraction", "nccl_ns", "nccl_exposed_ns", "host_wait_ns", "wait_ns", "own_cause",
                "own_cause_ns", "session_start_utc_ns", "start_utc_ns", "offset_ns"]
TRAILING_NUMBER = re.compile(r"(\d+)(?!.*\d)")
# An imbalance (NCCL time, or step time) under this share of the median step is noise, not a straggler,
# and so is one under NOISE_MADS times the ranks' typical step-to-step variation (MAD).
STRAGGLER_MIN_SHARE = 0.02
NOISE_MADS = 3.0
SAME_LAUNCH_NS = 5_000_000_000
MAX_START_GAP_NS = 120_000_000_000
CAUSE_MATCH = 2.0   # the others' wait is "about as long" as the straggler's own cause within this factor
BEFORE_LAUNCH = "host work before the first launch"
BEFORE_LAUNCH_SHARE = 0.5  # idle before the first launch this share of the top cause names the step's preparation
# attribution rows that are host waits: OS waits (pthread_cond_wait, futex, poll, ...) and MPI calls
WAIT_KINDS = ("os_wait", "mpi")
MPI_CALL = r"^MPI_"


def _file_order(reports: list[dict]) -> list[int]:
    """Report indices in rank order (:func:`path_order` of their trace paths)."""
    return path_order([r["trace"]["path"] for r in reports])


def path_order(paths: list) -> list[int]:
    """Indices of ``paths`` in rank order: by the last number in the file names when each has a distinct one."""
    numbers = [TRAILING_NUMBER.search(Path(p).stem) for p in paths]
    if all(numbers) and len({int(m.group(1)) for m in numbers}) == len(paths):
        return sorted(range(len(paths)), key=lambda i: int(numbers[i].group(1)))
    return list(range(len(paths)))


def _value(device: dict, step_key: str, capture_key: str):
    v = device.get(step_key)
    return device.get(capture_key) if v is None else v


def _host_causes(report: dict) -> dict[tuple[int, int], tuple[float, str, float]]:
    """(globalPid, deviceId) -> (GPU idle ns in host waits, its largest other cause, that cause's ns), from the
    report's idle-gap attribution (per steady-step medians, or the capture); all devices grouped at once."""
    key = ["globalPid", "deviceId"]
    gaps = pd.DataFrame(report.get("gaps") or [], columns=[*key, "cause_kind", "cause", "ns", "before_launch_ns"])
    if gaps.empty:
        return {}
    waits = (gaps["cause_kind"].isin(WAIT_KINDS) | gaps["cause"].astype(str).str.contains(MPI_CALL)).to_numpy()
    wait_ns = gaps.assign(ns=np.where(waits, gaps["ns"], 0.0)).groupby(key)["ns"].sum()
    own = gaps[~waits]
    before = own.groupby(key)["before_launch_ns"].sum().reindex(wait_ns.index, fill_value=0.0)
    top = own.sort_values("ns", ascending=False, kind="stable").drop_duplicates(key).set_index(key)
    top = top.reindex(wait_ns.index)
    top_ns = top["ns"].fillna(0.0).to_numpy()
    by_before = before.to_numpy() >= BEFORE_LAUNCH_SHARE * top_ns
    causes = np.where(by_before, BEFORE_LAUNCH, top["cause"].astype(object).to_numpy())
    cause_ns = np.where(by_before, before.to_numpy(), top_ns)
    return {(int(p), int(d)): (float(w), str(c), float(n))
            for (p, d), w, c, n in zip(wait_ns.index, wait_ns.to_numpy(), causes, cause_ns)}


def _device_rows(reports: list[dict]) -> pd.DataFrame:
    """One row per (report, process, device) with GPU work, in rank order."""
    rows = []
    for i in _file_order(reports):
        r = reports[i]
        pids = {p["globalPid"]: p["pid"] for p in r["trace"]["processes"]}
        session = r["trace"].get("session_start_utc_ns")
        causes = _host_causes(r)
        devices = sorted(r["summary"]["devices"], key=lambda d: (pids.get(d["globalPid"], d["globalPid"]), d["deviceId"]))
        for d in devices:
            has_steps = bool(d.get("steps"))
            host_wait, cause, cause_ns = causes.get((d["globalPid"], d["deviceId"]), (0.0, None, 0.0))
            rows.append({
                "report": i, "trace": Path(r["trace"]["path"]).name, "path": r["trace"]["path"],
                "globalPid": d["globalPid"], "pid": pids.get(d["globalPid"]), "deviceId": d["deviceId"],
                "steps": int(d.get("steps") or 0), "scope": "step median" if has_steps else "capture",
                "step_ns": _value(d, "step_median_window_ns", "window_ns") if has_steps else d["window_ns"],
                "cpu_step_ns": d.get("step_median_cpu_ns") if has_steps else None,
                "idle_fraction": _value(d, "step_median_idle_fraction", "gpu_idle_fraction") if has_steps
                else d.get("gpu_idle_fraction"),
                "nccl_ns": _value(d, "step_median_nccl_ns", "nccl_ns") if has_steps else d.get("nccl_ns"),
                "nccl_exposed_ns": _value(d, "step_median_nccl_exposed_ns", "nccl_exposed_ns") if has_steps
                else d.get("nccl_exposed_ns"),
                "host_wait_ns": host_wait, "own_cause": cause, "own_cause_ns": cause_ns,
                "session_start_utc_ns": session,
                "start_utc_ns": None if session is None else session + d["window_start"],
            })
    return pd.DataFrame(rows, columns=["report", "trace", "path", "globalPid", "pid", "deviceId", "steps", "scope",
                                       "step_ns", "cpu_step_ns", "idle_fraction", "nccl_ns", "nccl_exposed_ns",
                                       "host_wait_ns", "own_cause", "own_cause_ns", "session_start_utc_ns",
                                       "start_utc_ns"])


def rank_table(reports: list[dict]) -> pd.DataFrame:
    """One row per rank — per (report, process) with GPU work — (see the module docstring for the columns)."""
    rows = _device_rows(reports)
    key = ["report", "globalPid"]
    devices = rows.groupby(key, sort=False)["deviceId"].agg(lambda d: sorted(int(x) for x in d))
    order = rows.assign(_step=pd.to_numeric(rows["step_ns"], errors="coerce").fillna(-1), _pos=np.arange(len(rows)))
    busiest = order.sort_values(["_step", "_pos"], ascending=[False, True], kind="stable").drop_duplicates(key)
    frame = busiest.sort_values("_pos").drop(columns=["_step", "_pos"]).reset_index(drop=True)
    frame.insert(frame.columns.get_loc("deviceId") + 1, "devices",
                 [devices[(r, p)] for r, p in zip(frame["report"], frame["globalPid"])])
    frame.insert(0, "rank", np.arange(len(frame)))
    several_per_report = frame["report"].duplicated(keep=False)

    def where(pid, devs, many):
        gpus = f"GPU {devs[0]}" if len(devs) == 1 else "GPUs " + ", ".join(map(str, devs))
        return f"pid {pid} {gpus}" if many else gpus if len(reports) == 1 else ("" if len(devs) == 1 else gpus)

    frame.insert(1, "label", [(f"{t} " if len(reports) > 1 else "") + where(p, devs, many)
                              for t, p, devs, many in zip(frame["trace"], frame["pid"], frame["devices"], several_per_report)])
    frame["label"] = frame["label"].str.strip()
    nccl = pd.to_numeric(frame["nccl_ns"], errors="coerce").fillna(0.0).astype(float)
    host = frame["host_wait_ns"].astype(float)
    frame["wait_ns"] = (nccl - nccl.min() + host - host.min()) if len(frame) else nccl + host
    starts = pd.to_numeric(frame["start_utc_ns"], errors="coerce")
    frame["offset_ns"] = (starts - starts.min()) if starts.notna().all() and len(frame) else None
    return frame[RANK_COLUMNS + ["report"]]


def step_table(reports: list[dict], ranks: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per step index closed on at least two ranks (a step whose window the capture cut is left out):
    fastest/median/slowest GPU step time over the ranks, spread (slowest - fastest), the slowest rank,
    and how far apart the ranks started the step on the UTC clock (when known)."""
    ranks = rank_table(reports) if ranks is None else ranks
    cols = ["step", "ranks", "min_ns", "median_ns", "max_ns", "spread_ns", "slowest_rank", "start_skew_ns"]
    key = {(r.report, r.globalPid, r.deviceId): r.rank for r in ranks.itertuples()}
    rows = [{"rank": key[(i, s["globalPid"], s["deviceId"])], "step": s["step"], "window_ns": s["window_ns"],
             "start_utc_ns": (None if reports[i]["trace"].get("session_start_utc_ns") is None
                              else reports[i]["trace"]["session_start_utc_ns"] + s["window_start"])}
            for i, r in enumerate(reports) for s in r["steps"]
            if (i, s["globalPid"], s["deviceId"]) in key and s.get("closed", True)]
    if not rows:
        return pd.DataFrame(columns=cols)
    steps = pd.DataFrame(rows)
    times = steps.pivot_table(index="step", columns="rank", values="window_ns", aggfunc="first")
    times = times[times.notna().sum(axis=1) >= 2]
    if times.empty:
        return pd.DataFrame(columns=cols)
    starts = steps.pivot_table(index="step", columns="rank", values="start_utc_ns", aggfunc="first").reindex(times.index)
    out = pd.DataFrame({
        "step": times.index.astype(int), "ranks": times.notna().sum(axis=1).astype(int),
        "min_ns": times.min(axis=1), "median_ns": times.median(axis=1), "max_ns": times.max(axis=1),
        "slowest_rank": times.idxmax(axis=1).astype(int),
        "start_skew_ns": (starts.max(axis=1) - starts.min(axis=1)) if starts.notna().any().any() else np.nan,
    }).reset_index(drop=True)
    out["spread_ns"] = out["max_ns"] - out["min_ns"]
    return out[cols]


def _num(x):
    """JSON-safe scalar: numpy → Python, NaN → None."""
    if x is None:
        return None
    if isinstance(x, np.generic):
        x = x.item()
    return None if isinstance(x, float) and x != x else x


def step_mad_ns(reports: list[dict], ranks: pd.DataFrame) -> float:
    """Median over ranks of each rank's step-time MAD over its steady steps (NaN without steps)."""
    from .metrics import steady_steps

    key = {(r.report, r.globalPid, r.deviceId): r.rank for r in ranks.itertuples()}
    rows = [{"rank": key[k], "window_ns": s["window_ns"], "closed": s.get("closed", True),
             "globalPid": s["globalPid"], "deviceId": s["deviceId"]}
            for i, r in enumerate(reports) for s in r["steps"] if (k := (i, s["globalPid"], s["deviceId"])) in key]
    if not rows:
        return float("nan")
    steps = steady_steps(pd.DataFrame(rows))
    mad = steps.groupby("rank")["window_ns"].agg(lambda t: float(np.median(np.abs(t - np.median(t)))))
    return float(mad.median())


def noise_ns(median_step_ns: float, mad_ns: float) -> float:
    """The spread below which ranks are balanced (see the module docstring)."""
    share = STRAGGLER_MIN_SHARE * (median_step_ns if median_step_ns == median_step_ns else 0.0)
    return max(share, NOISE_MADS * mad_ns) if mad_ns == mad_ns else share


def cross_rank(reports: list[dict]) -> dict:
    """The cross-rank view as plain data: ``ranks`` (one dict per rank), ``steps`` (per step index),
    and ``summary``: step time fastest/median/slowest, spread, the noise threshold, slowest/fastest rank
    (null unless the spread reaches the threshold), NCCL imbalance and the likely straggler with the
    reason (none below the threshold: the ranks are balanced)."""
    ranks = rank_table(reports)
    steps = step_table(reports, ranks)
    summary: dict = {"ranks": int(len(ranks))}
    straggler: dict = {}
    if len(ranks):
        t = ranks["step_ns"].astype(float)
        noise = noise_ns(t.median(), step_mad_ns(reports, ranks))
        significant = len(ranks) > 1 and t.max() - t.min() >= noise
        summary.update({
            "scope": "step median" if (ranks["scope"] == "step median").all() else
                     "capture" if (ranks["scope"] == "capture").all() else "mixed",
            "step_ns_min": t.min(), "step_ns_median": t.median(), "step_ns_max": t.max(),
            "spread_ns": t.max() - t.min(), "spread_fraction": (t.max() - t.min()) / t.median() if t.median() else None,
            "noise_ns": noise,
            "slowest_rank": int(ranks.loc[t.idxmax(), "rank"]) if significant else None,
            "fastest_rank": int(ranks.loc[t.idxmin(), "rank"]) if significant else None,
            "aligned": bool(ranks["offset_ns"].notna().all()),
            "start_spread_ns": ranks["offset_ns"].max() if ranks["offset_ns"].notna().all() else None,
        })
        nccl = pd.to_numeric(ranks["nccl_ns"], errors="coerce").fillna(0).astype(float)
        if nccl.max() > 0:
            summary.update({"nccl_ns_min": nccl.min(), "nccl_ns_max": nccl.max(), "nccl_imbalance_ns": nccl.max() - nccl.min(),
                            "least_nccl_rank": int(ranks.loc[nccl.idxmin(), "rank"])})
        waits = ranks["wait_ns"].astype(float)
        if waits.max() > 0:
            summary.update({"wait_ns_min": waits.min(), "wait_ns_max": waits.max(),
                            "least_wait_rank": int(ranks.loc[waits.idxmin(), "rank"])})
        straggler = waiting_straggler(ranks, noise)
        if straggler:
            summary.update(straggler)
            summary["straggler_next"] = top_finding(reports, ranks.loc[ranks["rank"] == straggler["likely_straggler"]].iloc[0])
        elif len(ranks) > 1 and nccl.max() - nccl.min() >= noise and nccl.max() > 0:
            summary.update({"likely_straggler": summary["least_nccl_rank"],
                            "straggler_reason": "least NCCL time: the other ranks wait for it inside their collectives"})
        elif significant:
            summary.update({"likely_straggler": summary["slowest_rank"], "straggler_reason": "slowest step time"})
        if len(steps):
            steps.loc[steps["spread_ns"] < noise, "slowest_rank"] = None
            summary["steps_compared"] = int(len(steps))
            summary["step_spread_ns_median"] = steps["spread_ns"].median()
            slowest = steps["slowest_rank"].dropna()
            summary["slowest_rank_most_often"] = int(slowest.mode().iloc[0]) if significant and len(slowest) else None
    findings = job_findings(reports, ranks, straggler)
    if len(ranks) and findings and findings[0]["synchronized"]:
        summary.update(job_combined(reports, ranks))
    return {
        "summary": {k: _num(v) for k, v in summary.items()},
        "findings": [{k: _num(v) for k, v in f.items()} for f in findings],
        "ranks": [{k: _num(v) for k, v in row.items()} for row in ranks.drop(columns="report").to_dict("records")],
        "steps": [{k: _num(v) for k, v in row.items()} for row in steps.to_dict("records")],
    }


COLLECTIVE_THROUGH_HOST = "allreduce-through-host"  # the rule that finds gloo's or a host-staged MPI's all-reduce


def synchronized(reports: list[dict], ranks: pd.DataFrame, straggler: dict) -> bool:
    """Whether the ranks meet in a collective every step: several ranks, each with NCCL kernel time, or each with
    an all-reduce through host memory found (COLLECTIVE_THROUGH_HOST), or a straggler by waiting (``straggler``:
    :func:`waiting_straggler`'s; the others wait for it)."""
    if len(ranks) < 2:
        return False
    nccl = pd.to_numeric(ranks["nccl_ns"], errors="coerce").fillna(0.0)
    found = {r for r, f in findings_by_rank(reports, ranks.to_dict("records"))
             if f["rule"] == COLLECTIVE_THROUGH_HOST}
    return bool((nccl > 0).all()) or found == set(ranks["rank"]) or bool(straggler)


def findings_by_rank(reports: list[dict], rank_rows: list[dict]) -> list[tuple[int, dict]]:
    """(rank, finding) for every finding on a device of a rank (``rank_rows``: the view's ``ranks`` rows), each
    report's findings in their ranked order."""
    rank_of = {(r["path"], r["globalPid"], d): r["rank"]
               for r in rank_rows for d in r.get("devices") or [r["deviceId"]]}
    return [(rank_of[key], f) for report in reports for f in report["findings"]
            if (key := (report["trace"]["path"], f["globalPid"], f["deviceId"])) in rank_of]


def job_findings(reports: list[dict], ranks: pd.DataFrame, straggler: dict) -> list[dict]:
    """Per rule found on some rank (largest job gain first): ``rule``, ``title`` (of its largest finding), ``ranks``
    (where found), ``missing_ranks``, ``gain_ns_by_rank`` (each found rank's largest gain, ns),
    ``largest_rank_gain_ns``, ``synchronized``, and the job's what-if bounds (module docstring): ``job_gain_ns``
    (the lower), ``job_gain_max_ns`` (the upper) and ``bound_rank`` (the rank whose step sets the upper bound)."""
    gains: dict[str, dict[int, float]] = {}
    titles: dict[str, tuple[float, str]] = {}  # rule -> (its largest gain, that finding's title)
    for rank, f in findings_by_rank(reports, ranks.to_dict("records")):
        by_rank = gains.setdefault(f["rule"], {})
        by_rank[rank] = max(by_rank.get(rank, 0.0), float(f["gain_ns"]))
        if f["rule"] not in titles or f["gain_ns"] > titles[f["rule"]][0]:
            titles[f["rule"]] = (float(f["gain_ns"]), f["title"])
    wait_ns = pd.to_numeric(ranks["wait_ns"], errors="coerce").fillna(0.0)
    waits = dict(zip(ranks["rank"].astype(int).tolist(), wait_ns.tolist()))
    sync = synchronized(reports, ranks, straggler)
    out = []
    for rule, by_rank in gains.items():
        missing = [r for r in waits if r not in by_rank]
        with_slack = {r: g + (waits[r] if sync and g > 0 else 0.0) for r, g in by_rank.items()}  # 0: no gain claimed
        bound = min(with_slack, key=with_slack.get) if sync else max(by_rank, key=by_rank.get)
        upper = with_slack[bound] if sync else by_rank[bound]
        lower = min([upper, *(waits[r] for r in missing)]) if sync and upper > 0 else upper
        out.append({"rule": rule, "title": titles[rule][1], "ranks": sorted(by_rank), "missing_ranks": missing,
                    "gain_ns_by_rank": {str(r): g for r, g in sorted(by_rank.items())},
                    "largest_rank_gain_ns": max(by_rank.values()), "synchronized": sync,
                    "job_gain_ns": lower, "job_gain_max_ns": upper, "bound_rank": bound})
    return sorted(out, key=lambda f: (-f["job_gain_max_ns"], f["rule"]))


def job_combined(reports: list[dict], ranks: pd.DataFrame) -> dict:
    """Every rank's fixes together, for ranks that meet every step: ``job_combined_gain_ns``, the least over ranks
    of (the combined gain of its ledger's window, ns, + its ``wait_ns``), and ``job_combined_bound_rank``."""
    combined = {(i, x["globalPid"], x["deviceId"]): x["combined_gain_ns"] for i, r in enumerate(reports)
                for x in r.get("ledger") or []}
    waits = pd.to_numeric(ranks["wait_ns"], errors="coerce").fillna(0.0).tolist()
    sums = [combined.get((int(r.report), r.globalPid, r.deviceId), 0.0) + w for r, w in zip(ranks.itertuples(), waits)]
    k = int(np.argmin(sums))
    return {"job_combined_gain_ns": float(sums[k]), "job_combined_bound_rank": int(ranks["rank"].iloc[k])}


def waiting_straggler(ranks: pd.DataFrame, noise: float) -> dict:
    """The straggler by waiting (module docstring): ``likely_straggler``, ``straggler_reason``,
    ``straggler_cause``, ``straggler_cause_ns``, ``straggler_wait_ns``, ``others_wait_ns`` and
    ``wait_kind`` (``nccl``: inside NCCL kernels; ``host``: host waits while the GPU idles); {} when none."""
    if len(ranks) < 2:
        return {}
    wait = ranks["wait_ns"].astype(float).to_numpy()
    k = int(np.argmin(wait))
    others = float(np.median(np.delete(wait, k)))
    own = float(ranks["own_cause_ns"].iloc[k] or 0.0)
    if others - wait[k] < noise or not own or not 1 / CAUSE_MATCH <= own / others <= CAUSE_MATCH:
        return {}
    host = ranks["host_wait_ns"].astype(float).to_numpy()
    nccl_wait = others - float(np.median(np.delete(host - host.min(), k)))
    return {"likely_straggler": int(ranks["rank"].iloc[k]),
            "straggler_reason": "waits least while the others wait for it about as long as its own cause takes",
            "straggler_cause": ranks["own_cause"].iloc[k], "straggler_cause_ns": own,
            "straggler_wait_ns": float(wait[k]), "others_wait_ns": others,
            "wait_kind": "nccl" if nccl_wait > others / 2 else "host"}


def top_finding(reports: list[dict], rank) -> dict | None:
    """``rule`` and ``title`` of a rank's top finding (its report's findings are ranked), None without one."""
    found = next((f for f in reports[int(rank["report"])]["findings"]
                  if f["globalPid"] == rank["globalPid"] and f["deviceId"] in rank["devices"]), None)
    return None if found is None else {"rule": found["rule"], "title": found["title"]}


def _start(report: dict) -> int | None:
    return report["trace"].get("session_start_utc_ns")


def _belongs(reports: list[dict], job: list[int], i: int) -> bool:
    """Whether report ``i`` is one more rank of ``job`` (see the module docstring)."""
    new, first = reports[i], reports[job[0]]
    if _start(new) is None or _start(first) is None or new["trace"].get("step_family") != first["trace"].get("step_family"):
        return False
    gap = abs(_start(new) - _start(first))

    def triples(r):
        return {(d["globalPid"], d["deviceId"], _start(r)) for d in r["summary"]["devices"]}

    taken = set().union(*(triples(reports[j]) for j in job))
    if gap <= SAME_LAUNCH_NS and not triples(new) & taken:
        return True
    used = {dev for _, dev, _ in taken}
    return gap <= MAX_START_GAP_NS and not {d["deviceId"] for d in new["summary"]["devices"]} & used


def jobs(reports: list[dict]) -> list[dict]:
    """Which reports form one job: ``traces`` (indices into ``reports``, in order) and ``note`` (why a
    file given with others is diagnosed alone, else None); jobs in the order of their first file."""
    order = sorted(range(len(reports)), key=lambda i: (_start(reports[i]) is None, _start(reports[i]) or 0, i))
    groups: list[list[int]] = []
    for i in order:
        job = next((g for g in groups if _belongs(reports, g, i)), None)
        if job is None:
            groups.append([i])
        else:
            job.append(i)
    groups = sorted((sorted(g) for g in groups), key=lambda g: g[0])
    out = []
    for g in groups:
        note = None
        if len(g) == 1 and len(reports) > 1:
            family = reports[g[0]]["trace"].get("step_family") or "no steps"
            note = (f"{reports[g[0]]['trace']['path']}: diagnosed alone: no other file has its step family "
                    f"({family}) and a session start within {SAME_LAUNCH_NS / 1e9:.0f} s (or within "
                    f"{MAX_START_GAP_NS / 60e9:.0f} min on other GPUs)"
                    + ("" if _start(reports[g[0]]) is not None else "; its session start time is missing") + ".")
        out.append({"traces": g, "note": note})
    return out


def rank_count(report: dict) -> int:
    """Ranks in one report: its processes with GPU work (several GPUs of one process are one rank)."""
    return len({d["globalPid"] for d in report["summary"]["devices"]})
