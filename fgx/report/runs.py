"""Finding run directories and reading them into one table (one row per run).

A run directory is what ``fgx run`` writes: ``summary.json`` (status, final metrics, privacy,
bytes, wall time), ``metrics.jsonl`` and Hydra's ``.hydra/{config,overrides}.yaml``. A directory
with ``.hydra`` but no ``summary.json`` is a job that never got going; a summary whose status is
``running`` belongs to a run that was killed. Both are kept, with their status, so a report can
list them instead of silently dropping them."""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

IGNORED_OVERRIDES = {"seed", "data_dir", "resume", "hydra.run.dir", "hydra.sweep.dir", "output.progress",
                     "output.checkpoint", "dataset.download", "logger",
                     "experiment_name"}


class ReportError(ValueError):
    """A path or option the report tools cannot use; the message names it."""


@dataclass
class Run:
    path: Path
    status: str                                   # completed | diverged | failed | running | not started | unreadable
    overrides: dict[str, str] = field(default_factory=dict)
    summary: dict = field(default_factory=dict)
    error: str | None = None

    @property
    def seed(self) -> Any:
        return self.summary.get("seed", self.overrides.get("seed"))

    @functools.cached_property
    def _resolved(self) -> tuple[dict, Any]:
        """(the config groups' chosen conf files, the resolved config) from .hydra/; empty if unreadable."""
        from omegaconf import OmegaConf

        choices, cfg = {}, None
        try:
            h = OmegaConf.load(self.path / ".hydra" / "hydra.yaml")
            choices = {str(k).split("@")[0]: v for k, v in (OmegaConf.select(h, "hydra.runtime.choices") or {}).items()}
        except Exception:  # noqa: BLE001 - an unreadable file only loses the resolved values
            pass
        try:
            cfg = OmegaConf.load(self.path / ".hydra" / "config.yaml")
        except Exception:  # noqa: BLE001
            pass
        return choices, cfg

    def value(self, key: str) -> str | None:
        """The value `key` had in this run, as resolved (a key left at its default has its default):
        a config group's chosen conf file (`algorithm` -> fedavg_lgcn), else the resolved config value
        (`partitioner.num_clients` -> 10), else what the command line said."""
        from omegaconf import DictConfig, OmegaConf

        choices, cfg = self._resolved
        if choices.get(key) is not None:
            return str(choices[key])
        if cfg is not None:
            v = OmegaConf.select(cfg, key, default=None)
            if v is not None and not isinstance(v, DictConfig):
                v = OmegaConf.to_container(v) if OmegaConf.is_config(v) else v
                return {True: "true", False: "false"}.get(v, str(v)) if isinstance(v, bool) else str(v)
        if key in self.overrides:
            return self.overrides[key]
        return (self.summary.get("components") or {}).get(key)


def _read_overrides(run_dir: Path) -> dict[str, str]:
    f = run_dir / ".hydra" / "overrides.yaml"
    if not f.exists():
        return {}
    from omegaconf import OmegaConf

    out = {}
    for item in OmegaConf.to_container(OmegaConf.load(f)) or []:
        key, _, value = str(item).partition("=")
        out[key.lstrip("+~")] = value
    return out


def read_run(run_dir: Path) -> Run:
    run_dir = Path(run_dir)
    try:
        overrides = _read_overrides(run_dir)
    except Exception as e:  # noqa: BLE001 - a broken file is reported, not fatal to the report
        return Run(run_dir, "unreadable", error=f".hydra/overrides.yaml: {e}")
    f = run_dir / "summary.json"
    if not f.exists():
        return Run(run_dir, "not started", overrides, error="no summary.json")
    try:
        summary = json.loads(f.read_text())
    except (OSError, json.JSONDecodeError) as e:
        return Run(run_dir, "unreadable", overrides, error=f"summary.json: {e}")
    status = summary.get("status", "unreadable")
    error = summary.get("error")
    if status == "running":
        error = "did not finish (killed, or still running); resume with resume=true"
    return Run(run_dir, status, overrides, summary, error)


def is_run_dir(p: Path) -> bool:
    return (p / "summary.json").exists() or (p / ".hydra" / "overrides.yaml").exists()


