"""Running a table: ``fgx repro NAME`` launches the preset's sweep as one Hydra multirun (through
fgx.launch, the library call `fgx run` uses), collects the completed cells into a record with each
run's own provenance, and computes the table's checks and status from that record.

Records are the project's evidence: they are written into the repository (``results/NAME.json``)
only when asked (``fgx repro NAME --record``); otherwise a run's record goes into its output folder
(``<out>/NAME.json``), so a user's reruns never edit the project's records.
"""
from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

from fgx.provenance import launched_by
from fgx.tables.accounting import run_accounting
from fgx.tables.errors import TablesError
from fgx.tables.checks import (Check, ReproResult, effort_check, equal_rows_checks, progress_notes, row_key,
                               table_from_runs)
from fgx.tables.render import markdown
from fgx.tables.records import (code_staleness, data_staleness, kernel_sets, load_record, merge, provenance,
                                run_entry,
                                update_record, write_record)
from fgx.tables.seeds import seeds_note
from fgx.tables.spec import cell_config, load_targets, sweep_keys, table_sweep, table_sweeps, targets_sha


OFFLINE_DATA = "../shared/data"      # the data root beside the checkout, as the tests and CI use it


def _stamp() -> str:
    return time.strftime("%Y-%m-%d_%H-%M-%S")


def stale_cells(conf: Path, name: str, record: dict) -> list[str]:
    """Cells of the record whose config differs from what the preset resolves to now. How the table is
    tuned (``table.tune``: its grid, seeds, hinge keys) is not what a cell computes: a change there leaves
    the cells as they are (the equal-effort check judges the tuning)."""
    keys = sweep_keys(conf, name)
    stale, cache = [], {}
    configs = record.get("configs") or {}
    for e in record.get("runs", []):
        cell = {k: v for k, v in e["overrides"].items() if k in keys and k != "seed"}
        label = " ".join(f"{k}={v}" for k, v in cell.items()) or name
        ck = json.dumps(cell, sort_keys=True)
        if ck not in cache:
            try:
                cache[ck] = cell_config(name, cell)
            except Exception as exc:  # noqa: BLE001 - a cell that no longer composes is stale, with the reason
                cache[ck] = ({}, f"error: {exc}")
        want, sha = cache[ck]
        same = sha == e.get("config_sha") or (
            e.get("config_sha") in configs and _without_tuning(configs[e["config_sha"]]) == _without_tuning(want))
        if not same and label not in stale:
            stale.append(label)
    return stale


def _without_tuning(config: dict) -> str:
    c = json.loads(json.dumps(config, default=str))
    if isinstance(c.get("table"), dict):
        c["table"].pop("tune", None)
    return json.dumps(c, sort_keys=True)


def missing_cells(conf: Path, name: str, record: dict) -> list[str]:
    """Cells the preset's sweep runs that the record lacks: a seed or a row added to the preset after the
    record was made. Without this a record of 3 seeds would read as the 5-seed table the preset names."""
    sweep = table_sweeps(conf, [name])[name]
    if isinstance(sweep, int):          # an Optuna table: its trials are not a fixed grid
        return []
    keys = list(sweep)
    have = {tuple(_sweep_value(e.get("overrides", {}).get(k)) for k in keys) for e in record.get("runs", [])}
    return [" ".join(f"{k}={v}" for k, v in zip(keys, combo))
            for combo in itertools.product(*(sweep[k] for k in keys))
            if tuple(_sweep_value(v) for v in combo) not in have]


LACKS_NOTE = "runs the preset sweeps but the record lacks: "


def _missing_note(name: str, missing: list[str]) -> str:
    shown = ", ".join(missing[:3]) + (f" … ({len(missing)} in all)" if len(missing) > 3 else "")
    return f"{LACKS_NOTE}{shown}; `fgx repro {name} --record` runs them"


def _preset_table(name: str) -> dict:
    from omegaconf import OmegaConf

    from fgx.launch import compose

    cfg = compose([f"+experiment={name}"])
    return OmegaConf.to_container(cfg.table, resolve=True) if cfg.get("table") is not None else {}


