"""What a binary detection score means: the ``reference`` block of summary.json and the line `fgx run` and
`fgx report` print beside it (docs/aml.md, "Reading the result").

For a binary edge or node task whose main metric is f1_minority (the AML runs), on the final test split:

- ``trivial``: what a detector that learned nothing scores. Flagging nothing: minority F1 0; flagging
  every item: 2p / (1 + p); a constant score: PR-AUC p, ROC-AUC 0.5; p the minority (positive) rate of the
  test items of every client pooled.
- ``paper``: CE-FedGNN Table 1's figure for the run's algorithm, model and preset
  (conf/reference/aml_paper.yaml), measured on the real AMLworld CSV, not on fgx's generated data.
- ``ceiling``: the centralised model's measured test scores on the same generated data (preset, scale and
  data seed), from results/benchmarks/aml_ceiling/ceiling.json when a record matches.
- ``positives``: predicted positives, true positives (correctly flagged), actual positives and items of
  the test split, every client's items pooled (``fgx.metrics.minority_counts``).

Other runs get no block. Nothing here may stop a finished run: an unreadable ceiling file is logged and
its value left null. fgx/report/reading.py prints the block."""
from __future__ import annotations

import json
import logging
from pathlib import Path

log = logging.getLogger("fgx")

CEILING_FILE = Path("benchmarks") / "aml_ceiling" / "ceiling.json"     # under results/ (FGX_RESULTS_DIR)
PAPER_FILE = Path("reference") / "aml_paper.yaml"                       # under conf/


def applies(task: str, num_classes: int, main_metric: str | None) -> bool:
    return task in ("edge", "node") and num_classes == 2 and main_metric == "f1_minority"


def reference(summary: dict, positives: dict, conf: Path | None = None, results: Path | None = None) -> dict:
    """The ``reference`` block for a finished run's summary (its ``data``, ``components``, ``presets``)
    and its pooled test ``positives``."""
    from fgx.config import conf_dir
    from fgx.tables.records import results_dir

    try:
        conf = conf or conf_dir()
    except SystemExit as e:     # no conf/ beside an installed package: the reading loses its files, not the run
        log.warning("%s; reference.paper and reference.ceiling left null", e)
        unknown = {"value": None, "reason": "fgx's conf/ directory not found"}
        return {"trivial": trivial(positives), "paper": unknown, "ceiling": unknown, "positives": positives}
    results = results or results_dir(conf)
    return {"trivial": trivial(positives), "paper": paper_figure(summary, conf / PAPER_FILE),
            "ceiling": ceiling(summary.get("data") or {}, results / CEILING_FILE), "positives": positives}


def trivial(positives: dict) -> dict:
    n, actual = positives["items"], positives["actual"]
    p = actual / n if n else float("nan")
    return {"positive_rate": p, "f1_minority": {"flag_nothing": 0.0, "flag_all": 2 * p / (1 + p) if n else p},
            "pr_auc": p, "roc_auc": 0.5}


def _method(summary: dict) -> str | None:
    """The algorithm conf file the run chose (`algorithm=fedgnn_st` runs component ce_fedgnn)."""
    return (summary.get("presets") or {}).get("algorithm") or (summary.get("components") or {}).get("algorithm")


def paper_figure(summary: dict, path: Path) -> dict:
    data, model = summary.get("data") or {}, (summary.get("components") or {}).get("model")
    preset, method = data.get("preset"), _method(summary)
    if not str(data.get("name", "")).startswith("aml"):
        return {"value": None, "reason": "not an AML dataset"}
    try:
        import yaml

        table = yaml.safe_load(path.read_text())
        columns = table["columns"]
        rows = table["rows"]
    except Exception as e:  # noqa: BLE001 - a finished run is never lost to its reference line
        log.warning("paper figures %s unreadable (%s: %s); reference.paper left null", path, type(e).__name__, e)
        return {"value": None, "reason": f"paper figures unreadable ({path.name})"}
    if preset not in columns:
        return {"value": None, "reason": f"the paper reports no {preset} preset (only {', '.join(columns)})"}
    row = next((r for r in rows if method in r["methods"] and r["model"] == model), None)
    if row is None:
        return {"value": None, "reason": f"the paper has no row for algorithm {method} with model {model}"}
    same = "the data this run read" if data.get("source") == "real" else "not fgx's generated data"
    return {"value": float(row[preset]), "row": row["row"], "column": columns[preset], "source": table["source"],
            "data": f"{table['data']} ({columns[preset]}), {same}"}


def _record_problem(rec) -> str | None:
    if not isinstance(rec, dict):
        return "a record is not an object"
    for key, kind in (("preset", str), ("scale", (int, float)), ("data_seed", int), ("test", dict)):
        if not isinstance(rec.get(key), kind) or isinstance(rec.get(key), bool):
            return f"a record's {key!r} is missing or not a {getattr(kind, '__name__', 'number')}"
    if not isinstance(rec["test"].get("f1_minority"), (int, float)):
        return "a record's test.f1_minority is missing or not a number"
    return None


def ceiling(data: dict, path: Path) -> dict:
    """The matching centralised record's test scores and budget, or a null value with the reason."""
    if not str(data.get("name", "")).startswith("aml"):
        return {"value": None, "reason": "not an AML dataset"}
    if data.get("source") == "real":
        return {"value": None, "reason": "the ceiling is measured on fgx's generated data; none applies to the real CSV"}
    if data.get("source") != "generated":
        return {"value": None, "reason": f"no ceiling for data of source {data.get('source')!r}"}
    want = {"preset": data.get("preset"), "scale": data.get("scale"), "data_seed": data.get("data_seed")}
    where = f"preset {want['preset']}, scale {want['scale']}, data_seed {want['data_seed']}"
    if not path.exists():
        return {"value": None, "reason": f"not recorded ({where}; no results/{CEILING_FILE.as_posix()})"}
    try:
        records = json.loads(path.read_text())["records"]
        if not isinstance(records, list):
            raise ValueError("'records' is not a list")
        problem = next((p for p in map(_record_problem, records) if p), None)
        if problem:
            raise ValueError(problem)
    except Exception as e:  # noqa: BLE001 - a malformed record must not lose an hour-long run's summary
        log.warning("ceiling records %s malformed (%s: %s); reference.ceiling left null", path, type(e).__name__, e)
        return {"value": None, "reason": f"ceiling records malformed ({type(e).__name__}: {e})"}
    found = [r for r in records if r["preset"] == want["preset"] and r["data_seed"] == want["data_seed"]
             and isinstance(want["scale"], (int, float)) and abs(r["scale"] - want["scale"]) < 1e-9]
    if not found:
        return {"value": None, "reason": f"not recorded ({where})"}
    # the ceiling: the recorded model best on validation (its test score is then not chosen by the test
    # split); records without validation scores fall back to their test score
    best = max(found, key=lambda r: ((r.get("val") or {}).get("f1_minority", r["test"]["f1_minority"]),
                                     r["test"]["f1_minority"]))
    return {"value": float(best["test"]["f1_minority"]), "test": best["test"], "val": best.get("val"),
            **{k: best.get(k) for k in ("model", "setting", "steps", "steps_run", "plateau", "wall_s", "command", "commit")}}
