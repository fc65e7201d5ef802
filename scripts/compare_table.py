"""Methods side by side on one conf/experiment/ preset, several seeds: runs every (method, seed) job
in-process (serially, skipping the ones already completed) and prints the table that `fgx report`
makes of them (mean ± std over seeds). For comparisons one Hydra sweep cannot express: some methods
need their own model or keys beside the preset's (FedGSP runs UniFilter with the authors' per-dataset
values beside GCN baselines; FedSage+ needs GraphSAGE).

    OMP_NUM_THREADS=1 python scripts/compare_table.py fedgsp_cora_disjoint --data-dir <data root>
    OMP_NUM_THREADS=1 python scripts/compare_table.py baselines_cora --data-dir <data root> --metric accuracy
    python scripts/compare_table.py fedgsp_hetero_homophily rounds=30        # extra overrides for every job

Runs go to outputs/tables/<preset>/<method>_s<seed>/; `fgx repro <preset> --from` that folder checks
them against conf/targets/<preset>.yaml."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

FEDGSP_BASELINES = ["local", "fedavg", "fedprox", "fedper", "fedgsp"]
METHODS = {
    "baselines_cora": ["local", "fedavg", "fedprox", "fedper", "fedgcn", "gcfl", "fedpub", "swift_fedgnn",
                       "fedsage_plus"],
    "fedgsp_cora_disjoint": FEDGSP_BASELINES,
    "fedgsp_cora_overlapping": FEDGSP_BASELINES,
    "fedgsp_minesweeper": FEDGSP_BASELINES,
    "fedgsp_hetero_homophily": FEDGSP_BASELINES,
}

_UNIFILTER = ["model=unifilter"]
# per preset and method: the overrides that method needs beside the preset
EXTRA: dict[str, dict[str, list[str]]] = {
    "baselines_cora": {"fedsage_plus": ["model=sage"]},
    # FedGSP: UniFilter with the per-configuration values of the authors' core/config.py (spec fedgsp.md §7.4)
    "fedgsp_cora_disjoint": {"fedgsp": _UNIFILTER + [        # Cora disjoint M=10 row
        "algorithm.k_principal=3", "algorithm.gamma=1.6", "model.K=7", "model.hidden=512", "model.n_layers=3",
        "algorithm.lr=0.15", "algorithm.lr_comb=0.01", "algorithm.weight_decay=0.0005",
        "algorithm.weight_decay_comb=5e-6", "model.dropout_comb=0.3", "model.dropout_mlp=0.15", "model.tau=0.975",
        "algorithm.alpha=0.25", "algorithm.beta=2.2"]},
    "fedgsp_cora_overlapping": {"fedgsp": _UNIFILTER + [     # Cora overlapping M=10 row
        "algorithm.k_principal=1", "algorithm.gamma=5", "model.K=7", "model.hidden=128", "model.n_layers=3",
        "algorithm.lr=0.015", "algorithm.lr_comb=0.05", "algorithm.weight_decay=5e-7",
        "algorithm.weight_decay_comb=5e-7", "model.dropout_comb=0.0", "model.dropout_mlp=0.5", "model.tau=0.985",
        "algorithm.alpha=0.282", "algorithm.beta=1.5"]},
    "fedgsp_minesweeper": {"fedgsp": _UNIFILTER + [          # Minesweeper disjoint row
        "algorithm.k_principal=3", "algorithm.gamma=50", "model.K=10", "model.hidden=512", "model.n_layers=3",
        "algorithm.lr=0.01", "algorithm.lr_comb=0.05", "algorithm.weight_decay=5e-5",
        "algorithm.weight_decay_comb=0.005", "model.dropout_comb=0.3", "model.dropout_mlp=0.3", "model.tau=0.7",
        "algorithm.alpha=0.05", "algorithm.beta=2.0"]},
    # no counterpart in the paper: core/config.py defaults, τ per client from its ĥ (model.tau=null)
    "fedgsp_hetero_homophily": {"fedgsp": _UNIFILTER},
}


def run_jobs(preset: str, methods: list[str], seeds: list[int], out: Path, common: list[str]) -> None:
    from fgx.cli import main as fgx_main

    for method in methods:
        for seed in seeds:
            run_dir = out / f"{method}_s{seed}"
            summary = run_dir / "summary.json"
            if summary.exists() and json.loads(summary.read_text()).get("status") == "completed":
                continue
            fgx_main(["run", f"+experiment={preset}", f"algorithm={method}", f"seed={seed}",
                      f"hydra.run.dir={run_dir}", "output.checkpoint=false", "output.progress=off",
                      *EXTRA.get(preset, {}).get(method, []), *common])
            status = json.loads(summary.read_text()).get("status")
            print(f"{method} seed {seed}: {status}", file=sys.stderr, flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("preset", choices=sorted(METHODS))
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--methods", default=None, help="comma-separated (default: the preset's list)")
    ap.add_argument("--metric", default=None,
                    help="report column (default: best_client_<main metric>, each client's test at its own best "
                         "validation round, and best_<main metric>, test at the best mean-validation round)")
    ap.add_argument("--out", default=None, help="default outputs/tables/<preset>")
    ap.add_argument("overrides", nargs="*", help="extra fgx overrides for every job (e.g. rounds=20)")
    a = ap.parse_intermixed_args(argv)
    from fgx.report.runs import find_runs
    from fgx.report.table import build_report, problems_text, render

    out = Path(a.out or Path("outputs") / "tables" / a.preset)
    methods = a.methods.split(",") if a.methods else METHODS[a.preset]
    common = ([f"data_dir={a.data_dir}"] if a.data_dir else []) + a.overrides
    seeds = [int(s) for s in a.seeds.split(",")]
    run_jobs(a.preset, methods, seeds, out, common)
    wanted = {f"{m}_s{s}" for m in methods for s in seeds}
    runs = [r for r in find_runs([out]) if r.path.name in wanted]
    metrics = [a.metric] if a.metric else None
    if metrics is None:
        main_metrics = {r.summary.get("main_metric") for r in runs} - {None}
        if len(main_metrics) == 1:
            m = main_metrics.pop()   # each client's test at its own best validation round, and at the best mean one
            metrics = [f"best_client_{m}", f"best_{m}"]
    rep = build_report(runs, by=["algorithm"], metrics=metrics)
    table = render(rep, "markdown") + ("\n" + problems_text(rep) if rep.problems else "")
    print(table)
    (out / "table.md").write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
