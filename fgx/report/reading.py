"""The one- or two-line reading of a run's score beside what it means, from summary.json's ``reference``
block (fgx/reference.py): printed by `fgx run` under its table and by `fgx report` after its table."""
from __future__ import annotations


def _num(x) -> str:
    return f"{x:,}" if isinstance(x, int) else f"{x:.4g}"


def describe(summary: dict) -> str | None:
    """The one- or two-line reading of a summary with a ``reference`` block (None without one)."""
    ref = summary.get("reference")
    if not ref:
        return None
    final = summary.get("final") or {}
    triv, paper, ceil, pos = ref["trivial"], ref["paper"], ref["ceiling"], ref["positives"]
    f1 = final.get("f1_minority")
    parts = [f"flag nothing 0, flag all {triv['f1_minority']['flag_all']:.3g}"]
    if ceil.get("value") is not None:
        steps = f" at {ceil['steps']:,} steps" if isinstance(ceil.get("steps"), int) else ""
        if ceil.get("plateau") is False:      # the curve had not levelled off: a lower bound of the ceiling
            parts.append(f"centralised GINe {ceil['value']:.4f}{steps}, not levelled off")
        else:
            parts.append(f"centralised ceiling {ceil['value']:.4f}{steps}")
    elif ceil["reason"].startswith("not recorded"):
        parts.append("centralised ceiling not recorded")       # summary.json's reason says for which data
    elif ceil["reason"] != "not an AML dataset":
        parts.append(f"no centralised ceiling: {ceil['reason']}")
    if paper.get("value") is not None:
        parts.append(f"paper {paper['row']} {paper['value']:.4f} on real {paper['column']}")
    found = "laundering" if str((summary.get("data") or {}).get("name", "")).startswith("aml") else "positives"
    line = (f"test f1_minority {'-' if f1 is None else format(f1, '.4f')} ({'; '.join(parts)}) — flagged "
            f"{_num(pos['predicted'])} of {_num(pos['items'])}, {_num(pos['true_positives'])} of "
            f"{_num(pos['actual'])} {found} found")
    ap = final.get("pr_auc")
    if ap is not None:
        line += f"\ntest PR-AUC {ap:.4f} (a constant score: {triv['pr_auc']:.3g})"
    return line
