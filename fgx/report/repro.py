"""Paper reproduction: run a table preset of conf/experiment/, record it, and set it beside the paper.

A table is ``conf/experiment/NAME.yaml`` (dataset, protocol, the methods and seeds it sweeps) with a
targets file ``conf/targets/NAME.yaml`` (what the paper reports and which checks apply):

    paper: CE-FedGNN            # which source paper
    item: Table 2 (Cora column) # which table or figure
    data: real                  # real | generated (a stand-in generator) | scaled (real, smaller budget)
                                # | substitute (another real dataset in the paper's place) | accounting
    metric: f1_macro            # the column compared (default: the runs' main metric)
    by: [method]                # group keys (default: the keys the sweep varies)
    rows:                       # paper values; `tolerance` (absolute) makes a row a check, null only shows it
      - {where: {method: ce_fedgnn}, paper: 0.4701, tolerance: 0.05}
    ordering:                   # expected order of group means, best first (a >= b >= ...)
      - {key: method, order: [ce_fedgnn, fedgnn_st, ce_fedgnn_no_sharing]}
      - {key: method, order: [mafalda_sgd, dp_dsgd], where: {algorithm.mu: 1.0}, lower_is_better: true}
      - {key: method, order: [ce_fedgnn, fedgnn_st], metric: accuracy}   # another column than `metric`
    plot: {kind: sweep, x: algorithm.local_steps}   # figures: also written beside the table

A targets file never says whether the table reproduces: ``fgx repro NAME`` runs the table as one
Hydra multirun, writes the committed record ``results/NAME.json`` (fgx.report.records) and the
status is computed from that record and the checks, here and in docs/REPRODUCTION.md
(``fgx repro --docs``).

Presets whose YAML holds an ``accounting:`` block are pure arithmetic: ``kind: metric_dp`` (CE-FedGNN
Tables 6/7; targets give ``paper_values``, one list per row, one value per σ column, and a ``tolerance``)
or ``kind: pndp`` (Bellet et al. Fig. 2; ``paper_values`` maps a distance to its mean loss).
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fgx.report.runs import ReportError

DATA_KINDS = ("real", "generated", "scaled", "substitute", "accounting")
TYPED_VERDICTS = ("status", "measured")     # computed from records; a targets file may not type them


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
    stale: list[str] = field(default_factory=list)      # cells whose recorded config is not the preset's now
    record: dict | None = None
    extra: dict = field(default_factory=dict)          # the table as JSON rows, the metric compared

    @property
    def verdict(self) -> str:
        checked = [c.ok for c in self.checks if c.ok is not None]
        if not checked:
            return "no checks"
        return "all checks hold" if all(checked) else f"{sum(checked)}/{len(checked)} checks hold"

    @property
    def status(self) -> str:
        """Computed, never typed: reproduced only when every check holds on a record that is current."""
        if self.record is None:
            return "not yet run"
        if self.stale:
            return "stale"
        checked = [c.ok for c in self.checks if c.ok is not None]
        if not checked:
            return "shown only"
        return "reproduced" if all(checked) else "not reproduced"


def targets_dir(conf: Path) -> Path:
    return conf / "targets"


def targets_sha(t: dict) -> str:
    return hashlib.sha256(json.dumps({k: v for k, v in t.items() if k != "accounting"}, sort_keys=True,
                                     default=str).encode()).hexdigest()[:16]


def load_targets(conf: Path, name: str) -> dict:
    """conf/targets/NAME.yaml, or the family targets file the table names (``table.targets`` in
    conf/experiment/NAME.yaml, with ``table.item`` and ``table.data`` saying which row it is)."""
    from omegaconf import OmegaConf

    exp = conf / "experiment" / f"{name}.yaml"
    tf = targets_dir(conf) / f"{name}.yaml"
    if not exp.exists():
        raise ReportError(f"no preset conf/experiment/{name}.yaml; tables: {table_names(conf)}")
    exp_node = OmegaConf.to_container(OmegaConf.load(exp))
    row = (exp_node.get("table") or {}) if isinstance(exp_node, dict) else {}
    if tf.exists():
        t = OmegaConf.to_container(OmegaConf.load(tf), resolve=True)
    elif row.get("targets") and (targets_dir(conf) / f"{row['targets']}.yaml").exists():
        t = OmegaConf.to_container(OmegaConf.load(targets_dir(conf) / f"{row['targets']}.yaml"), resolve=True)
        t.pop("family", None)
        t.update({k: row[k] for k in ("item", "data", "scale_note") if k in row})
    else:
        raise ReportError(f"preset {name!r} has no targets (conf/targets/{name}.yaml or table.targets in its "
                          f"preset); tables: {table_names(conf)}")
    for key in ("paper", "item", "data"):
        if key not in t:
            raise ReportError(f"conf/targets/{name}.yaml: missing key {key!r}")
    typed = [k for k in TYPED_VERDICTS if k in t]
    if typed:
        raise ReportError(f"conf/targets/{name}.yaml: {typed[0]!r} is computed from the record results/{name}.json "
                          f"(`fgx repro {name}`), not written in a targets file; remove it")
    if t["data"] not in DATA_KINDS:
        raise ReportError(f"conf/targets/{name}.yaml: data={t['data']!r}; allowed: {list(DATA_KINDS)}")
    t["accounting"] = exp_node.get("accounting") if isinstance(exp_node, dict) else None
    return t


def table_names(conf: Path) -> list[str]:
    """Every preset with targets: its own conf/targets/NAME.yaml, or a family file its `table.targets` names."""
    import re

    own = {p.stem for p in targets_dir(conf).glob("*.yaml")}
    names = []
    for exp in sorted((conf / "experiment").glob("*.yaml")):
        if exp.stem in own or re.search(r"^\s+targets:\s*\S", exp.read_text(), re.M):
            names.append(exp.stem)
    return names


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
    res.extra = {"rows": rows}
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
    res.extra = {"by_distance": tab["by_distance"], "ldp_rdp": ldp}
    return res


# ---------------------------------------------------------------------------------------- training
def _group_means(rep, metric: str) -> list[tuple[dict, float, float, int]]:
    out = []
    for _, row in rep.table.iterrows():
        out.append(({b: str(row[b]) for b in rep.by}, float(row[f"{metric}_mean"]),
                    float(row[f"{metric}_std"]), int(row["n"])))
    return out


def _canon(v) -> str:
    """A config value as the checks compare it: numbers by value (a target's `1e-5` is the run's `1e-05`)."""
    try:
        return repr(float(v))
    except (TypeError, ValueError):
        return str(v)


def compare(rep, t: dict, metric: str) -> list[Check]:
    groups = _group_means(rep, metric)
    checks = []
    for row in t.get("rows") or []:
        where = {k: str(v) for k, v in row["where"].items()}
        hit = [g for g in groups if all(_canon(g[0].get(k)) == _canon(v) for k, v in where.items())]
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
            if key in g and all(_canon(g.get(k)) == _canon(v) for k, v in where.items()):
                means.setdefault(_canon(g[key]), mean)
        missing = [x for x in order if _canon(x) not in means]
        if missing:
            checks.append(Check(f"ordering by {key}{scope}", sign.join(order), f"missing {missing}", False))
            continue
        m = [means[_canon(x)] for x in order]
        ok = all((a <= b) if lower else (a >= b) for a, b in zip(m, m[1:]))
        checks.append(Check(f"ordering of {om} by {key}{scope}", sign.join(order),
                            " , ".join(f"{x} {v:.4f}" for x, v in zip(order, m)), ok))
    return checks


def table_from_runs(name: str, t: dict, runs: list) -> ReproResult:
    """The table (mean ± std per group) and the checks of ``t`` over ``runs`` (run directories or a
    record's runs). ``{main}`` in a metric name stands for the runs' main metric."""
    from fgx.report.table import build_report, default_metric, problems_text, render

    main = default_metric(runs) if any(r.status == "completed" for r in runs) else "?"
    t = _with_main(t, main)
    metric = t.get("metric")
    extra = [o["metric"] for o in t.get("ordering") or [] if o.get("metric") and o["metric"] != metric]
    metrics = ([metric] if metric else []) + list(dict.fromkeys(extra))
    rep = build_report(runs, by=t.get("by"), metrics=metrics or None)
    metric = metric or rep.metrics[0] if rep.metrics else metric
    checks = compare(rep, t, metric) if rep.metrics else []
    if t.get("floor") is not None and rep.metrics:
        checks += floor_checks(rep, runs, metric, float(t["floor"]))
    res = ReproResult(name, t, render(rep, "markdown"), checks, problems_text(rep))
    res.extra = {"table": json.loads(rep.table.to_json(orient="records")), "metric": metric}
    return res


def _with_main(t: dict, main: str) -> dict:
    t = dict(t)
    if isinstance(t.get("metric"), str):
        t["metric"] = t["metric"].replace("{main}", main)
    t["ordering"] = [{**o, "metric": o["metric"].replace("{main}", main)} if o.get("metric") else o
                     for o in t.get("ordering") or []]
    return t


def floor_checks(rep, runs: list, metric: str, margin: float) -> list[Check]:
    """Every group must clear the trivial predictor by ``margin``: for accuracy the test split's
    majority-class rate (summary data.test_majority_rate), for ROC-AUC 0.5."""
    import statistics

    from fgx.report.runs import group_label

    groups = _group_means(rep, metric)
    key = lambda g: tuple(g[b] for b in rep.by)
    if "roc_auc" in metric:
        trivial = {key(g): 0.5 for g, *_ in groups}
        label = "ROC-AUC 0.5"
    elif "accuracy" in metric:
        rates: dict[tuple, list[float]] = {}
        for r in runs:
            v = (r.summary.get("data") or {}).get("test_majority_rate")
            if r.status == "completed" and isinstance(v, (int, float)):
                rates.setdefault(tuple(str(x) for x in group_label(r, rep.by)), []).append(float(v))
        trivial = {k: statistics.mean(v) for k, v in rates.items()}
        label = "the majority-class rate"
    else:
        return []
    out = []
    for g, mean, _, _ in groups:
        if key(g) not in trivial:
            continue
        floor = trivial[key(g)] + margin
        what = f"{', '.join(f'{k}={v}' for k, v in g.items())}: {metric} ≥ {label} + {margin:g}"
        out.append(Check(what, f"≥ {floor:.4f}", f"{mean:.4f}", mean >= floor))
    return out


def _plot(name: str, t: dict, run_root: Path, metric: str | None) -> list[Path]:
    if not t.get("plot") or not metric:
        return []
    from fgx.report.plots import plot
    p = dict(t["plot"])
    kind = p.pop("kind")
    return [plot([run_root], kind=kind, output=str(run_root / f"{name}_{kind}.png"), metric=metric, **p)]


def _write(res: ReproResult, out_dir: Path, extra: dict) -> list[Path]:
    from fgx.outputs import RunDir, atomic_write_bytes

    rd = RunDir(out_dir)
    rd.write_json("repro.json", {"name": res.name, "paper": res.targets["paper"], "item": res.targets["item"],
                                 "data": res.targets["data"], "verdict": res.verdict, "status": res.status,
                                 "checks": [c.__dict__ for c in res.checks], **extra})
    atomic_write_bytes(rd.file("repro.md"), (markdown(res) + "\n").encode())
    return [rd.file("repro.json"), rd.file("repro.md")]


def markdown(res: ReproResult, heading: bool = True) -> str:
    from fgx.report.table import to_markdown

    t = res.targets
    lines = [f"# {t['paper']} {t['item']} — fgx repro {res.name}", ""] if heading else []
    lines += [f"Data: {t['data']}" + (f" — {t['scale_note']}" if t.get("scale_note") else ""), "",
              res.table_markdown, ""]
    if res.checks:
        mark = {True: "✓", False: "✗ not reproduced", None: "· (shown)"}
        lines += ["Against the paper:", "",
                  to_markdown(["check", "paper", "fgx", ""], [[c.what, c.paper, c.fgx, mark[c.ok]] for c in res.checks]),
                  ""]
    if res.stale:
        lines += [f"Stale: the recorded config of {', '.join(res.stale)} is not what the preset resolves to now; "
                  f"run `fgx repro {res.name}` again.", ""]
    lines += [f"Status: **{res.status}** ({res.verdict})."]
    if res.problems:
        lines += ["", res.problems]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------- records
def table_sweep(name: str) -> dict[str, str]:
    """What the table's own sweep varies (``hydra.sweeper.params`` of the composed preset, so values
    a table takes from its protocol file count too)."""
    from omegaconf import OmegaConf

    from fgx.cli import compose

    params = OmegaConf.select(compose([f"+experiment={name}"], hydra=True), "hydra.sweeper.params") or {}
    return {str(k): str(v) for k, v in params.items()}


def sweep_keys(conf: Path, name: str) -> list[str]:
    """The keys the table's own sweep varies."""
    return list(table_sweep(name))


