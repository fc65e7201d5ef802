"""What every table decides, counted: ``fgx repro --tally PATH`` writes it as JSON, so that a change to how
tables decide can be shown as counts before and after (docs/REPRODUCTION.md reads a committed tally).

Per table: its status, its *decision* (the status its checks give, whether or not the record is stale:
staleness says the record must be made again, not what it shows), and every ordering check with its
outcome and reason. Computed from the committed records and targets alone."""
from __future__ import annotations

from pathlib import Path

ORDER_OUTCOMES = ("holds", "fails", "inconclusive")


def is_ordering(check) -> bool:
    """An ordering check (a ≥ b between two rows), also in records judged before checks carried a kind."""
    kind = getattr(check, "kind", "")
    if kind:
        return kind == "ordering"
    return any(s in check.paper and not check.paper.startswith(s.strip()) for s in (" ≥ ", " ≤ "))


def decision(res) -> str:
    """The status the checks give, stale or not."""
    stale, res.stale = res.stale, []
    try:
        return res.status
    finally:
        res.stale = stale


def tally(conf: Path, commit: str | None = None, results: dict | None = None) -> dict:
    """Every table's status, decision and orderings (``results``: {name: ReproResult} already computed)."""
    from fgx.provenance import head_commit
    from fgx.tables.run import record_result
    from fgx.tables.spec import load_targets, table_names

    tables = {}
    for name in table_names(conf):
        res = (results or {}).get(name) or record_result(conf, name, load_targets(conf, name))
        orderings = [{"what": c.what, "outcome": c.outcome, "fgx": c.fgx} for c in res.checks if is_ordering(c)]
        others = [{"what": c.what, "kind": getattr(c, "kind", ""), "outcome": c.outcome} for c in res.checks
                  if not is_ordering(c) and c.outcome not in ("holds", "shown")]
        tables[name] = {"status": res.status, "decision": decision(res) if res.record is not None else res.status,
                        "stale": bool(res.stale), **record_identity(res.record), "orderings": orderings,
                        "other_checks": others,
                        "counts": {o: sum(x["outcome"] == o for x in orderings) for o in ORDER_OUTCOMES}}
    totals = {o: sum(t["counts"][o] for t in tables.values()) for o in ORDER_OUTCOMES}
    return {"commit": commit or head_commit(), "orderings": totals,
            "decisions": _count(t["decision"] for t in tables.values()),
            "statuses": _count(t["status"] for t in tables.values()), "tables": tables}


def record_identity(record: dict | None) -> dict:
    """What runs a table's record holds: its seeds, its runs, and a key of which runs they are (each run's
    cell, seed and date: a rerun changes it, a spot check, which carries runs over, does not)."""
    import hashlib
    import json

    runs = (record or {}).get("runs") or []
    if not runs:
        return {"seeds": 0, "runs": 0, "record": None}
    seeds = {str((r.get("overrides") or {}).get("seed", (r.get("summary") or {}).get("seed"))) for r in runs}
    cells = sorted(json.dumps([r.get("overrides"), r.get("date")], sort_keys=True, default=str) for r in runs)
    return {"seeds": len(seeds), "runs": len(runs), "record": hashlib.sha256("\n".join(cells).encode()).hexdigest()[:12]}


def reason_of_change(before: dict, after: dict) -> str:
    """Why a table's decision changed, from its two tallies: the orderings' outcomes before and after, why
    the undecided ones are undecided now, and the other checks that no longer hold."""
    parts = []
    if "record" in before and before.get("record") != after.get("record"):
        seeds = (f", seeds {before['seeds']} → {after['seeds']}" if before.get("seeds") != after.get("seeds") else
                 f", {after['seeds']} seeds")
        parts.append(("recorded again" if before.get("record") else "recorded") +
                     f" (runs {before.get('runs', 0)} → {after.get('runs', 0)}{seeds})")
    b, a = before.get("counts", {}), after.get("counts", {})
    moved = [f"{o} {b.get(o, 0)} → {a.get(o, 0)}" for o in ORDER_OUTCOMES if b.get(o, 0) != a.get(o, 0)]
    if moved:
        parts.append("orderings " + ", ".join(moved))
    why: dict[str, int] = {}
    for o in after.get("orderings", []):
        if o["outcome"] == "inconclusive":
            r = o["fgx"].split("; ", 1)[1] if "; " in o["fgx"] else "?"
            r = "no evaluation-data term" if r.startswith("no evaluation-data term") else \
                "not significant after Holm" if r.startswith("not significant after Holm") else r
            why[r] = why.get(r, 0) + 1
    if why:
        parts.append("undecided: " + ", ".join(f"{r} ×{n}" for r, n in sorted(why.items(), key=lambda x: -x[1])))
    other = sorted({f"{c['what']} {c['outcome']}" for c in after.get("other_checks", [])})
    if other:
        parts.append("; ".join(other[:3]) + (f" (+{len(other) - 3})" if len(other) > 3 else ""))
    if after.get("decision") == "runs as expected":
        parts.append("no paper value or ordering to test: floors and effort only")
    return "; ".join(parts) or "—"


def _count(values) -> dict:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return dict(sorted(out.items()))
