"""Committed records of paper tables: ``results/<table>.json``, written by ``fgx repro <table>``.

A record holds, per run of the table (one per method and seed, or per swept value), the overrides
that made it, the summary numbers, the fingerprint of its resolved config, and where it came from
(each run's own command, commit, date and machine, and the fingerprint of the code it executed:
fgx/provenance.py). Statuses and the reproduction document are computed from records alone, never
typed. A record is *stale* when its configs no longer match what ``fgx run +experiment=<table>
<overrides>`` resolves to, or when a source file or library version its runs used has changed since:
the table must be run again.

    {"table": NAME, "runs": [{"overrides": {"method": "fedavg_gcn", "seed": "0"},
                              "summary": {...}, "config_sha": "...", "command": "fgx repro NAME ...",
                              "commit": "...", "dirty": false, "date": "...", "machine": {...},
                              "code": {"files": {path: sha}, "deps": {...}}, "progress": {...}}, ...],
     "configs": {sha: resolved config without bookkeeping keys}}
"""
from __future__ import annotations

import json
import os
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Callable

from fgx.config import default_data_dir
from fgx.provenance import code_changes, provenance  # noqa: F401 - provenance: the collecting command's
from fgx.report.runs import IGNORED_OVERRIDES, Run

# summary.json keys a record keeps (per-client lists and run-directory paths stay in the run directory)
SUMMARY_KEYS = ("status", "main_metric", "final", "best", "best_client", "privacy", "unlearning", "threat", "total_bytes",
                "wall_time_s", "train_time_s", "peak_rss_mb", "seed", "components", "data", "config_sha",
                "sampling_se", "sampling", "rounds", "diverged")
PROVENANCE_KEYS = ("command", "launched_by", "commit", "dirty", "date", "machine", "code")
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
        from fgx.tables.errors import TablesError
        raise TablesError(f"{p}: not a readable record ({e}); restore it from git or run `fgx repro {name}` again")


@contextmanager
def record_lock(conf: Path, name: str):
    """Hold results/NAME.json's lock while a job reads, merges and writes it: two jobs recording into one
    table (two `fgx repro --record` of different methods, two `fgx tune --methods`) that finish together
    both land; without it the later write replaces the earlier job's runs with the record it read first.
    The lock is the data preparation's (an OS lock the kernel releases when its holder dies)."""
    from fgx.data.base import DataError
    from fgx.data.prepare import preparation_lock

    with ExitStack() as held:
        try:
            held.enter_context(preparation_lock(results_dir(conf) / f".{name}.json.lock",
                                                f"the record results/{name}.json"))
        except DataError as e:  # the lock's own wording is the data preparation's: say what fgx repro/tune met
            from fgx.tables.errors import TablesError
            raise TablesError(f"cannot lock the record results/{name}.json to write it ({e})") from None
        yield


def update_record(conf: Path, name: str, change: Callable[[dict | None], dict]) -> tuple[dict, Path]:
    """Read results/NAME.json (None when absent), apply ``change``, write the result back, all under the
    record's lock; returns the record written and its path."""
    with record_lock(conf, name):
        record = change(load_record(conf, name))
        return record, write_record(conf, name, record)


def write_record(conf: Path, name: str, record: dict) -> Path:
    from fgx.outputs import atomic_write_bytes, dumps

    p = record_path(conf, name)
    atomic_write_bytes(p, (dumps(record) + "\n").encode())
    return p


def run_entry(run: Run, collected_by: dict) -> dict:
    """A record entry for one completed or diverged run. Its provenance is the run's own (summary.json, written when
    the run finished): a table resumed or collected later never restamps an earlier run. A run made before
    fgx wrote per-run provenance keeps the collecting command's, marked ``provenance: collected``."""
    summary = {k: run.summary[k] for k in SUMMARY_KEYS if k in run.summary}
    for key, drop in _DROP_NESTED.items():
        if isinstance(summary.get(key), dict):
            summary[key] = {k: v for k, v in summary[key].items() if k not in drop}
    own = run.summary.get("provenance")
    prov = {k: own[k] for k in PROVENANCE_KEYS if k in own} if isinstance(own, dict) else \
        {**collected_by, "provenance": "collected"}
    progress = training_progress(run.path, run.summary.get("main_metric"))
    entry = {"overrides": cell_overrides(run.overrides), "summary": summary,
             "config_sha": run.summary.get("config_sha"), **({"progress": progress} if progress else {}), **prov}
    return portable(entry, [run.overrides.get("data_dir"), default_data_dir()])