def cell_config(name: str, cell: dict[str, str]) -> tuple[dict, str]:
    """What `fgx run +experiment=NAME k=v ...` resolves to for one cell: the config fingerprint."""
    from fgx.cli import compose
    from fgx.config import config_fingerprint

    return config_fingerprint(compose([f"+experiment={name}", *(f"{k}={v}" for k, v in cell.items())]))


def stale_cells(conf: Path, name: str, record: dict) -> list[str]:
    """Cells of the record whose config differs from what the preset resolves to now."""
    keys = sweep_keys(conf, name)
    stale, cache = [], {}
    for e in record.get("runs", []):
        cell = {k: v for k, v in e["overrides"].items() if k in keys and k != "seed"}
        label = " ".join(f"{k}={v}" for k, v in cell.items()) or name
        ck = json.dumps(cell, sort_keys=True)
        if ck not in cache:
            try:
                cache[ck] = cell_config(name, cell)[1]
            except Exception as exc:  # noqa: BLE001 - a cell that no longer composes is stale, with the reason
                cache[ck] = f"error: {exc}"
        if cache[ck] != e.get("config_sha") and label not in stale:
            stale.append(label)
    return stale


def record_result(conf: Path, name: str, t: dict | None = None, check_stale: bool = True) -> ReproResult:
    """A table's result computed from its committed record alone (no record: 'not yet run')."""
    from fgx.report.records import load_record, record_runs

    t = t or load_targets(conf, name)
    record = load_record(conf, name)
    if record is None:
        return ReproResult(name, t, "(no record yet: run `fgx repro " + name + "`)")
    if "accounting" in record:
        acc = record["accounting"]
        res = ReproResult(name, t, acc["table_markdown"], [Check(**c) for c in acc["checks"]], record=record)
        if check_stale and record.get("targets_sha") != targets_sha(t):
            res.stale = ["the targets (changed since the record)"]
        return res
    res = table_from_runs(name, t, record_runs(record))
    res.record = record
    if check_stale:
        res.stale = stale_cells(conf, name, record)
    tuning = tuning_check(conf, name, record)
    if tuning is not None:
        res.checks.append(tuning)
    return res


