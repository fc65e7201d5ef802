"""How many seeds a table runs, and the rule that chose it (docs/tables.md, "Seeds").

The written rule, by what one run costs (the median of the record's run wall times, on its machine):
10 seeds where a run takes under 10 s, 5 where it takes under 2 min, 3 otherwise (the cost cap: three
seeds of a 15-minute run are 45 minutes per row). A preset may state another rule in
``table.seeds_rule`` (e.g. a power rule from a pilot: the seeds that detect the paper's gap with 80 %
power), which is then shown instead. Every table's note says how many seeds it ran, which rule chose
them and, where the preset runs fewer than the written rule asks, that it is below the rule.
"""
from __future__ import annotations

import statistics

RULE = ((10.0, 10), (120.0, 5))      # (the median run's wall time in s below which, seeds)
FEW = 3
RULE_TEXT = "10 seeds where a run takes < 10 s, 5 where < 2 min, 3 otherwise"


def seeds_for(median_s: float) -> int:
    return next((n for limit, n in RULE if median_s < limit), FEW)


def preset_seeds(sweep: dict) -> int | None:
    seeds = sweep.get("seed")
    return len([s for s in str(seeds).split(",") if s.strip()]) if seeds is not None else None


def seeds_note(record: dict, sweep: dict, stated: str | None = None) -> tuple[str, dict]:
    """(the table's seeds statement, ``{"seeds": n, "rule": seeds the rule asks or None, "below": bool}``);
    ('', {}) for a table that sweeps no seeds."""
    n = preset_seeds(sweep)
    if n is None:
        return "", {}
    timed = [e for e in record.get("runs", []) if isinstance((e.get("summary") or {}).get("wall_time_s"), (int, float))]
    # a diverged run stops early: what a run costs is read from those that completed, where any did
    done = [e for e in timed if e["summary"].get("status", "completed") == "completed"]
    walls = [e["summary"]["wall_time_s"] for e in done or timed]
    if stated:
        return f"Seeds: {n}, by the preset's rule: {stated}.", {"seeds": n, "rule": None, "below": False}
    if not walls:
        return f"Seeds: {n} (rule: {RULE_TEXT}; no run time recorded yet).", {"seeds": n, "rule": None, "below": False}
    median = statistics.median(walls)
    need = seeds_for(median)
    info = {"seeds": n, "rule": need, "below": n < need}
    text = f"Seeds: {n} (rule: {RULE_TEXT}; the median run here took {median:.1f} s, so ≥ {need})"
    if n < need:
        return text + f"; **below the rule**: {need - n} more seed(s) per row are owed.", info
    return text + ".", info