def portable(entry: dict, roots: list[str | None]) -> dict:
    """The entry with the data roots of the machine that ran it written as ``<data root>`` (in commands and
    file paths alike): a committed record names no folder of one machine (tests/test_no_machine_paths.py)."""
    text = json.dumps(entry)
    for root in sorted({str(Path(r).expanduser().resolve()) for r in roots if r}, key=len, reverse=True):
        if Path(root).is_absolute() and len(Path(root).parts) > 1:
            text = text.replace(json.dumps(root)[1:-1], "<data root>")
    return json.loads(text)


def training_progress(run_dir: Path, metric: str | None) -> dict | None:
    """How much the validation score still moved in the last 10 % of rounds: the best value in those
    rounds minus the best before them (oriented so that > 0 is an improvement). A method still climbing
    at the end of a table's protocol is under-trained, and the table says so."""
    from fgx.metrics import LOWER_IS_BETTER

    f = Path(run_dir) / "metrics.jsonl"
    if metric is None or not f.exists():
        return None
    vals = {}
    for line in f.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        v = (row.get("mean") or {}).get(metric) if row.get("split") == "val" else None
        if isinstance(v, (int, float)) and v == v:
            vals[int(row["round"])] = float(v)
    if len(vals) < 2:
        return None
    last = max(vals)
    cut = last - max(1, round(0.1 * last))
    before = [v for r, v in vals.items() if r <= cut]
    after = [v for r, v in vals.items() if r > cut]
    if not before or not after:
        return None
    sign = -1.0 if metric in LOWER_IS_BETTER else 1.0
    best_before = max(before, key=lambda v: sign * v)
    best_after = max(after, key=lambda v: sign * v)
    return {"metric": metric, "rounds": last, "from_round": cut + 1, "val_best_before": best_before,
            "val_best_last": best_after, "gain_last_10pct": sign * (best_after - best_before)}


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


def data_staleness(record: dict, data_root: Path) -> tuple[list[str], str | None]:
    """(data files that changed since the record's runs read them, a note on runs whose data cannot be
    told). Runs recorded before data fingerprints, or whose files are not under ``data_root`` here, are
    unknown: said, never stale by themselves (every earlier record would otherwise be)."""
    from fgx.provenance import data_changes

    changed, unknown = [], {}
    for e in record.get("runs", []):
        got, why = data_changes((e.get("code") or {}).get("data"), data_root)
        changed += [c for c in got if c not in changed]
        if why:
            unknown[why] = unknown.get(why, 0) + 1
    note = "; ".join(f"{n} run(s): {why}" for why, n in sorted(unknown.items())) if unknown else None
    return changed, (f"Data files: unknown for {note}." if note else None)


def kernel_sets(record: dict) -> list[str]:
    """The CPU kernel sets the record's runs ran with (``machine.kernels``; older runs: unknown)."""
    return sorted({run_kernels(e) or "unknown (recorded before kernels were kept)" for e in record.get("runs", [])})


def run_kernels(entry: dict) -> str | None:
    """One run's CPU kernels ("AVX2 / openblas Haswell"); None where not recorded."""
    k = (entry.get("code") or {}).get("kernels") or (entry.get("machine") or {}).get("kernels")
    return f"{k.get('torch')} / {', '.join(k.get('blas') or []) or 'BLAS not named'}" if isinstance(k, dict) else None


def code_staleness(record: dict) -> list[str]:
    """What changed since the record's runs were made: per source file or library, named once. A run
    without a code fingerprint (recorded before fgx kept one) makes the record stale as well."""
    out, unknown, seen = [], 0, {}
    for e in record.get("runs", []):
        code = e.get("code")
        if not isinstance(code, dict):
            unknown += 1
            continue
        key = json.dumps([code, e.get("commit")], sort_keys=True)
        if key not in seen:
            seen[key] = code_changes(code, e.get("commit"))
        out += [c for c in seen[key] if c not in out]
    if unknown:
        out.append(f"{unknown} run(s) recorded before code fingerprints")
    return out