def tuning_check(conf: Path, name: str, record: dict) -> Check | None:
    """Equal effort: either every method of the record was tuned by `fgx tune` (conf/tuned/NAME/), with
    the same number of trials, or none was (every method runs on the preset's values). A table that
    mixes the two cannot read 'reproduced'. None for tables that do not sweep methods."""
    methods = sorted({e["overrides"]["method"] for e in record.get("runs", []) if "method" in e.get("overrides", {})})
    if not methods:
        return None
    from fgx.report.records import results_dir
    from fgx.tune import tuned_path

    tune_file = results_dir(conf) / f"{name}.tune.json"
    tuned = json.loads(tune_file.read_text()).get("methods", {}) if tune_file.exists() else {}
    have = {m: tuned_path(conf, name, m).exists() for m in methods}
    done, left = [m for m in methods if have[m]], [m for m in methods if not have[m]]
    trials = {len(tuned[m].get("trials", [])) for m in done if m in tuned}
    if not done:
        return Check("equal tuning", "same budget for every method", "the preset's values for every method", True)
    if left or len(trials) > 1:
        return Check("equal tuning", "same budget for every method",
                     f"tuned: {', '.join(done)}; preset values: {', '.join(left) or '-'}"
                     + (f"; trial counts {sorted(trials)}" if len(trials) > 1 else ""), False)
    return Check("equal tuning", "same budget for every method",
                 f"every method tuned by `fgx tune {name}` ({trials.pop() if trials else '?'} trials each)", True)


