"""One table's result as markdown: the table, its checks with their outcomes, notes and status."""
from __future__ import annotations

from fgx.tables.checks import ReproResult

MARK = {"holds": "✓ holds", "fails": "✗ fails", "inconclusive": "? inconclusive", "diverged": "↯ diverged", "not run": "– not run", "shown": "· (shown)"}


def markdown(res: ReproResult, heading: bool = True) -> str:
    from fgx.report.table import to_markdown

    t = res.targets
    lines = [f"# {t['paper']} {t['item']} — fgx repro {res.name}", ""] if heading else []
    lines += [f"Data: {t['data']}" + (f" — {t['scale_note']}" if t.get("scale_note") else ""), "",
              res.table_markdown, ""]
    if res.checks:
        lines += ["Against the paper:", "",
                  to_markdown(["check", "paper", "fgx", ""], [[c.what, c.paper, c.fgx, MARK[c.outcome]]
                                                              for c in res.checks]), ""]
    lines += [n for note in res.notes for n in (note, "")]
    if res.stale:
        shown = res.stale[:8] + ([f"… {len(res.stale) - 8} more"] if len(res.stale) > 8 else [])
        lines += [f"Stale (changed since the record): {'; '.join(shown)}. Run `fgx repro {res.name} --record` "
                  f"again.", ""]
    lines += [f"Status: **{res.status}** ({res.verdict})."]
    if res.problems:
        lines += ["", res.problems]
    return "\n".join(lines)
