"""A table's specification: its preset (conf/experiment/NAME.yaml: data, protocol, the methods and seeds
it sweeps, ``table:`` values), its targets (conf/targets/NAME.yaml: what the paper reports and which
checks apply) and what its sweep expands to.

A targets file::

    paper: CE-FedGNN            # which source paper
    item: Table 2 (Cora column) # which table or figure
    data: real                  # real | generated (a stand-in generator) | scaled (real, smaller budget)
                                # | substitute (another real dataset in the paper's place) | accounting
    metric: f1_macro            # the column compared (default: the runs' main metric)
    by: [method]                # group keys (default: the keys the sweep varies)
    rows:                       # paper values; `tolerance` (absolute) makes a row a check, null only shows it
      - {where: {method: ce_fedgnn}, paper: 0.4701, tolerance: 0.05}
    ordering:                   # expected order, best first (a >= b >= ...), decided pair by pair on paired seeds
      - {key: method, order: [ce_fedgnn, fedgnn_st, ce_fedgnn_no_sharing]}
      - {key: method, order: [mafalda_sgd, dp_dsgd], where: {algorithm.mu: 1.0}, lower_is_better: true}
      - {key: method, order: [ce_fedgnn, fedgnn_st], metric: accuracy}   # another column than `metric`
    plot: {kind: sweep, x: algorithm.local_steps}   # figures: also written beside the table
    columns: [asr_clean]        # further columns shown beside `metric` and the orderings' (no check)

A targets file never says whether the table reproduces: that is computed from the record
(fgx/tables/checks.py). Presets whose YAML holds an ``accounting:`` block are pure arithmetic
(fgx/tables/accounting.py).

A targets file of a table with several rows (methods) also says how their values were chosen
(``effort``, judged by the equal-effort check, fgx/tables/checks.py): ``tuned`` (every method by
`fgx tune` with the same budget; the preset's ``table.tune.hinge`` lists the knobs every grid must
search), ``shared`` (ablations of one method: every row runs the same optimisation values, checked),
or ``authors`` with ``sources: {method: where its values come from}`` for every method.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from fgx.tables.errors import TablesError

DATA_KINDS = ("real", "generated", "scaled", "substitute", "accounting")


TYPED_VERDICTS = ("status", "measured")     # computed from records; a targets file may not type them


def targets_dir(conf: Path) -> Path:
    return conf / "targets"


def targets_sha(t: dict) -> str:
    return hashlib.sha256(json.dumps({k: v for k, v in t.items() if k != "accounting"}, sort_keys=True,
                                     default=str).encode()).hexdigest()[:16]


def _load_yaml(path: Path, resolve: bool = False):
    """A preset or targets file as plain containers; a malformed file is named, not a YAML traceback."""
    from omegaconf import OmegaConf
    from yaml import YAMLError

    try:
        return OmegaConf.to_container(OmegaConf.load(path), resolve=resolve)
    except YAMLError as e:
        where = getattr(e, "problem_mark", None)
        raise TablesError(f"{path.parent.name}/{path.name}" + (f", line {where.line + 1}" if where else "")
                          + f": not valid YAML ({getattr(e, 'problem', None) or e})") from None


def load_targets(conf: Path, name: str) -> dict:
    """conf/targets/NAME.yaml, or the family targets file the table names (``table.targets`` in
    conf/experiment/NAME.yaml, with ``table.item`` and ``table.data`` saying which row it is, and
    ``table.effort`` how its methods got their values where that row differs from the family)."""
    exp = conf / "experiment" / f"{name}.yaml"
    tf = targets_dir(conf) / f"{name}.yaml"
    if not exp.exists():
        raise TablesError(f"no preset conf/experiment/{name}.yaml; tables: {table_names(conf)}")
    exp_node = _load_yaml(exp)
    row = (exp_node.get("table") or {}) if isinstance(exp_node, dict) else {}
    if tf.exists():
        t = _load_yaml(tf, resolve=True)
    elif row.get("targets") and (targets_dir(conf) / f"{row['targets']}.yaml").exists():
        t = _load_yaml(targets_dir(conf) / f"{row['targets']}.yaml", resolve=True)
        t.pop("family", None)
        t.update({k: row[k] for k in ("item", "data", "scale_note", "effort") if k in row})
        if t.get("effort") != "authors":       # a row tuned on its own: the family's sources no longer apply
            t.pop("sources", None)
    else:
        raise TablesError(f"preset {name!r} has no targets (conf/targets/{name}.yaml or table.targets in its "
                          f"preset); tables: {table_names(conf)}")
    for key in ("paper", "item", "data"):
        if key not in t:
            raise TablesError(f"conf/targets/{name}.yaml: missing key {key!r}")
    typed = [k for k in TYPED_VERDICTS if k in t]
    if typed:
        raise TablesError(f"conf/targets/{name}.yaml: {typed[0]!r} is computed from the record results/{name}.json "
                          f"(`fgx repro {name}`), not written in a targets file; remove it")
    if t["data"] not in DATA_KINDS:
        raise TablesError(f"conf/targets/{name}.yaml: data={t['data']!r}; allowed: {list(DATA_KINDS)}")
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


def table_sweep(name: str) -> dict[str, str]:
    """What the table's own sweep varies (``hydra.sweeper.params`` of the composed preset, so values
    a table takes from its protocol file count too)."""
    from omegaconf import OmegaConf

    from fgx.launch import compose

    params = OmegaConf.select(compose([f"+experiment={name}"], hydra=True), "hydra.sweeper.params") or {}
    return {str(k): str(v) for k, v in params.items()}


def sweep_keys(conf: Path, name: str) -> list[str]:
    """The keys the table's own sweep varies."""
    return list(table_sweep(name))


