"""``fgx tune TABLE``: choose every method's hyperparameters of a table on the validation split, with
the same budget for each, and write them where the table reads them.

The table preset says how (``conf/experiment/TABLE.yaml``)::

    table:
      tune:
        seeds: [0]               # tuning seeds (the table's test seeds may include them; only validation is read)
        select: best_client      # best: mean validation at the best round | best_client: each client's best round
        grid:                    # per method name, else per model name, else `default`; every method's grid
          default:               # must have the same number of points (the same budget), or tuning is refused
            algorithm.lr: {times: [0.2, 1.0, 5.0]}          # relative to the method's own value in the table
            algorithm.weight_decay: [1.0e-6, 5.0e-4]        # absolute values

Every grid point of every method is one run per tuning seed (a Hydra multirun per method, so any Hydra
launcher parallelises it); the point with the highest mean validation score wins (the first in grid
order on a tie). The chosen values go into ``conf/tuned/TABLE/METHOD.yaml``, which the table loads
after the method's own file (``optional /tuned/TABLE@_global_: ${method}`` in its defaults), with a
comment naming the command; every trial goes into ``results/TABLE.tune.json``."""
from __future__ import annotations

import itertools
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fgx.report.runs import IGNORED_OVERRIDES
from fgx.tables.errors import TablesError

SELECT = {"best": ("best", "val"), "best_client": ("best_client", "val")}


@dataclass
class Grid:
    keys: list[str]
    values: list[list[Any]]          # per key, the values tried
    source: str                      # which grid entry (method, model or default)

    @property
    def points(self) -> list[dict[str, Any]]:
        return [dict(zip(self.keys, combo)) for combo in itertools.product(*self.values)]


def _compose(name: str, extra: list[str]):
    from fgx.launch import compose
    return compose([f"+experiment={name}", *extra])


def table_methods(conf: Path, name: str) -> list[str]:
    from fgx.tables.spec import table_sweep

    methods = table_sweep(name).get("method")
    if methods is None:
        raise TablesError(f"conf/experiment/{name}.yaml sweeps no `method`: fgx tune tunes a table's methods")
    return [m.strip() for m in str(methods).split(",") if m.strip()]


def tune_spec(name: str) -> dict:
    from omegaconf import OmegaConf

    cfg = _compose(name, [])
    source = cfg.table.get("tuned_from") if cfg.get("table") else None
    if source:
        raise TablesError(f"{name} runs the values tuned for {source} (table.tuned_from): tune that table "
                          f"(`fgx tune {source}`), or drop tuned_from to tune this one")
    spec = OmegaConf.to_container(cfg.table, resolve=True).get("tune") if cfg.get("table") else None
    if not spec or not spec.get("grid"):
        raise TablesError(f"conf/experiment/{name}.yaml has no table.tune.grid: nothing says how to tune it")
    if spec.get("select", "best") not in SELECT:
        raise TablesError(f"{name}: table.tune.select={spec.get('select')!r}; allowed: {list(SELECT)}")
    spec.setdefault("seeds", [0])
    spec.setdefault("select", "best")
    return spec


def method_grid(name: str, method: str, spec: dict) -> Grid:
    """The grid of ``method`` in the table: explicit values, or multiples of the method's own value
    (read from the table without any earlier tuned file)."""
    from omegaconf import OmegaConf

    try:        # the method's own value, without an earlier tuned file (which `~` removes from the defaults)
        base = _compose(name, [f"method={method}", "~tuned@_global_"])
    except Exception:  # noqa: BLE001 - a table without the tuned entry: nothing to remove
        base = _compose(name, [f"method={method}"])
    model = base.model.name
    grids = spec["grid"]
    source = method if method in grids else model if model in grids else "default"
    if source not in grids:
        raise TablesError(f"{name}: table.tune.grid has no entry for method {method!r}, model {model!r} or `default`")
    keys, values = [], []
    for key, vals in grids[source].items():
        if isinstance(vals, dict) and "times" in vals:
            b = OmegaConf.select(base, key)
            if not isinstance(b, (int, float)) or isinstance(b, bool):
                raise TablesError(f"{name}: grid key {key} ({{times: ...}}) needs a numeric value in the table "
                                  f"for method {method}, found {b!r}")
            vals = [_round(b * t) for t in vals["times"]]
        if not isinstance(vals, list) or not vals:
            raise TablesError(f"{name}: grid key {key} of {source!r} must be a list of values or {{times: [...]}}")
        keys.append(key)
        values.append(vals)
    return Grid(keys, values, source)


