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


def tally(conf: Path, commit: str | None = None) -> dict:
    from fgx.provenance import _git
    from fgx.tables.run import record_result
    from fgx.tables.spec import load_targets, table_names

    tables = {}
    for name in table_names(conf):
        res = record_result(conf, name, load_targets(conf, name))
        orderings = [{"what": c.what, "outcome": c.outcome, "fgx": c.fgx} for c in res.checks if is_ordering(c)]
        tables[name] = {"status": res.status, "decision": decision(res) if res.record is not None else res.status,
                        "stale": bool(res.stale), "orderings": orderings,
                        "counts": {o: sum(x["outcome"] == o for x in orderings) for o in ORDER_OUTCOMES}}
    totals = {o: sum(t["counts"][o] for t in tables.values()) for o in ORDER_OUTCOMES}
    return {"commit": commit or _git("rev-parse", "--short=12", "HEAD"), "orderings": totals,
            "decisions": _count(t["decision"] for t in tables.values()),
            "statuses": _count(t["status"] for t in tables.values()), "tables": tables}


def _count(values) -> dict:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return dict(sorted(out.items()))
