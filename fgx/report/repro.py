"""Paper reproduction: run a preset of conf/experiment/ and set its result beside the paper's numbers.

Each reproducible preset ``conf/experiment/NAME.yaml`` has a targets file ``conf/targets/NAME.yaml``:

    paper: CE-FedGNN            # which source paper
    item: Table 2 (Cora column) # which table or figure
    data: real                  # real | generated (a stand-in generator) | scaled (real, smaller budget)
                                # | substitute (another real dataset in the paper's place) | accounting
    status: reproduced          # the verdict of the last recorded run: reproduced | partial | not reproduced | not yet run
    measured: "..."             # what that run gave (one line), with its date
    metric: f1_macro            # the column compared (default: the runs' main metric)
    by: [algorithm]             # group keys (default: the keys the sweep varies)
    rows:                       # paper values; `tolerance` (absolute) makes a row a check, null only shows it
      - {where: {algorithm: ce_fedgnn}, paper: 0.4701, tolerance: 0.05}
    ordering:                   # expected order of group means, best first (a >= b >= ...)
      - {key: algorithm, order: [ce_fedgnn, fedgnn_st, ce_fedgnn_no_sharing]}
      - {key: algorithm, order: [mafalda_sgd, dp_dsgd], where: {algorithm.mu: 1.0}, lower_is_better: true}
      - {key: algorithm, order: [ce_fedgnn, fedgnn_st], metric: accuracy}   # another column than `metric`
    plot: {kind: sweep, x: algorithm.local_steps}   # figures: also written beside the table
    command: python scripts/x_table.py              # only when one Hydra sweep cannot express the runs

Presets whose YAML holds an ``accounting:`` block are pure arithmetic: ``kind: metric_dp`` (CE-FedGNN
Tables 6/7; targets give ``paper_values``, one list per row, one value per σ column, and a ``tolerance``)
or ``kind: pndp`` (Bellet et al. Fig. 2; ``paper_values`` maps a distance to its mean loss).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fgx.report.runs import ReportError

STATUSES = ("reproduced", "partial", "not reproduced", "not yet run", "accounting exact", "held out")
DATA_KINDS = ("real", "generated", "scaled", "substitute", "accounting")


@dataclass
class Check:
    what: str
    paper: str
    fgx: str
    ok: bool | None          # None: shown, not checked


@dataclass
class ReproResult:
    name: str
    targets: dict
    table_markdown: str
    checks: list[Check] = field(default_factory=list)
    problems: str = ""
    out_dir: Path | None = None
    files: list[Path] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        checked = [c.ok for c in self.checks if c.ok is not None]
        if not checked:
            return "no checks"
        return "all checks hold" if all(checked) else f"{sum(checked)}/{len(checked)} checks hold"


def targets_dir(conf: Path) -> Path:
    return conf / "targets"


def load_targets(conf: Path, name: str) -> dict:
    from omegaconf import OmegaConf

    exp = conf / "experiment" / f"{name}.yaml"
    tf = targets_dir(conf) / f"{name}.yaml"
    known = sorted(p.stem for p in targets_dir(conf).glob("*.yaml"))
    if not exp.exists():
        raise ReportError(f"no preset conf/experiment/{name}.yaml; reproducible presets: {known}")
    if not tf.exists():
        raise ReportError(f"preset {name!r} has no targets file conf/targets/{name}.yaml; "
                          f"reproducible presets: {known}")
    t = OmegaConf.to_container(OmegaConf.load(tf), resolve=True)
    for key in ("paper", "item", "data", "status"):
        if key not in t:
            raise ReportError(f"conf/targets/{name}.yaml: missing key {key!r}")
    if t["data"] not in DATA_KINDS:
        raise ReportError(f"conf/targets/{name}.yaml: data={t['data']!r}; allowed: {list(DATA_KINDS)}")
    if t["status"] not in STATUSES:
        raise ReportError(f"conf/targets/{name}.yaml: status={t['status']!r}; allowed: {list(STATUSES)}")
    t["accounting"] = OmegaConf.to_container(OmegaConf.load(exp), resolve=True).get("accounting")
    return t


def _stamp() -> str:
    return time.strftime("%Y-%m-%d_%H-%M-%S")


# ---------------------------------------------------------------------------------------- accounting
def run_accounting(name: str, t: dict, out_dir: Path) -> ReproResult:
    kinds = {"metric_dp": metric_dp_accounting, "pndp": pndp_accounting}
    kind = t["accounting"].get("kind")
    if kind not in kinds:
        raise ReportError(f"conf/experiment/{name}.yaml: accounting.kind={kind!r}; fgx knows {sorted(kinds)}")
    return kinds[kind](name, t, out_dir)


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
    res.files += _write(res, out_dir, {"rows": rows})
    return res


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
    res.files += _write(res, out_dir, {"by_distance": tab["by_distance"], "ldp_rdp": ldp})
    return res


# ---------------------------------------------------------------------------------------- training
def _group_means(rep, metric: str) -> list[tuple[dict, float, float, int]]:
    out = []
    for _, row in rep.table.iterrows():
        out.append(({b: str(row[b]) for b in rep.by}, float(row[f"{metric}_mean"]),
                    float(row[f"{metric}_std"]), int(row["n"])))
    return out


def compare(rep, t: dict, metric: str) -> list[Check]:
    groups = _group_means(rep, metric)
    checks = []
    for row in t.get("rows") or []:
        where = {k: str(v) for k, v in row["where"].items()}
        hit = [g for g in groups if all(g[0].get(k) == v for k, v in where.items())]
        label = ", ".join(f"{k}={v}" for k, v in where.items())
        paper = row.get("paper")
        paper_s = "-" if paper is None else f"{paper:.4f}" if isinstance(paper, (int, float)) else str(paper)
        if not hit:
            checks.append(Check(f"{metric} of {label}", paper_s, "no completed run", False))
            continue
        _, mean, std, n = hit[0]
        tol = row.get("tolerance")
        ok = None if tol is None or paper is None else abs(mean - float(paper)) <= float(tol)
        std_s = f" ± {std:.4f}" if n > 1 and std == std else ""
        what = f"{metric} of {label}" + (f" (|Δ| ≤ {tol})" if tol is not None else "")
        checks.append(Check(what, paper_s, f"{mean:.4f}{std_s}", ok))
    for o in t.get("ordering") or []:
        key, order = o["key"], [str(x) for x in o["order"]]
        om = o.get("metric", metric)          # an ordering may check another reported column
        groups = _group_means(rep, om)
        where = {k: str(v) for k, v in (o.get("where") or {}).items()}
        lower = bool(o.get("lower_is_better", False))
        sign = " ≤ " if lower else " ≥ "
        scope = f" where {', '.join(f'{k}={v}' for k, v in where.items())}" if where else ""
        means = {}
        for g, mean, _, _ in groups:
            if key in g and all(g.get(k) == v for k, v in where.items()):
                means.setdefault(g[key], mean)
        missing = [x for x in order if x not in means]
        if missing:
            checks.append(Check(f"ordering by {key}{scope}", sign.join(order), f"missing {missing}", False))
            continue
        ok = all((means[a] <= means[b]) if lower else (means[a] >= means[b]) for a, b in zip(order, order[1:]))
        checks.append(Check(f"ordering of {om} by {key}{scope}", sign.join(order),
                            " , ".join(f"{x} {means[x]:.4f}" for x in order), ok))
    return checks


def report_runs(name: str, t: dict, run_root: Path) -> ReproResult:
    from fgx.report.runs import find_runs
    from fgx.report.table import build_report, problems_text, render

    runs = find_runs([run_root])
    metric = t.get("metric")
    extra = [o["metric"] for o in t.get("ordering") or [] if o.get("metric") and o["metric"] != metric]
    metrics = ([metric] if metric else []) + list(dict.fromkeys(extra))
    rep = build_report(runs, by=t.get("by"), metrics=metrics or None)
    metric = metric or rep.metrics[0] if rep.metrics else metric
    checks = compare(rep, t, metric) if rep.metrics else []
    res = ReproResult(name, t, render(rep, "markdown"), checks, problems_text(rep), out_dir=run_root)
    if t.get("plot") and rep.metrics:
        from fgx.report.plots import plot
        p = dict(t["plot"])
        kind = p.pop("kind")
        res.files.append(plot([run_root], kind=kind, output=str(run_root / f"{name}_{kind}.png"), metric=metric, **p))
    res.files += _write(res, run_root, {"table": json.loads(rep.table.to_json(orient="records"))})
    return res


def _write(res: ReproResult, out_dir: Path, extra: dict) -> list[Path]:
    from fgx.outputs import RunDir, atomic_write_bytes

    rd = RunDir(out_dir)
    rd.write_json("repro.json", {"name": res.name, "paper": res.targets["paper"], "item": res.targets["item"],
                                 "data": res.targets["data"], "verdict": res.verdict,
                                 "checks": [c.__dict__ for c in res.checks], **extra})
    atomic_write_bytes(rd.file("repro.md"), (markdown(res) + "\n").encode())
    return [rd.file("repro.json"), rd.file("repro.md")]


def markdown(res: ReproResult) -> str:
    from fgx.report.table import to_markdown

    t = res.targets
    lines = [f"# {t['paper']} {t['item']} — fgx repro {res.name}", "",
             f"Data: {t['data']}" + (f" — {t['scale_note']}" if t.get("scale_note") else ""), "",
             res.table_markdown, ""]
    if res.checks:
        mark = {True: "✓", False: "✗", None: "·"}
        shown = res.checks if len(res.checks) <= 12 else [c for c in res.checks if c.ok is False]
        lines += ["## Against the paper", ""]
        if shown:
            lines += [to_markdown(["check", "paper", "fgx", ""], [[c.what, c.paper, c.fgx, mark[c.ok]] for c in shown]),
                      ""]
        if len(shown) < len(res.checks):
            lines += [f"({len(res.checks) - len(shown)} more checks hold; all are in repro.json)", ""]
        lines += [f"Verdict: {res.verdict}."]
    if res.problems:
        lines += ["", res.problems]
    return "\n".join(lines)


def reproduce(conf: Path, name: str, out: Path | None = None, overrides: list[str] | None = None,
              existing: Path | None = None) -> ReproResult:
    t = load_targets(conf, name)
    out = Path(out) if out else Path("outputs") / "repro" / name / _stamp()
    if t["accounting"] is not None:
        return run_accounting(name, t, out)
    if existing is None and t.get("command"):
        raise ReportError(f"{name} is reproduced by `{t['command']}` (its runs pair settings a single Hydra sweep "
                          f"cannot); run that, then compare with: fgx repro {name} --from <its output directory>")
    if existing is None:
        from fgx.cli import cmd_run
        cmd_run(["-m", f"+experiment={name}", f"hydra.sweep.dir={out}", *(overrides or [])])
        existing = out
    return report_runs(name, t, Path(existing))


# ---------------------------------------------------------------------------------------- docs
def reproduction_markdown(conf: Path) -> str:
    """docs/REPRODUCTION.md: every preset with targets, its status and command."""
    from omegaconf import OmegaConf

    from fgx.report.table import to_markdown

    entries = []
    for tf in sorted(targets_dir(conf).glob("*.yaml")):
        t: dict[str, Any] = OmegaConf.to_container(OmegaConf.load(tf), resolve=True)
        entries.append((t.get("paper", "?"), t.get("item", "?"), tf.stem, t))
    papers: dict[str, list] = {}
    for e in entries:
        papers.setdefault(e[0], []).append(e)
    out = ["# Reproducing the papers", "",
           "Generated by `fgx repro --docs docs/REPRODUCTION.md` from `conf/targets/*.yaml`; do not edit by hand.",
           "Each row is one preset of `conf/experiment/`; `fgx repro NAME` runs it and writes `repro.md` (the",
           "table beside the paper's numbers, with the checks) into `outputs/repro/NAME/<time>/`.",
           "Extra overrides go after the name, e.g. `fgx repro ce_fedgnn_table2_cora data_dir=/path/to/data`.", "",
           "*Data*: **real** = the paper's dataset; **generated** = an offline stand-in generator (orderings, not",
           "absolute numbers, are comparable); **scaled** = the real data with a smaller budget (fewer rounds or",
           "clients) than the paper; **substitute** = another real dataset in place of the paper's (offline);",
           "**accounting** = pure arithmetic, exact.", ""]
    for paper in sorted(papers):
        out += [f"## {paper}", ""]
        rows = []
        for _, item, name, t in sorted(papers[paper], key=lambda e: e[1]):
            cmd = f"`{t['command']}`" if t.get("command") else f"`fgx repro {name}`"
            rows.append([item, t.get("data", "?"), t.get("status", "?"), t.get("measured", "").replace("|", "/"), cmd])
        out += [to_markdown(["item", "data", "status", "last measured", "command"], rows), ""]
    return "\n".join(out)