def _round(x: float) -> float:
    return float(f"{x:.6g}")


def check_overrides(overrides: list[str]) -> None:
    for o in overrides:
        key = o.lstrip("+~").split("=", 1)[0]
        if not (key in IGNORED_OVERRIDES or key.startswith("hydra")):
            raise TablesError(f"fgx tune tunes the table as its preset defines it; {o!r} would change it "
                              f"(allowed: data_dir, device-free bookkeeping and hydra launcher overrides)")


def score(summary: dict, select: str) -> float | None:
    part, key = SELECT[select]
    v = (summary.get(part) or {}).get(key)
    return float(v) if isinstance(v, (int, float)) and v == v else None


def tune(conf: Path, name: str, methods: list[str] | None = None, overrides: list[str] | None = None,
         out: Path | None = None, dry_run: bool = False) -> dict:
    from fgx.launch import run as launch
    from fgx.report.runs import find_runs
    from fgx.tables.records import provenance, update_record

    overrides = list(overrides or [])
    check_overrides(overrides)
    spec = tune_spec(name)
    all_methods = table_methods(conf, name)
    methods = methods or all_methods
    unknown = [m for m in methods if m not in all_methods]
    if unknown:
        raise TablesError(f"{name}: method(s) {unknown} are not in the table; its methods: {all_methods}")
    # the budget is checked over every method of the table, also when only some are (re)tuned now
    grids = {m: method_grid(name, m, spec) for m in all_methods}
    sizes = {m: len(g.points) for m, g in grids.items()}
    if len(set(sizes.values())) != 1:
        raise TablesError(f"{name}: unequal tuning budgets (grid points per method: {sizes}); every method of a "
                          f"table gets a grid of the same size")
    for m in methods:
        old = tuned_path(conf, name, m)
        if old.exists():
            from omegaconf import OmegaConf
            from fgx.loggers import flatten
            extra = sorted(set(flatten(OmegaConf.to_container(OmegaConf.load(old)))) - set(grids[m].keys))
            if extra:
                raise TablesError(f"{old} sets {extra}, which the grid does not tune; remove the file (or those keys) "
                                  f"before tuning again")
    hinge = {m: hinge_keys(name, m, spec, grids[m]) for m in all_methods}
    lacking = {m: [k for k, ok in h.items() if not ok] for m, h in hinge.items() if not all(h.values())}
    if lacking:
        raise TablesError(f"{name}: the grid leaves out a knob the comparison hinges on (table.tune.hinge): "
                          + "; ".join(f"{m}: {', '.join(k)}" for m, k in lacking.items()))
    plan = {"table": name, "select": spec["select"], "seeds": spec["seeds"],
            "trials_per_method": next(iter(sizes.values())) * len(spec["seeds"]),
            "methods": {m: {"grid_source": grids[m].source, "grid": dict(zip(grids[m].keys, grids[m].values))}
                        for m in methods}}
    if dry_run:
        return plan
    out = Path(out) if out else Path("outputs") / "tune" / name / time.strftime("%Y-%m-%d_%H-%M-%S")
    command = " ".join(["fgx tune", name, *(["--methods", ",".join(methods)] if methods != all_methods else []),
                        *overrides])
    prov = provenance(command)
    tune_record = {"table": name, "methods": {}}
    for m in methods:
        g = grids[m]
        sweep = [f"{k}={','.join(_fmt(v) for v in vals)}" for k, vals in zip(g.keys, g.values)]
        from fgx.provenance import launched_by

        with launched_by(command):
            launch(["-m", f"+experiment={name}", f"method={m}", f"seed={','.join(str(s) for s in spec['seeds'])}",
                 *sweep, f"hydra.sweep.dir={out / m}",
                 # one directory per trial (a table's own subdir, e.g. ${method}_s${seed}, would be shared by
                 # every grid point of a method); the job number is stable, so resume=true skips finished trials
                 "hydra.sweep.subdir=t${hydra.job.num}", "resume=true", *overrides])
        trials = []
        runs = [r for r in find_runs([out / m]) if r.status == "completed"]
        for point in g.points:
            hit = [r for r in runs if all(same_value(r.overrides.get(k), v) for k, v in point.items())]
            vals = [score(r.summary, spec["select"]) for r in hit]
            vals = [v for v in vals if v is not None]
            trials.append({"values": point, "val": sum(vals) / len(vals) if vals else None,
                           "seeds": sorted(int(r.seed) for r in hit)})
        done = [t for t in trials if t["val"] is not None and len(t["seeds"]) == len(spec["seeds"])]
        if len(done) < len(trials):
            raise TablesError(f"{name}/{m}: {len(trials) - len(done)} of {len(trials)} trials did not complete "
                              f"(see {out / m}); nothing written for this method")
        from fgx.metrics import LOWER_IS_BETTER

        metric = next((r.summary.get("main_metric") for r in runs if r.summary.get("main_metric")), None)
        sign = -1.0 if metric in LOWER_IS_BETTER else 1.0    # mse & co.: the smallest validation value wins
        best = max(done, key=lambda t: sign * t["val"])  # max() keeps the first of equal values: grid order
        write_tuned(conf, name, m, best, g, spec, len(trials), prov)
        entry = {**plan["methods"][m], "trials": trials, "chosen": best["values"], "val": best["val"],
                 "select": spec["select"], "seeds": spec["seeds"], "hinge": hinge[m],
                 "at_edge": at_edge(g, best["values"]), **prov}
        # re-read under the lock: another `fgx tune --methods` of this table may have written since
        tune_record, _ = update_record(conf, f"{name}.tune", lambda r, m=m, entry=entry: {
            **(r or {"table": name}), "methods": {**(r or {}).get("methods", {}), m: entry}})
    return tune_record


