"""Ledgers for hand-built Evidence in rule tests (not traces): the ledger rows that a step's metrics and its
attribution rows make, so rules see the same rows an analysis would give them."""
import pandas as pd

from nsysanalyze.ledger import ROW_KEYS, Ledger


def ledger_rows(gap_rows, m) -> pd.DataFrame:
    """The ledger these metrics and attribution rows make: busy rows by class from the copy/NCCL metrics (the
    rest of the busy time is compute), idle rows split by tag (before-launch ns are neither after a sync nor
    in a short gap)."""
    g = lambda k: float(m.get(k) or 0.0)  # noqa: E731
    busy = {"nccl": g("nccl_exposed_ns") or g("nccl_allreduce_exposed_ns") or
            g("nccl_sendrecv_exposed_ns") + g("nccl_allgather_exposed_ns") + g("nccl_reducescatter_exposed_ns"),
            "htod_pageable": g("htod_pageable_ns") if g("htod_pageable_bytes") else 0.0,
            "htod_pinned": g("htod_ns") - g("htod_hidden_ns") - (g("htod_pageable_ns") if g("htod_pageable_bytes") else 0),
            "dtoh_pageable" if g("dtoh_pageable_bytes") else "dtoh_pinned": g("dtoh_ns") - g("dtoh_hidden_ns"),
            "dtod": g("dtod_ns"), "unified": g("um_ns")}
    busy["compute"] = max(0.0, g("busy_ns") - sum(busy.values()))
    rows = [("busy", k, "", False, False, False, v) for k, v in busy.items() if v > 0]
    for kind, cause, ns, before, after, short, short_after in (tuple(r) + (0,) * (7 - len(r)) for r in gap_rows):
        parts = {(True, False, False): before, (False, True, True): short_after, (False, True, False): after - short_after,
                 (False, False, True): short - short_after, (False, False, False): ns - before - after - short + short_after}
        rows += [("idle", kind, cause, *tags, float(v)) for tags, v in parts.items() if v > 0]
    return pd.DataFrame(rows, columns=[*ROW_KEYS, "ns"])


def gap_tuples(gaps: pd.DataFrame) -> list[tuple]:
    """Attribution summary rows (cause_kind, cause, ns, before_launch_ns, after_sync_ns, short_gap_ns,
    short_after_sync_ns) as the tuples :func:`ledger_rows` takes."""
    cols = ["cause_kind", "cause", "ns", "before_launch_ns", "after_sync_ns", "short_gap_ns", "short_after_sync_ns"]
    return [tuple(r) for r in gaps.reindex(columns=cols, fill_value=0.0).itertuples(index=False)]


def ledger_of(m: dict, gaps: pd.DataFrame) -> Ledger:
    """The Ledger of hand-built metrics ``m`` (busy_ns defaults to window − idle) and attribution rows."""
    m = {**m, "busy_ns": m.get("busy_ns", m.get("window_ns", 0.0) - m.get("idle_ns", 0.0))}
    return Ledger.of(ledger_rows(gap_tuples(gaps), m), m)