def cell_config(name: str, cell: dict[str, str]) -> tuple[dict, str]:
    """What `fgx run +experiment=NAME k=v ...` resolves to for one cell: the config fingerprint."""
    from fgx.launch import compose
    from fgx.config import config_fingerprint

    return config_fingerprint(compose([f"+experiment={name}", *(f"{k}={v}" for k, v in cell.items())]))


def table_sweeps(conf: Path, names: list[str]) -> dict[str, dict[str, list[str]] | int]:
    """Each table's sweep as Hydra's basic sweeper expands it: key -> its values (an Optuna table: its
    trial budget), composed under one Hydra initialisation (~0.1 s a table)."""
    return {name: sweep for name, (sweep, _) in table_compositions(conf, names).items()}


def table_compositions(conf: Path, names: list[str]) -> dict[str, tuple[dict[str, list[str]] | int, dict]]:
    """Each table's sweep (see table_sweeps) and what its runs need beyond fgx: ``{"device": ...,
    "dataset": registered name, "folder": the folder under the data root its loader reads (None for
    generated data)}``, from one composition of the preset."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.initialize import get_gh_backup, restore_gh_from_backup

    parser = OverridesParser.create()
    out: dict[str, tuple] = {}
    backup = get_gh_backup()      # a caller's Hydra (the docs test's) is put back as it was
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(conf.resolve()), version_base="1.3"):
            for name in names:
                cfg = compose(config_name="config", overrides=[f"+experiment={name}"], return_hydra_config=True)
                sweeper = cfg.hydra.sweeper
                needs = _needs(cfg)
                if not sweeper.get("_target_", "").endswith("BasicSweeper"):
                    out[name] = (int(sweeper.get("n_trials") or 1), needs)
                    continue
                params = parser.parse_overrides([f"{k}={v}" for k, v in (sweeper.get("params") or {}).items()])
                out[name] = ({o.get_key_element(): [str(v) for v in o.sweep_string_iterator()]
                              if o.is_sweep_override() else [str(o.value())] for o in params}, needs)
    finally:
        restore_gh_from_backup(backup)
    return out


def _needs(cfg) -> dict:
    from fgx.config import build_params
    from fgx.registry import DATASETS

    ds = cfg.get("dataset") or {}
    out = {"device": cfg.get("device"), "dataset": ds.get("name"), "folder": None}
    try:
        entry = DATASETS.get(ds.get("name"))
        folder = entry.meta.get("folder")
        if folder is not None:
            out["folder"] = folder(build_params(entry.params, ds, "dataset"))
    except Exception:  # noqa: BLE001 - an accounting table or a preset without a dataset needs nothing
        pass
    return out


def table_job_counts(conf: Path, names: list[str]) -> dict[str, int]:
    """How many runs each table's multirun makes (an Optuna table: its trial budget)."""
    import math

    return {name: sweep if isinstance(sweep, int) else math.prod(len(v) for v in sweep.values())
            for name, sweep in table_sweeps(conf, names).items()}