def collect(conf: Path, name: str, run_root: Path, command: str) -> tuple[list[dict], dict, list[str]]:
    """Record entries for the completed runs under ``run_root`` that are cells of the table as the
    preset defines them (a run whose config was changed by extra overrides is not a table cell)."""
    from omegaconf import OmegaConf

    from fgx.config import config_fingerprint
    from fgx.report.records import provenance, run_entry
    from fgx.report.runs import find_runs

    keys, prov = sweep_keys(conf, name), provenance(command)
    entries, configs, refused = [], {}, []
    for run in find_runs([run_root]):
        if run.status != "completed":
            continue
        cell = {k: v for k, v in run.overrides.items() if k in keys and k != "seed"}
        want, want_sha = cell_config(name, cell)
        if run.summary.get("config_sha") != want_sha:
            got = config_fingerprint(OmegaConf.load(run.path / ".hydra" / "config.yaml"))[0]
            diff = [k for k in sorted(set(_flat(want)) | set(_flat(got))) if _flat(want).get(k) != _flat(got).get(k)]
            refused.append(f"{run.path.name} ({', '.join(diff[:4]) or 'config'} differ from the preset)")
            continue
        configs[want_sha] = want
        entries.append(run_entry(run, prov))
    return entries, configs, refused


def _flat(d: dict) -> dict:
    from fgx.loggers import flatten
    return flatten(d)