def hinge_keys(name: str, method: str, spec: dict, grid: Grid) -> dict[str, bool]:
    """The ``table.tune.hinge`` entries this method's config has, each with whether its grid tunes it: the
    knob a comparison hinges on (every BPR method's temperature, FedProx's mu) must be searched. An entry
    ``a|b`` names one knob under two keys (the loss temperature: ``bpr_tau`` of a BPR row, ``tau`` of a
    BC row); searching either satisfies it."""
    from omegaconf import OmegaConf

    entries = list(spec.get("hinge") or [])
    if not entries:
        return {}
    base = _compose(name, [f"method={method}"])
    out = {}
    for entry in entries:
        alts = [k.strip() for k in str(entry).split("|")]
        if any(OmegaConf.select(base, k, default=None) is not None for k in alts):
            out[entry] = any(k in grid.keys for k in alts)
    return out


def at_edge(grid: Grid, chosen: dict[str, Any]) -> list[str]:
    """Numeric keys whose chosen value is the smallest or largest of three or more tried: the optimum may
    lie outside the grid (the tune record says so; the equal-effort check shows it)."""
    out = []
    for k, vals in zip(grid.keys, grid.values):
        nums = [v for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if len(nums) >= 3 and len(nums) == len(vals) and chosen.get(k) in (min(nums), max(nums)):
            out.append(k)
    return out


def same_value(a: str | None, b: Any) -> bool:
    if a is None:
        return False
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)
    except (TypeError, ValueError):
        return str(a) == str(b)


def _fmt(v: Any) -> str:
    return repr(v) if isinstance(v, float) else str(v)


def tuned_path(conf: Path, name: str, method: str) -> Path:
    return conf / "tuned" / name / f"{method}.yaml"


def write_tuned(conf: Path, name: str, method: str, best: dict, g: Grid, spec: dict, n: int, prov: dict) -> Path:
    from fgx.outputs import atomic_write_bytes

    grid_txt = " x ".join(f"{k} in {vals}" for k, vals in zip(g.keys, g.values))
    lines = ["# @package _global_",
             f"# {name} / {method}: chosen on the validation split by `{prov['command']}`",
             f"# ({prov['date'][:10]}, commit {prov['commit']}). Grid ({g.source}; every method of the table has one of",
             f"# the same size): {grid_txt}; {n} points x seeds {spec['seeds']}, selected by the {spec['select']} "
             f"validation score ({best['val']:.4f}).",
             f"# Every trial: results/{name}.tune.json"]
    nested: dict = {}
    for key, v in best["values"].items():
        node = nested
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = v

    def emit(node: dict, indent: int) -> None:
        for k, v in node.items():
            if isinstance(v, dict):
                lines.append(" " * indent + f"{k}:")
                emit(v, indent + 2)
            else:
                lines.append(" " * indent + f"{k}: {json.dumps(v)}".ljust(40) + f"# fgx tune {name}")
    emit(nested, 0)
    path = tuned_path(conf, name, method)
    atomic_write_bytes(path, ("\n".join(lines) + "\n").encode())
    return path
