"""CE-FedGNN Tables 6/7: ε of metric-DP embedding releases, computed (no training)."""
from __future__ import annotations

from pathlib import Path

from fgx.tables.accounting import ACCOUNTING
from fgx.tables.checks import Check, ReproResult


@ACCOUNTING.register("metric_dp")
def metric_dp_accounting(name: str, t: dict, out_dir: Path) -> ReproResult:
    """CE-FedGNN Tables 6/7: ε of metric-DP at given ρ_q, one cell per (percentile, σ0)."""
    from fgx.privacy.metric_dp_accounting import epsilon_table
    from fgx.report.table import to_markdown

    acc = t["accounting"]
    rhos = {int(k): float(v) for k, v in acc["rho"].items()}
    sigmas = [float(s) for s in acc["sigmas"]]
    rows = epsilon_table(rhos, sigmas, int(acc["releases"]), float(acc["delta"]))
    paper = {int(k): v for k, v in (t.get("paper_values") or {}).items()}
    tol = float(t.get("tolerance", 1e-3))
    header = ["percentile (ρ)"] + [f"σ0={s:g}" for s in sigmas]
    cells, checks = [], []
    for r in rows:
        q = r["percentile"]
        line = [f"{q}th ({r['rho']:.4f})"]
        for j, s in enumerate(sigmas):
            ours = r["eps"][s]
            pv = paper.get(q, [None] * len(sigmas))[j] if q in paper else None
            if pv is None:
                line.append(f"{ours:.3f}")
                continue
            ok = abs(ours - pv) <= tol
            line.append(f"{ours:.3f} ({pv:.3f}{'' if ok else ' ✗'})")
            checks.append(Check(f"ε at {q}th percentile, σ0={s:g}", f"{pv:.3f}", f"{ours:.3f}", ok))
        # cells read "fgx (paper)"; a ✗ marks a cell outside the tolerance
        cells.append(line)
    md = to_markdown(header, cells)
    note = (f"R' = {acc['releases']} releases, δ = {acc['delta']}; cells: fgx (paper); tolerance {tol:g}"
            if paper else f"R' = {acc['releases']} releases, δ = {acc['delta']}; paper values held out")
    res = ReproResult(name, t, md + "\n\n" + note, checks, out_dir=out_dir)
    res.extra = {"rows": rows}
    return res
