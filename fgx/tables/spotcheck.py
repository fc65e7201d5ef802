"""``fgx repro NAME --spot-check``: rerun one seed of every row of a stale record and, when each rerun
gives the recorded numbers, carry the record over to the code (and config) of today.

A record goes stale whenever a module its runs imported changes, also when the change computes the
same thing (a refactor, a new option whose default keeps the old behaviour). Rerunning every seed of
every row to prove that costs the table's full compute; fgx runs are deterministic on CPU for a seed,
so one seed per row rerun under today's code is the test: every recorded metric of that seed equal
within ``TOLERANCE`` (thread-count rounding), every row. Then each run of the record keeps its numbers
and its own command and date, takes today's code fingerprint and config fingerprint, and says how it
was carried over (``verified``). One differing number and nothing is written: the table must be rerun.

One kind of number may be missing from a rerun without being a difference: a metric fgx computes on
binary tasks only (``fgx.metrics.BINARY_ONLY``: f1_minority, pr_auc) that older code also reported on
multi-class tasks, where it means nothing. A rerun that reports none of those metrics at a model state
ran a multi-class task; the recorded ones there are retired: dropped from every run of that row, and
named in ``verified.retired``.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from fgx.tables.errors import TablesError
from fgx.tables.records import (code_staleness, load_record, portable, provenance, record_lock, run_kernels,
                                write_record)

TOLERANCE = 1e-6      # absolute, on metrics in [0, 1] or losses of order 1: far below any reported digit
COMPARED = ("final", "best", "best_client", "diverged")   # a diverged run: also where and at what loss


@dataclass
class SpotCheck:
    name: str
    seed: str
    compared: int = 0                                      # runs compared (one per row)
    numbers: int = 0                                       # numbers compared in all
    max_diff: float = 0.0
    differences: list[str] = field(default_factory=list)   # "row: metric recorded → now"
    retired: list[str] = field(default_factory=list)       # "row: metrics" dropped (binary-only, multi-class task)
    missing: list[str] = field(default_factory=list)       # rows without a rerun (it failed or did not finish)
    # differing rows whose recorded run used other CPU kernels than the rerun: "row: recorded X, here Y"
    other_kernels: list[str] = field(default_factory=list)
    written: Path | None = None

    @property
    def ok(self) -> bool:
        return self.compared > 0 and not self.differences and not self.missing


def _numbers(summary: dict) -> dict[str, float]:
    from fgx.loggers import flatten

    out = {}
    for key in COMPARED:
        if isinstance(summary.get(key), dict):
            for k, v in flatten(summary[key]).items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    out[f"{key}.{k}"] = float(v)
    return out


def compare(recorded: dict, rerun: dict) -> tuple[int, float, list[str]]:
    """Numbers compared, the largest absolute difference, and each recorded number that differs or that
    the rerun lacks between a recorded summary and its rerun's. A number only the rerun has is a metric
    the code computes now and the record predates (pr_auc, issue #72): nothing recorded to compare."""
    a, b = _numbers(recorded), _numbers(rerun)
    diffs, worst = [], 0.0
    status = [s.get("status", "completed") for s in (recorded, rerun)]
    if status[0] != status[1]:      # a run that completed and now diverges (or back) is not the same run
        diffs.append(f"status {status[0]} → {status[1]}")
        worst = math.inf
    skipped = _retired_keys(a, b)
    for k in sorted(a):
        if k in skipped:
            continue
        if k not in b:
            diffs.append(f"{k} only recorded")
            continue
        if math.isnan(a[k]) and math.isnan(b[k]):
            continue
        d = abs(a[k] - b[k])
        worst = max(worst, d if d == d else math.inf)
        if not d <= TOLERANCE:
            diffs.append(f"{k} {a[k]:.6g} → {b[k]:.6g}")
    return len(a) - len(skipped), worst, diffs


def retired(recorded: dict, rerun: dict) -> set[str]:
    """The binary-only metrics the record holds at a model state where the rerun reports none of them
    (today's code ran a multi-class task there: the recorded numbers were never meaningful)."""
    return {k.rpartition(".")[2] for k in _retired_keys(_numbers(recorded), _numbers(rerun))}


def _retired_keys(a: dict[str, float], b: dict[str, float]) -> set[str]:
    from fgx.metrics import BINARY_ONLY

    out = set()
    for k in a:
        state, _, metric = k.rpartition(".")
        if metric in BINARY_ONLY and not any(f"{state}.{m}" in b for m in BINARY_ONLY):
            out.add(k)
    return out


def _drop(node, metrics: set[str]):
    """``node`` without any key named in ``metrics``, at any depth."""
    if isinstance(node, dict):
        return {k: _drop(v, metrics) for k, v in node.items() if k not in metrics}
    return node


def spot_check(conf: Path, name: str, out: Path, seed: str | None = None,
               overrides: list[str] | None = None) -> SpotCheck:
    from fgx.launch import run as launch
    from fgx.provenance import launched_by
    from fgx.tables.run import collect
    from fgx.tables.spec import table_sweep

    record = load_record(conf, name)
    if not record or not record.get("runs"):
        raise TablesError(f"{name}: no record with runs to spot-check; run `fgx repro {name} --record`")
    seeds = [s.strip() for s in str(table_sweep(name).get("seed", "0")).split(",")]
    seed = str(seed if seed is not None else seeds[0])
    ours = [e for e in record["runs"] if str(e["overrides"].get("seed")) == seed]
    if not ours:
        raise TablesError(f"{name}: the record has no run of seed {seed} (its seeds: "
                          f"{sorted({str(e['overrides'].get('seed')) for e in record['runs']})})")
    command = " ".join(["fgx repro", name, f"seed={seed}", *(overrides or []), "--spot-check"])
    with launched_by(command):
        launch(["-m", f"+experiment={name}", f"seed={seed}", f"hydra.sweep.dir={out}", "resume=true",
                *(overrides or [])])
    entries, configs, refused = collect(conf, name, out, command)
    if refused:
        raise TablesError(f"{name}: reruns that are not cells of the table: {'; '.join(refused)}")
    other_code = code_staleness({"runs": entries})
    if other_code:     # a rerun of other code verifies nothing about today's
        raise TablesError(f"{name}: reruns in {out} were made with other code ({'; '.join(other_code[:3])}); "
                          f"spot-check into a fresh --out")
    key = lambda e: json.dumps(e["overrides"], sort_keys=True)
    rerun = {key(e): e for e in entries}
    res = SpotCheck(name, seed)
    gone: dict[str, set[str]] = {}                     # row -> metrics retired there
    row = lambda e: json.dumps({k: v for k, v in e["overrides"].items() if k != "seed"}, sort_keys=True)
    res.missing += sorted({row(e) for e in record["runs"]} - {row(e) for e in ours})   # rows without this seed
    for e in ours:
        label = " ".join(f"{k}={v}" for k, v in e["overrides"].items())
        new = rerun.get(key(e))
        if new is None:
            res.missing.append(label)
            continue
        n, worst, diffs = compare(e["summary"], new["summary"])
        if retired(e["summary"], new["summary"]):
            gone[row(e)] = retired(e["summary"], new["summary"])
            res.retired.append(f"{' '.join(f'{k}={v}' for k, v in json.loads(row(e)).items())}: "
                               f"{', '.join(sorted(gone[row(e)]))}")
        res.compared += 1
        res.numbers += n
        res.max_diff = max(res.max_diff, worst)
        res.differences += [f"{label}: {d}" for d in diffs]
        if diffs and (was := run_kernels(e)) and (now := run_kernels(new)) and was != now:
            res.other_kernels.append(f"{label}: recorded under {was}, rerun under {now}")
    if res.ok:
        with record_lock(conf, name):
            if load_record(conf, name) != record:   # another job recorded into it while the reruns ran
                raise TablesError(f"{name}: results/{name}.json changed while the spot check ran (another "
                                  f"job wrote it); nothing carried over: spot-check again")
            res.written = write_record(conf, name, carried_over(record, rerun, configs, seed,
                                                                stored_command(command, overrides), res, gone))
    return res


def stored_command(command: str, overrides: list[str] | None) -> str:
    """The spot check's command as a record keeps it: its data root written ``<data root>`` (no folder of
    one machine in a committed record, as ``portable`` does for the runs' own commands)."""
    from fgx.config import default_data_dir

    roots = [o.split("=", 1)[1] for o in overrides or [] if o.startswith("data_dir=")] + [str(default_data_dir())]
    return portable({"by": command}, roots)["by"]


def carried_over(record: dict, rerun: dict[str, dict], configs: dict, seed: str, command: str,
                 res: SpotCheck, gone: dict[str, set[str]] | None = None) -> dict:
    """Every run of the record with the code and config fingerprints of its row's rerun; its numbers, own
    command and date are kept (less the metrics ``gone`` retires in its row), and ``verified`` says how it
    was carried over."""
    stamp = provenance(command)
    row = lambda e: json.dumps({k: v for k, v in e["overrides"].items() if k != "seed"}, sort_keys=True)
    by_row = {row(e): e for e in rerun.values()}
    runs = []
    for e in record["runs"]:
        new, drop = by_row[row(e)], sorted((gone or {}).get(row(e), ()))
        runs.append({**e, "summary": _drop(e["summary"], set(drop)), "config_sha": new["config_sha"],
                     "code": new.get("code"),
                     "verified": {"by": command, "seed": seed, "commit": stamp["commit"], "date": stamp["date"],
                                  "rows": res.compared, "numbers": res.numbers, "max_abs_diff": res.max_diff,
                                  **({"retired": drop or e["verified"]["retired"]}
                                     if drop or "retired" in (e.get("verified") or {}) else {})}})
    used = {e["config_sha"] for e in runs}
    return {**record, "runs": runs, "configs": {s: c for s, c in {**record.get("configs", {}), **configs}.items()
                                                if s in used}}