def find_runs(paths: list[str | Path]) -> list[Run]:
    """Every run directory at or below the given paths, in a stable order."""
    runs: list[Run] = []
    seen: set[Path] = set()
    for raw in paths:
        p = Path(raw)
        if not p.exists():
            raise ReportError(f"{p}: no such file or directory")
        if not p.is_dir():
            raise ReportError(f"{p}: not a directory (give a run or multirun directory)")
        cands = [p] if is_run_dir(p) else sorted(
            {q.parent for q in p.rglob("summary.json")} | {q.parent.parent for q in p.rglob(".hydra/overrides.yaml")},
            key=_natural_key)
        for c in cands:
            c = c.resolve()
            if c not in seen:
                seen.add(c)
                runs.append(read_run(c))
    if not runs:
        raise ReportError(f"no run directories (with summary.json or .hydra/) under {', '.join(map(str, paths))}")
    return runs


def _natural_key(p: Path) -> list:
    # numbers sort by value, and before names (a sweep dir may hold "0", "1" and "cgu_s1" side by side)
    return [(0, int(s), "") if s.isdigit() else (1, 0, s) for s in p.parts]


def varying_keys(runs: list[Run]) -> list[str]:
    """Override keys whose value differs between runs (seed and bookkeeping keys excepted), in the
    order they first appear on the command lines."""
    keys: list[str] = []
    for r in runs:
        for k in r.overrides:
            if k not in keys and k not in IGNORED_OVERRIDES and not k.startswith("hydra"):
                keys.append(k)
    return [k for k in keys if len({r.overrides.get(k) for r in runs}) > 1]


def metric_values(summary: dict) -> dict[str, float]:
    """The numbers a report can show for one completed run."""
    out: dict[str, float] = {}
    for k, v in (summary.get("final") or {}).items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[k] = float(v)
    best = summary.get("best") or {}
    if isinstance(best.get("val"), (int, float)):
        out["best_val"] = float(best["val"])
    for k, v in (best.get("test") or {}).items():       # test metrics at the best validation round
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[f"best_{k}"] = float(v)
    for k, v in ((summary.get("best_client") or {}).get("test") or {}).items():
        # each client's test metrics at its own best validation round, averaged over clients
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[f"best_client_{k}"] = float(v)
    for k, v in (summary.get("privacy") or {}).items():
        if k.startswith("epsilon") and isinstance(v, (int, float)):
            out[k] = float(v)
    for k, v in (summary.get("diagnostics") or {}).items():   # mechanism diagnostics: last round's value
        if isinstance(v, dict) and isinstance(v.get("last"), (int, float)):
            out[k] = float(v["last"])
    for k, v in (summary.get("unlearning") or {}).items():   # certified unlearning: after the requests
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[f"unlearning_{k}"] = float(v)
    for k, v in (summary.get("threat") or {}).items():   # what an attack achieved (asr: docs/threats.md)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[k] = float(v)
    if isinstance(summary.get("total_bytes"), (int, float)):
        out["MB"] = summary["total_bytes"] / 1e6
    if isinstance(summary.get("wall_time_s"), (int, float)):
        out["wall_s"] = float(summary["wall_time_s"])
    rounds = summary.get("rounds")
    if isinstance(rounds, int) and rounds > 0:     # per round (a table names them in `columns:`; secagg_cost)
        if isinstance(summary.get("total_bytes"), (int, float)):
            out["MB_per_round"] = summary["total_bytes"] / rounds / 1e6
        if isinstance(summary.get("train_time_s"), (int, float)):
            out["s_per_round"] = float(summary["train_time_s"]) / rounds
    return out


def group_label(run: Run, by: list[str]) -> tuple:
    """The run's resolved value of each `by` key ("-" only for a key the run's config does not have)."""
    return tuple(v if (v := run.value(k)) is not None else "-" for k in by)


def frame(runs: list[Run], by: list[str]):
    """A pandas DataFrame: one row per completed run, the ``by`` columns, seed and metric columns."""
    import pandas as pd

    rows = []
    for r in runs:
        if r.status != "completed":
            continue
        rows.append({**dict(zip(by, group_label(r, by))), "seed": r.seed, "run": str(r.path),
                     **metric_values(r.summary)})
    return pd.DataFrame(rows)
