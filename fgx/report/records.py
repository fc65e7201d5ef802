"""Committed records of paper tables: ``results/<table>.json``, written by ``fgx repro <table>``.

A record holds, per run of the table (one per method and seed, or per swept value), the overrides
that made it, the summary numbers, the fingerprint of its resolved config, and where it came from
(the command, the commit, the date, the machine). Statuses and the reproduction document are
computed from records alone, never typed. A record whose configs no longer match what
``fgx run +experiment=<table> <overrides>`` resolves to is *stale*: the table must be run again.

    {"table": NAME, "runs": [{"overrides": {"method": "fedavg_gcn", "seed": "0"},
                              "summary": {...}, "config_sha": "...", "command": "fgx repro NAME ...",
                              "commit": "...", "dirty": false, "date": "...", "machine": {...}}, ...],
     "configs": {sha: resolved config without bookkeeping keys}}
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from pathlib import Path

from fgx.report.runs import IGNORED_OVERRIDES, Run

# summary.json keys a record keeps (per-client lists and run-directory paths stay in the run directory)
SUMMARY_KEYS = ("status", "main_metric", "final", "best", "best_client", "privacy", "unlearning", "total_bytes",
                "wall_time_s", "train_time_s", "peak_rss_mb", "seed", "components", "data", "config_sha")
_DROP_NESTED = {"best": ("per_client",), "best_client": ("rounds",)}


def results_dir(conf: Path) -> Path:
    env = os.environ.get("FGX_RESULTS_DIR")
    return Path(env) if env else Path(conf).parent / "results"


def record_path(conf: Path, name: str) -> Path:
    return results_dir(conf) / f"{name}.json"


def load_record(conf: Path, name: str) -> dict | None:
    p = record_path(conf, name)
    if not p.exists():
        return None
    try:
        return json.loads(p.read_text())
    except json.JSONDecodeError as e:
        from fgx.report.runs import ReportError
        raise ReportError(f"{p}: not a readable record ({e}); restore it from git or run `fgx repro {name}` again")


def write_record(conf: Path, name: str, record: dict) -> Path:
    from fgx.outputs import atomic_write_bytes, dumps

    p = record_path(conf, name)
    atomic_write_bytes(p, (dumps(record) + "\n").encode())
    return p


def provenance(command: str) -> dict:
    """Where a result came from: the command, the commit (and whether the tree had uncommitted
    changes), the date and the machine."""
    repo = Path(__file__).resolve().parents[2]

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "--short=12", "HEAD")
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "fgx", "conf")
    return {"command": command, "commit": commit, "dirty": bool(dirty) if dirty is not None else None,
            "date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "machine": machine()}


def machine() -> dict:
    import torch

    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"system": platform.system(), "cpu": cpu, "cores": os.cpu_count(),
            "omp_threads": os.environ.get("OMP_NUM_THREADS"), "python": platform.python_version(),
            "torch": torch.__version__, "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def run_entry(run: Run, prov: dict) -> dict:
    summary = {k: run.summary[k] for k in SUMMARY_KEYS if k in run.summary}
    for key, drop in _DROP_NESTED.items():
        if isinstance(summary.get(key), dict):
            summary[key] = {k: v for k, v in summary[key].items() if k not in drop}
    return {"overrides": cell_overrides(run.overrides), "summary": summary,
            "config_sha": run.summary.get("config_sha"), **prov}


def cell_overrides(overrides: dict[str, str]) -> dict[str, str]:
    """The overrides that name a cell of the table (method, seed, swept values): bookkeeping left out."""
    skip = (IGNORED_OVERRIDES - {"seed"}) | {"experiment"}
    return {k: str(v) for k, v in sorted(overrides.items()) if k not in skip and not k.startswith("hydra")}


def merge(record: dict | None, name: str, entries: list[dict], configs: dict[str, dict]) -> dict:
    """The record with ``entries`` added; an earlier entry of the same cell is replaced."""
    record = dict(record or {"table": name, "runs": [], "configs": {}})
    key = lambda e: json.dumps(e["overrides"], sort_keys=True)
    new = {key(e) for e in entries}
    record["runs"] = [e for e in record.get("runs", []) if key(e) not in new] + entries
    record["runs"].sort(key=key)
    used = {e.get("config_sha") for e in record["runs"]}
    record["configs"] = {s: c for s, c in {**record.get("configs", {}), **configs}.items() if s in used}
    return record


def record_runs(record: dict) -> list[Run]:
    """The record's runs as report rows (what `fgx report` builds its tables from)."""
    return [Run(Path(f"results/{record['table']}.json#{i}"), e["summary"].get("status", "completed"),
                dict(e["overrides"]), e["summary"]) for i, e in enumerate(record.get("runs", []))]
