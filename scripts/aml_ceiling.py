"""Learning curves of AML runs (issue #72): what a GINe reaches on generated AMLworld data, against steps.

Collects finished (or still running) `fgx run` directories into one record and a plot:

    python scripts/aml_ceiling.py --run centralised=<run dir> --run ce_fedgnn=<run dir> [--run fedavg=<run dir>] \
        --out results/benchmarks/aml_ceiling
    python scripts/aml_ceiling.py --append --run LABEL=<run dir> --out results/benchmarks/aml_ceiling
        # adds one run to the committed curves (a run of the same label is replaced); the others stay as
        # recorded, also when their run directories are gone

Each run's evaluations (metrics.jsonl) become one curve: test and validation minority F1, PR-AUC and
ROC-AUC (mean over clients, fgx's reported number; pooled too) against optimiser steps per client, training
items seen by all clients together, and wall time. Writes <out>/curves.json, <out>/curves.png and, from every
one-client (centralised) run, a record in <out>/ceiling.json: its test metrics at its best validation minority
F1 — the centralised ceiling at this data size and step budget, which `fgx run` on the same preset, scale and data
seed prints beside its own score. A curve still rising at its last point is a lower bound of the ceiling,
and the record says so (`plateau`).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from omegaconf import OmegaConf

METRICS = ("f1_minority", "pr_auc", "roc_auc")
PLATEAU_GAIN = 0.02      # a curve whose last evaluation is within this of its best validation F1 ...
PLATEAU_POINTS = 3       # ... and has not set a new best in its last this-many evaluations has levelled off


def read_run(label: str, run_dir: Path) -> dict:
    cfg_path = run_dir / ".hydra" / "config.yaml"
    rows_path = run_dir / "metrics.jsonl"
    if not cfg_path.exists() or not rows_path.exists():
        sys.exit(f"{run_dir}: not an fgx run with evaluations (needs .hydra/config.yaml and metrics.jsonl)")
    cfg = OmegaConf.load(cfg_path)
    a = cfg.algorithm
    clients = int(cfg.partitioner.num_clients)
    steps_per_round = int(a.local_steps)
    batch = int(a.batch_size) if a.get("batch_size") else None
    summary = json.loads((run_dir / "summary.json").read_text()) if (run_dir / "summary.json").exists() else {}
    points: dict[int, dict] = {}
    for line in rows_path.read_text().splitlines():
        row = json.loads(line)
        r = int(row["round"])
        p = points.setdefault(r, {"round": r, "steps_per_client": r * steps_per_round,
                                  "items_seen": r * steps_per_round * clients * batch if batch else None,
                                  "wall_s": round(float(row["wall_time_s"]), 1)})
        p[row["split"]] = {m: row["mean"].get(m) for m in METRICS}
        p[row["split"] + "_pooled"] = {m: (row.get("pooled") or {}).get(m) for m in METRICS}
    prov = summary.get("provenance") or {}
    # a run stopped before its end has no provenance yet: its command from Hydra's record of the overrides
    overrides = OmegaConf.load(run_dir / ".hydra" / "overrides.yaml") if (run_dir / ".hydra" / "overrides.yaml").exists() else []
    command = prov.get("command") or "fgx run " + " ".join(o for o in overrides if not o.startswith("hydra.run.dir"))
    status = summary.get("status")
    return {"label": label, "run_dir": run_dir.name, "status": status if status in ("completed", "diverged") else "not finished",
            "algorithm": cfg.algorithm.name, "model": cfg.model.name, "clients": clients,
            "setting": setting(cfg), "dataset": {k: cfg.dataset.get(k) for k in ("name", "preset", "scale", "data_seed")},
            "command": command, "commit": prov.get("commit"),
            "points": [points[r] for r in sorted(points)]}


def setting(cfg) -> str:
    a = cfg.algorithm
    opt = a.get("local_optimizer") or a.get("optimizer")
    cw = list(a.class_weights) if a.get("class_weights") else ("inverse frequency" if a.get("class_weighted") is not False else "none")
    return (f"{cfg.algorithm.name}, {cfg.model.name}, {cfg.partitioner.num_clients} client(s), {opt} lr {a.lr}, "
            f"K = {a.local_steps} x {cfg.rounds} rounds, batch {a.batch_size}, fanouts {list(a.fanouts or [])}, "
            f"class weights {cw}"
            + (f", stratified batches q = {a.positive_share}" if a.get("positive_share") else "")
            + "".join(f", no {f} feature" for f in ("ports", "timestamp_feature") if cfg.dataset.get(f) is False))


def best_by_validation(curve: dict) -> dict | None:
    scored = [p for p in curve["points"] if (p.get("val") or {}).get("f1_minority") is not None]
    return max(scored, key=lambda p: p["val"]["f1_minority"]) if scored else None


def plateau(curve: dict) -> bool:
    """Whether the validation F1 levelled off: no new best in the last PLATEAU_POINTS evaluations."""
    vals = [p["val"]["f1_minority"] for p in curve["points"] if (p.get("val") or {}).get("f1_minority") is not None]
    if len(vals) <= PLATEAU_POINTS:
        return False
    return max(vals[-PLATEAU_POINTS:]) <= max(vals[:-PLATEAU_POINTS]) + PLATEAU_GAIN


def ceiling_record(curve: dict) -> dict:
    best = best_by_validation(curve)
    if best is None:
        sys.exit(f"{curve['label']}: no validation evaluation yet")
    ds = curve["dataset"]
    return {"preset": ds["preset"], "scale": float(ds["scale"]), "data_seed": int(ds["data_seed"]),
            "model": curve["model"], "setting": curve["setting"], "steps": best["steps_per_client"],
            "steps_run": curve["points"][-1]["steps_per_client"], "wall_s": best["wall_s"],
            "plateau": plateau(curve), "status": curve["status"], "test": best["test"], "val": best["val"],
            "command": curve["command"], "commit": curve["commit"]}


def plot(curves: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("test", "f1_minority", "test minority-class F1"), ("val", "f1_minority", "validation minority-class F1"),
              ("test", "pr_auc", "test PR-AUC"), ("test", "roc_auc", "test ROC-AUC")]
    rows = (len(curves) + 1) // 2       # the legend below the panels, two labels a row
    fig, axes = plt.subplots(2, 2, figsize=(10, 7 + 0.25 * rows))
    for ax, (split, metric, title) in zip(axes.flat, panels):
        for c in curves:
            pts = [p for p in c["points"] if (p.get(split) or {}).get(metric) is not None]
            ax.plot([p["steps_per_client"] for p in pts], [p[split][metric] for p in pts], marker="o", label=c["label"])
        ax.set_title(title)
        ax.set_xscale("log")
        ax.set_xlabel("optimiser steps per client")
        ax.grid(alpha=0.3)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=7, frameon=False)
    fig.suptitle("GINe on generated HI-Small (1 laundering transaction in 981); labels name the data scale")
    fig.tight_layout(rect=(0, 0.025 * rows, 1, 1))
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", action="append", required=True, metavar="LABEL=DIR", help="a run directory and its label")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--append", action="store_true",
                    help="keep the curves already in <out>/curves.json (one of the same label is replaced)")
    args = ap.parse_args(argv)
    curves = []
    if args.append and (args.out / "curves.json").exists():
        curves = json.loads((args.out / "curves.json").read_text())["curves"]
    for spec in args.run:
        label, sep, d = spec.rpartition("=")     # a label may hold "=" (q=0.1)
        if not sep:
            sys.exit(f"--run {spec!r}: expected LABEL=DIR")
        curve = read_run(label, Path(d))
        curves = [c for c in curves if c["label"] != label] + [curve]
    args.out.mkdir(parents=True, exist_ok=True)
    tmp = args.out / "curves.json.tmp"
    tmp.write_text(json.dumps({"curves": curves}, indent=1) + "\n")
    tmp.replace(args.out / "curves.json")
    central = [c for c in curves if c["clients"] == 1]          # one client holding everything: centralised
    if central:
        tmp = args.out / "ceiling.json.tmp"
        tmp.write_text(json.dumps({"records": [ceiling_record(c) for c in central]}, indent=1) + "\n")
        tmp.replace(args.out / "ceiling.json")
    plot(curves, args.out / "curves.png")
    for c in curves:
        print(f"{c['label']}: {c['setting']} ({c['status']})")
        for p in c["points"]:
            t, v = p.get("test") or {}, p.get("val") or {}
            print(f"  steps/client {p['steps_per_client']:>6}  seen {p['items_seen'] or 0:>10,}  wall {p['wall_s']:>7.0f}s  "
                  + "  ".join(f"{s} {m} {d.get(m) if d.get(m) is None else round(d[m], 4)}"
                              for s, d in (("val", v), ("test", t)) for m in METRICS))


if __name__ == "__main__":
    main()