def reproduce(conf: Path, name: str, out: Path | None = None, overrides: list[str] | None = None,
              existing: Path | None = None, record: bool = True) -> ReproResult:
    """Run the table (or compare runs that exist), write its record and compute its status."""
    from fgx.report.records import load_record, merge, provenance, write_record

    t = load_targets(conf, name)
    out = Path(out) if out else Path("outputs") / "repro" / name / _stamp()
    command = " ".join(["fgx repro", name, *(overrides or [])])
    if t["accounting"] is not None:
        res = run_accounting(name, t, out)
        if record:
            res.record = {"table": name, "targets_sha": targets_sha(t), **provenance(command),
                          "accounting": {"table_markdown": res.table_markdown,
                                         "checks": [c.__dict__ for c in res.checks]}}
            res.files.append(write_record(conf, name, res.record))
        res.files += _write(res, out, res.extra)
        return res
    if existing is not None:       # compare runs made elsewhere: shown, never recorded
        res = table_from_runs(name, t, _runs(Path(existing)))
        res.files += _plot(name, t, Path(existing), res.extra.get("metric"))
        res.files += _write(res, Path(existing), res.extra)
        return res
    from fgx.cli import cmd_run

    # resume=true: in an output directory that already holds some of the table's runs (an interrupted
    # `fgx repro NAME --out DIR`), completed jobs with the same config are kept, not run again
    cmd_run(["-m", f"+experiment={name}", f"hydra.sweep.dir={out}", "resume=true", *(overrides or [])])
    entries, configs, refused = collect(conf, name, out, command)
    if record and entries:
        path = write_record(conf, name, merge(load_record(conf, name), name, entries, configs))
        res = record_result(conf, name, t)
        res.files.append(path)
    else:
        res = table_from_runs(name, t, _runs(out))
    if refused:
        res.problems = (res.problems + "\n" if res.problems else "") + \
            "not recorded (not a cell of the table as the preset defines it): " + "; ".join(refused)
    res.files += _plot(name, t, out, res.extra.get("metric"))
    res.files += _write(res, out, res.extra)
    return res


def _runs(root: Path) -> list:
    from fgx.report.runs import find_runs
    return find_runs([root])


# ---------------------------------------------------------------------------------------- docs
def reproduction_markdown(conf: Path) -> str:
    """docs/REPRODUCTION.md, from the committed records (results/*.json) and the targets alone."""
    from fgx.report.table import to_markdown

    entries = []
    for name in table_names(conf):
        t = load_targets(conf, name)
        entries.append((t.get("paper", "?"), t.get("item", "?"), name, t, record_result(conf, name, t)))
    jobs = table_job_counts(conf, [name for _, _, name, t, _ in entries if t["accounting"] is None])
    papers: dict[str, list] = {}
    for e in entries:
        papers.setdefault(e[0], []).append(e)
    out = ["# Reproducing the papers", "",
           "Generated by `fgx repro --docs docs/REPRODUCTION.md` from the committed records `results/*.json` and",
           "the checks in `conf/targets/*.yaml`; do not edit by hand. Every number here comes from a record that",
           "`fgx repro NAME` wrote (the command, commit, date and machine are in the record). A status is computed:",
           "**reproduced** = every check holds; **not reproduced** = some check fails (its numbers are shown);",
           "**stale** = the preset changed since the record was made; **not yet run** = no record;",
           "**shown only** = the table has no checks (e.g. held-out paper values).", "",
           "*Data*: **real** = the paper's dataset; **generated** = an offline stand-in generator (orderings, not",
           "absolute numbers, are comparable); **scaled** = the real data with a smaller budget (fewer rounds or",
           "clients) than the paper; **substitute** = another real dataset in place of the paper's (offline);",
           "**accounting** = pure arithmetic, exact.", "",
           "*Command*: its comment says how many runs the table makes and how long the recorded ones took (their",
           "wall times summed, on the record's machine); `fgx repro NAME --dry-run` checks every job without",
           "running it, and `fgx repro NAME method=a,b seed=0` runs part of a table.", ""]
    for paper in sorted(papers):
        out += [f"## {paper}", ""]
        rows = []
        for _, item, name, t, res in sorted(papers[paper], key=lambda e: (e[1], e[2])):
            rows.append([item, t.get("data", "?"), f"**{res.status}**", res.verdict if res.record else "-",
                         f"`fgx repro {name}{_cost_mark(t, res, jobs.get(name))}`"])
        out += [to_markdown(["item", "data", "status", "checks", "command"], rows), ""]
        for _, item, name, t, res in sorted(papers[paper], key=lambda e: (e[1], e[2])):
            if res.record is None:
                continue
            out += [f"### {item} — `{name}`", "", _provenance_line(res.record), "", markdown(res, heading=False), ""]
    return "\n".join(out)


