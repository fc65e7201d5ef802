"""Bellet et al. (2025) Fig. 2: pairwise network DP of DP-D-SGD by distance, computed (no training)."""
from __future__ import annotations

from pathlib import Path

from fgx.tables.accounting import ACCOUNTING
from fgx.tables.checks import Check, ReproResult


@ACCOUNTING.register("pndp")
def pndp_accounting(name: str, t: dict, out_dir: Path) -> ReproResult:
    """Bellet et al. (2025) Fig. 2: PNDP loss of DP-D-SGD by distance from the attacker (fgx's MF
    accounting against Cyffers et al. 2022). Checks: the per-distance means against reference values
    (``paper_values: {distance: mean}``, absolute ``tolerance``), and the paper's claims — the MF
    accounting is never looser than Cyffers', and from distance ``min_gain_distance`` on every node
    is at least ``min_gain``× below the LDP level."""
    from fgx.decentral.topology import TopologyParams, build_graph, gossip_matrix
    from fgx.privacy.mf.pndp import pndp_table
    from fgx.report.table import to_markdown

    acc = t["accounting"]
    g = build_graph(TopologyParams(graph=acc.get("graph", "florentine")))
    tab = pndp_table(gossip_matrix(g, acc.get("gossip", "uniform")), g, int(acc["steps"]),
                     int(acc.get("attacker", 0)), 1, float(acc.get("alpha", 2.0)), float(acc.get("sigma", 1.0)))
    ldp, tol = tab["ldp_rdp"], float(t.get("tolerance", 1e-3))
    ref = {int(k): float(v) for k, v in (t.get("paper_values") or {}).items()}
    gain, gain_from = float(t.get("min_gain", 10.0)), int(t.get("min_gain_distance", 3))
    cells, checks = [], []
    for r in tab["by_distance"]:
        d, a, c = r["distance"], r["rdp"], r["cyffers_rdp"]
        cells.append([str(d), str(r["count"]), f"{a['min']:.4g}", f"{a['mean']:.4g}" + (f" ({ref[d]:.4g})" if d in ref else ""),
                      f"{a['max']:.4g}", f"{c['mean']:.4g}"])
        if d in ref:
            checks.append(Check(f"mean PNDP loss at distance {d}", f"{ref[d]:.4g}", f"{a['mean']:.4g}",
                                abs(a["mean"] - ref[d]) <= tol))
        checks.append(Check(f"MF ≤ Cyffers at distance {d}", f"≤ {c['mean']:.4g}", f"{a['mean']:.4g}",
                            a["mean"] <= c["mean"] * (1 + 1e-9)))
        if d >= gain_from:
            checks.append(Check(f"distance {d}: every node ≥ {gain:g}× below LDP", f"≤ {ldp / gain:.4g}",
                                f"max {a['max']:.4g}", a["max"] * gain <= ldp))
    md = to_markdown(["distance", "nodes", "MF min", "MF mean (reference)", "MF max", "Cyffers mean"], cells)
    note = (f"graph {acc.get('graph', 'florentine')} ({g.number_of_nodes()} nodes), T = {acc['steps']}, "
            f"Rényi α = {acc.get('alpha', 2.0)}, σ = {acc.get('sigma', 1.0)}, attacker {acc.get('attacker', 0)}; "
            f"LDP level {ldp:.4g}")
    res = ReproResult(name, t, md + "\n\n" + note, checks, out_dir=out_dir)
    res.extra = {"by_distance": tab["by_distance"], "ldp_rdp": ldp}
    return res