def result_of_record(conf: Path, name: str, record: dict | None, t: dict | None = None,
                     check_stale: bool = True) -> ReproResult:
    """A table's result computed from a record alone (no record: 'not yet run'). Stale when a cell's
    config, a source file or library its runs used, or (accounting) the targets changed since."""
    t = t or load_targets(conf, name)
    if record is None:
        return ReproResult(name, t, "(no record yet: run `fgx repro " + name + " --record`)")
    if "accounting" in record:
        acc = record["accounting"]
        res = ReproResult(name, t, acc["table_markdown"], [Check(**c) for c in acc["checks"]], record=record)
        if check_stale and record.get("targets_sha") != targets_sha(t):
            res.stale = ["the targets (changed since the record)"]
        return res
    from fgx.tables.records import record_runs

    res = table_from_runs(name, t, record_runs(record))
    res.record = record
    sweep = table_sweep(name)
    if check_stale:
        res.stale = [f"config of {c}" for c in stale_cells(conf, name, record)]
        res.stale += [f"code: {c}" for c in code_staleness(record)]
        changed, unknown = data_staleness(record, Path(conf).resolve().parent / OFFLINE_DATA)
        res.stale += changed
        res.notes += [unknown] if unknown else []
        missing = missing_cells(conf, name, record)
        if missing:
            res.stale.append(_missing_note(name, missing))
    preset = _preset_table(name)
    effort = effort_check(conf, name, record, t, preset.get("tune") or {}, sweep, preset.get("tuned_from"))
    if effort is not None:
        res.checks.append(effort)
    res.checks += equal_rows_checks(record, sweep)
    note, res.extra["seeds"] = seeds_note(record, sweep, preset.get("seeds_rule"))
    res.notes += ([note] if note else []) + progress_notes(record, sweep)
    kern = kernel_sets(record)
    if kern:
        res.notes.append(("CPU kernels: " if len(kern) == 1 else f"CPU kernels, {len(kern)} sets among the runs "
                          f"(numbers may differ at floating-point level between them): ") + "; ".join(kern) + ".")
    return res


def record_result(conf: Path, name: str, t: dict | None = None, check_stale: bool = True) -> ReproResult:
    """A table's result from its committed record (results/NAME.json)."""
    return result_of_record(conf, name, load_record(conf, name), t, check_stale)


def identical_rows(name: str) -> list[str]:
    """Rows of the table that cannot differ from another: an algorithm whose resolved settings reduce it
    to a simpler method (GCFL that never splits, FedProx with one local step: ``reduces_to``), or two
    rows that resolve to the same config apart from their name."""
    from fgx.config import ConfigError, config_fingerprint, validate
    from fgx.launch import compose

    sweep = table_sweep(name)
    key = row_key(sweep)
    if key is None:
        return []
    problems, seen = [], {}
    for value in [v.strip() for v in str(sweep[key]).split(",") if v.strip()]:
        # device=cpu: whether rows can differ does not depend on where they run (a GPU preset on a CPU machine)
        cfg = compose([f"+experiment={name}", f"{key}={value}", "device=cpu"])
        try:
            v = validate(cfg)
        except ConfigError as e:           # e.g. GCFL whose warm-up outlasts the run
            problems.append(f"{key}={value}: {e}")
            continue
        why = v.entries["algorithm"].obj.reduces_to(v.params["algorithm"], v.top)
        if why:
            problems.append(f"{key}={value} is {why}")
        c, _ = config_fingerprint(cfg)
        c.pop("method", None)
        sha = json.dumps(c, sort_keys=True, default=str)
        if sha in seen:
            problems.append(f"{key}={value} resolves to the same config as {key}={seen[sha]}")
        seen.setdefault(sha, value)
    return problems