def table_sweeps(conf: Path, names: list[str]) -> dict[str, dict[str, list[str]] | int]:
    """Each table's sweep as Hydra's basic sweeper expands it: key -> its values (an Optuna table: its
    trial budget), composed under one Hydra initialisation (~0.1 s a table)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.initialize import get_gh_backup, restore_gh_from_backup

    parser = OverridesParser.create()
    sweeps: dict[str, dict[str, list[str]] | int] = {}
    backup = get_gh_backup()      # a caller's Hydra (the docs test's) is put back as it was
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(conf.resolve()), version_base="1.3"):
            for name in names:
                sweeper = compose(config_name="config", overrides=[f"+experiment={name}"],
                                  return_hydra_config=True).hydra.sweeper
                if not sweeper.get("_target_", "").endswith("BasicSweeper"):
                    sweeps[name] = int(sweeper.get("n_trials") or 1)
                    continue
                params = parser.parse_overrides([f"{k}={v}" for k, v in (sweeper.get("params") or {}).items()])
                sweeps[name] = {o.get_key_element(): [str(v) for v in o.sweep_string_iterator()]
                                if o.is_sweep_override() else [str(o.value())] for o in params}
    finally:
        restore_gh_from_backup(backup)
    return sweeps


def table_job_counts(conf: Path, names: list[str]) -> dict[str, int]:
    """How many runs each table's multirun makes (an Optuna table: its trial budget)."""
    import math

    return {name: sweep if isinstance(sweep, int) else math.prod(len(v) for v in sweep.values())
            for name, sweep in table_sweeps(conf, names).items()}


def _cost_mark(t: dict, res: ReproResult, jobs: int | None) -> str:
    """The docs test's full-scale mark for a table that trains (an accounting table is cheap and runs):
    its runs and, where a record exists, the time they took (the runs' own wall times, summed)."""
    if t["accounting"] is not None or jobs is None:
        return ""
    walls = [r.get("summary", {}).get("wall_time_s") for r in (res.record or {}).get("runs", [])]
    walls = [w for w in walls if isinstance(w, (int, float))]
    if not walls:
        return f"  # [full scale: {jobs} runs, time not yet measured]"
    total = sum(walls)
    took = f"~{total / 3600:.1f} h" if total >= 5400 else f"~{max(1, round(total / 60))} min" if total >= 60 \
        else f"~{round(total)} s"
    return f"  # [full scale: {jobs} runs, {took} measured]"


def _provenance_line(record: dict) -> str:
    runs = record.get("runs") or [record]
    commits = sorted({r.get("commit") or "?" for r in runs})
    dates = sorted(r.get("date", "?")[:10] for r in runs)
    machines = sorted({f"{(r.get('machine') or {}).get('cpu', '?')}, {(r.get('machine') or {}).get('cores', '?')} cores"
                       for r in runs})
    dirty = " (uncommitted changes)" if any(r.get("dirty") for r in runs) else ""
    span = dates[0] if dates[0] == dates[-1] else f"{dates[0]} … {dates[-1]}"
    return (f"Record `results/{record['table']}.json`: {len(runs)} run(s), {span}, commit {', '.join(commits)}{dirty}; "
            f"{'; '.join(machines)}.")
