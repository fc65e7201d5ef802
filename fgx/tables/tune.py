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

Every grid point of every method is one run per tuning seed (at least two seeds: one seed's noise picks
the optimum otherwise), as a Hydra multirun per method, so any Hydra launcher parallelises it; the point
with the best mean validation score wins (the first in grid order on a tie). A numeric value chosen at
an open edge of its grid (its smallest or largest value, not a physical bound: 0, or a bound the
preset's ``table.tune.bounds`` gives) means the optimum may lie outside: the grid grows past that edge by
the ratio of its two outermost values and the new points run, until the choice is interior or sits on a
physical bound, at most ``table.tune.max_grow`` times (default 3). A choice still at an open edge is
kept in the tune record (``open_edges``) and fails the table's equal-effort check. The chosen values go
into ``conf/tuned/TABLE/METHOD.yaml``, which the table loads after the method's own file
(``optional /tuned/TABLE@_global_: ${method}`` in its defaults), with a comment naming the command;
every trial goes into ``results/TABLE.tune.json``."""
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
MIN_SEEDS = 2
MAX_GROW = 3
# physical bounds of common knobs (a choice there is not an open edge): a rate or a penalty cannot go
# below 0, a dropout probability or UniFilter's tau above 1; ``table.tune.bounds`` adds or overrides
BOUNDS = {"weight_decay": (0.0, None), "dropout": (0.0, 1.0), "mu": (0.0, None), "eps1": (0.0, None),
          "eps2": (0.0, None), "tau": (0.0, 1.0)}


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
    if len(spec["seeds"]) < MIN_SEEDS:
        raise TablesError(f"{name}: table.tune.seeds={spec['seeds']}: tuning needs at least {MIN_SEEDS} seeds (one "
                          f"seed's noise would pick the optimum; docs/tables.md)")
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
            "grows": f"past an open edge, up to {spec.get('max_grow', MAX_GROW)} times",
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
        base_points = len(g.points)
        trials, best, grown = _run_grid(name, m, g, g.points, spec, out / m, command, overrides)
        for step in range(int(spec.get("max_grow", MAX_GROW))):
            edges = open_edges(g, best["values"], spec.get("bounds"))
            if not edges:
                break
            old_points = {json.dumps(p, sort_keys=True) for p in g.points}
            g = grow(g, best["values"], edges, spec.get("bounds"))
            new = [p for p in g.points if json.dumps(p, sort_keys=True) not in old_points]
            more, best, _ = _run_grid(name, m, g, new, spec, out / m / f"grow{step + 1}", command, overrides,
                                      earlier=trials)
            trials += more
            grown.append({"step": step + 1, "keys": edges, "grid": dict(zip(g.keys, g.values))})
        write_tuned(conf, name, m, best, g, spec, len(trials), prov)
        entry = {**plan["methods"][m], "grid": dict(zip(g.keys, g.values)), "base_points": base_points,
                 "trials": trials, "chosen": best["values"], "val": best["val"], "select": spec["select"],
                 "seeds": spec["seeds"], "hinge": hinge[m], "grown": grown,
                 "open_edges": open_edges(g, best["values"], spec.get("bounds")),
                 "at_edge": at_edge(g, best["values"]), **prov}
        # re-read under the lock: another `fgx tune --methods` of this table may have written since
        tune_record, _ = update_record(conf, f"{name}.tune", lambda r, m=m, entry=entry: {
            **(r or {"table": name}), "methods": {**(r or {}).get("methods", {}), m: entry}})
    return tune_record


def _run_grid(name: str, m: str, g: Grid, points: list[dict], spec: dict, out: Path, command: str,
              overrides: list[str], earlier: list[dict] | None = None) -> tuple[list[dict], dict, list]:
    """Run ``points`` of method ``m`` on the tuning seeds (one multirun per point, so a grown grid runs
    only its new points), and return their trials and the best trial among them and ``earlier``."""
    from fgx.launch import run as launch
    from fgx.metrics import LOWER_IS_BETTER
    from fgx.provenance import launched_by
    from fgx.report.runs import find_runs

    for i, point in enumerate(points):
        with launched_by(command):
            launch(["-m", f"+experiment={name}", f"method={m}", f"seed={','.join(str(s) for s in spec['seeds'])}",
                    *[f"{k}={_fmt(v)}" for k, v in point.items()], f"hydra.sweep.dir={out / f'p{i}'}",
                    # one directory per trial (a table's own subdir, e.g. ${method}_s${seed}, would be shared by
                    # every grid point of a method); resume=true skips finished trials
                    "hydra.sweep.subdir=t${hydra.job.num}", "resume=true", *overrides])
    found = find_runs([out])
    runs = [r for r in found if r.status == "completed"]
    trials = []
    for point in points:
        at = lambda r: all(same_value(r.overrides.get(k), v) for k, v in point.items())
        hit = [r for r in runs if at(r)]
        # a point where a seed diverged ran, and lost: it is a trial (val None, marked), never the choice
        gone = sorted(int(r.seed) for r in found if r.status == "diverged" and at(r))
        vals = [score(r.summary, spec["select"]) for r in hit]
        vals = [v for v in vals if v is not None]
        trial = {"values": point, "val": None if gone or not vals else sum(vals) / len(vals),
                 "seeds": sorted([int(r.seed) for r in hit] + gone)}
        trials.append({**trial, "diverged": gone} if gone else trial)
    ran = [t for t in trials if len(t["seeds"]) == len(spec["seeds"]) and (t["val"] is not None or t.get("diverged"))]
    if len(ran) < len(trials):
        raise TablesError(f"{name}/{m}: {len(trials) - len(ran)} of {len(trials)} trials did not complete "
                          f"(see {out}); nothing written for this method")
    done = [t for t in ran if t["val"] is not None]
    if not done and not earlier:
        raise TablesError(f"{name}/{m}: every trial diverged (see {out}); widen the grid towards smaller "
                          f"steps; nothing written for this method")
    metric = next((r.summary.get("main_metric") for r in runs if r.summary.get("main_metric")), None)
    sign = -1.0 if metric in LOWER_IS_BETTER else 1.0    # mse & co.: the smallest validation value wins
    pool = [t for t in earlier or [] if t["val"] is not None] + done
    best = max(pool, key=lambda t: sign * t["val"])      # max() keeps the first of equal values: grid order
    return trials, best, []


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


def _bound(key: str, bounds: dict | None) -> tuple[float | None, float | None]:
    leaf = key.rsplit(".", 1)[-1]
    b = (bounds or {}).get(key) or (bounds or {}).get(leaf) or BOUNDS.get(leaf) or (None, None)
    return (None if b[0] is None else float(b[0]), None if b[1] is None else float(b[1]))


def open_edges(grid: Grid, chosen: dict[str, Any], bounds: dict | None = None) -> list[str]:
    """Numeric keys of two or more values whose chosen value is the smallest or largest tried and not a
    physical bound (0, or the key's bound): the optimum may lie outside the grid."""
    out = []
    for k, vals in zip(grid.keys, grid.values):
        nums = sorted({float(v) for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool)})
        v = chosen.get(k)
        if len(nums) < 2 or len(nums) != len(set(vals)) or not isinstance(v, (int, float)) or isinstance(v, bool):
            continue
        low, high = _bound(k, bounds)
        if v == nums[0] and v != 0 and v != low:
            out.append(k)
        elif v == nums[-1] and v != high:
            out.append(k)
    return out


def grow(grid: Grid, chosen: dict[str, Any], keys: list[str], bounds: dict | None = None) -> Grid:
    """The grid with one more value past the chosen edge of each of ``keys``: the outermost value times
    the ratio of the two outermost (a grid ending at 0 grows by 5x from its other value), clipped to the
    key's bound; integer keys stay integers."""
    values = [list(v) for v in grid.values]
    for k in keys:
        i = grid.keys.index(k)
        nums = sorted({float(v) for v in values[i]})
        v = float(chosen[k])
        low, high = _bound(k, bounds)
        if v == nums[-1]:
            ratio = nums[-1] / nums[-2] if nums[-2] > 0 else 5.0
            new = v * ratio if v > 0 else v + (nums[-1] - nums[-2])
            new = min(new, high) if high is not None else new
        else:
            ratio = nums[1] / nums[0] if nums[0] > 0 else 5.0
            new = v / ratio if v > 0 else v - (nums[1] - nums[0])
            new = max(new, low) if low is not None else new
        if all(isinstance(x, int) and not isinstance(x, bool) for x in values[i]):
            new = int(round(new)) if int(round(new)) not in values[i] else int(new + (1 if v == nums[-1] else -1))
        else:
            new = _round(new)
        if new not in values[i]:
            values[i] = sorted(values[i] + [new])
    return Grid(list(grid.keys), values, grid.source)


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