def collect(conf: Path, name: str, run_root: Path, command: str) -> tuple[list[dict], dict, list[str]]:
    """Record entries for the completed and the diverged runs under ``run_root`` that are cells of the
    table as the preset defines them (a run whose config was changed by extra overrides is not a table
    cell). A diverged run is a cell: it replaces an earlier run of that cell, so a record says what today's
    code does there (the tables leave it out of every mean and say so); failed or unfinished runs are not."""
    from omegaconf import OmegaConf

    from fgx.config import config_fingerprint
    from fgx.report.runs import find_runs

    keys, prov = sweep_keys(conf, name), provenance(command)
    entries, configs, refused = [], {}, []
    for run in find_runs([run_root]):
        if run.status not in ("completed", "diverged"):
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
              existing: Path | None = None, record: bool = False) -> ReproResult:
    """Run the table (or compare runs that exist), write its record and compute its status.
    ``record``: merge into the project's record results/NAME.json; otherwise the record of this
    invocation is written into the output folder only."""
    from fgx.launch import run as launch

    t = load_targets(conf, name)
    out = Path(out) if out else Path("outputs") / "repro" / name / _stamp()
    command = " ".join(["fgx repro", name, *(overrides or []), *(["--record"] if record else [])])
    if t["accounting"] is not None:
        res = run_accounting(name, t, out)
        res.record = {"table": name, "targets_sha": targets_sha(t), **provenance(command),
                      "accounting": {"table_markdown": res.table_markdown,
                                     "checks": [c.as_dict() for c in res.checks]}}
        res.files.append(write_record(conf, name, res.record) if record else _write_local(out, name, res.record))
        res.files += _write(res, out, res.extra)
        return res
    if existing is not None:       # compare runs made elsewhere: shown, never recorded
        res = table_from_runs(name, t, _runs(Path(existing)))
        res.files += _plot(name, t, Path(existing), res.extra.get("metric"))
        res.files += _write(res, Path(existing), res.extra)
        return res
    same = identical_rows(name)
    if same:
        raise TablesError(f"{name}: rows that cannot differ from another row: {'; '.join(same)}. Change the "
                          f"preset (e.g. a GCFL warm-up that ends inside the run, FedProx with several local steps)")
    # resume=true: in an output directory that already holds some of the table's runs (an interrupted
    # `fgx repro NAME --out DIR`), completed jobs with the same config are kept, not run again
    with launched_by(command):
        launch(["-m", f"+experiment={name}", f"hydra.sweep.dir={out}", "resume=true", *(overrides or [])])
    entries, configs, refused = collect(conf, name, out, command)
    # an --out that already holds other cells (e.g. a spot check's reruns) lends this command the runs it
    # asked for; the others are not merged: their record entries keep the runs that made them
    asked = asked_cells(overrides, sweep_keys(conf, name))
    others = [e for e in entries if not all(_sweep_value(e["overrides"].get(k)) in vs for k, vs in asked.items())]
    if others:
        entries = [e for e in entries if e not in others]
        configs = {e["config_sha"]: configs[e["config_sha"]] for e in entries}
    if entries:
        merged_with = lambda base: drop_retired_cells(merge(base, name, entries, configs), table_sweep(name))
        if record:      # read, merge and write under the record's lock: parallel --record jobs all land
            merged, path = update_record(conf, name, merged_with)
        else:
            merged = merged_with(None)
            path = _write_local(out, name, merged)
        res = result_of_record(conf, name, merged, t)
        res.files.append(path)
    else:
        res = table_from_runs(name, t, _runs(out))
    if refused:
        res.problems = (res.problems + "\n" if res.problems else "") + \
            "not recorded (not a cell of the table as the preset defines it): " + "; ".join(refused)
    if others:
        res.notes.append(f"{len(others)} completed run(s) in {out} are cells this command did not ask for "
                         f"({', '.join(sorted({' '.join(f'{k}={v}' for k, v in e['overrides'].items()) for e in others})[:3])}"
                         f"{', ...' if len(others) > 3 else ''}); not merged")
    res.files += _plot(name, t, out, res.extra.get("metric"))
    res.files += _write(res, out, res.extra)
    return res


def asked_cells(overrides: list[str] | None, keys) -> dict[str, set]:
    """The values of the table's swept keys that a command's overrides name (``method=a,b seed=2``):
    ``{key: {values}}``; a key the command leaves to the preset is not in it."""
    asked = {}
    for o in overrides or []:
        k, eq, v = o.partition("=")
        if eq and k in keys and "(" not in v:
            asked[k] = {_sweep_value(x) for x in v.split(",")}
    return asked


def _sweep_value(x) -> float | str:
    """A swept value as the run's override and the preset may spell it: ``1e-5`` and ``1e-05`` alike."""
    x = str(x).strip()
    try:
        return float(x)
    except ValueError:
        return x


def drop_retired_cells(record: dict, sweep: dict) -> dict:
    """The record without runs of rows the table no longer sweeps: a value removed from a swept list (a
    method taken out of the preset), or a run without one of the keys the table sweeps now (its rows
    were keyed by ``algorithm`` before the table swept ``method``). A record holds the cells of the
    table as it is now. Sweeps in another syntax than a list are kept as they are."""
    allowed = {k: {_sweep_value(x) for x in str(v).split(",")} for k, v in sweep.items()
               if k != "seed" and "(" not in str(v)}
    runs = [e for e in record.get("runs", [])
            if all(k in e.get("overrides", {}) and _sweep_value(e["overrides"][k]) in vs for k, vs in allowed.items())]
    used = {e.get("config_sha") for e in runs}
    return {**record, "runs": runs, "configs": {s: c for s, c in record.get("configs", {}).items() if s in used}}


def _write_local(out: Path, name: str, rec: dict) -> Path:
    from fgx.outputs import atomic_write_bytes, dumps

    p = Path(out) / f"{name}.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(p, (dumps(rec) + "\n").encode())
    return p


def _runs(root: Path) -> list:
    from fgx.report.runs import find_runs
    return find_runs([root])


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
                                 "checks": [c.as_dict() for c in res.checks], "notes": res.notes, **extra})
    atomic_write_bytes(rd.file("repro.md"), (markdown(res) + "\n").encode())
    return [rd.file("repro.json"), rd.file("repro.md")]
