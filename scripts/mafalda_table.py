"""Final test MSE of decentralised SGD variants at equal privacy (μ-GDP under LDP, ε at δ = 1e-6),
mean ± std over seeds and nodes: the table of docs/decentralised.md.

    python scripts/mafalda_table.py --graphs florentine karate --mus 0.5 1 2 --seeds 0 1 2 3 4 \
        --methods dp_dsgd mafalda_sgd --out outputs/mafalda_table

Each cell is one `fgx run` (in-process) with the conf/experiment/mafalda_<graph>.yaml preset; finished
runs are skipped. Compare with the targets: fgx repro mafalda_<graph> --from outputs/mafalda_table/<graph>"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--graphs", nargs="+", default=["florentine", "karate"])
    ap.add_argument("--mus", nargs="+", type=float, default=[0.5, 1.0, 2.0])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    ap.add_argument("--methods", nargs="+", default=["dp_dsgd", "mafalda_sgd"])
    ap.add_argument("--data-dir", default=None, help="data root (diabetes needs none; housing reads its CSV there)")
    ap.add_argument("--out", default="outputs/mafalda_table")
    args = ap.parse_args()
    from fgx.cli import main as fgx_main
    from fgx.privacy.mf.gdp import eps_from_mu

    rows = []
    for graph in args.graphs:
        for mu in args.mus:
            row = {"graph": graph, "mu": mu, "epsilon": eps_from_mu(mu, 1e-6)}
            for m in args.methods:
                finals = []
                for s in args.seeds:
                    rd = Path(args.out) / graph / f"{m}_mu{mu}_s{s}"
                    summ = rd / "summary.json"
                    if not (summ.exists() and json.loads(summ.read_text()).get("status") == "completed"):
                        fgx_main(["run", f"+experiment=mafalda_{graph}", f"algorithm={m}", f"privacy.mu={mu}",
                                  f"seed={s}", "output.progress=off", "output.checkpoint=false",
                                  f"hydra.run.dir={rd}"] + ([f"data_dir={args.data_dir}"] if args.data_dir else []))
                    finals.append(json.loads(summ.read_text())["final"]["mse"])
                row[m] = {"mean": statistics.mean(finals), "std": statistics.stdev(finals) if len(finals) > 1 else 0.0,
                          "seeds": finals}
            rows.append(row)
            print(json.dumps(row), flush=True)
    print()
    print("| graph | μ | ε (δ=1e-6) | " + " | ".join(args.methods) + " |")
    print("|---|---|---|" + "---|" * len(args.methods))
    for r in rows:
        print(f"| {r['graph']} | {r['mu']:g} | {r['epsilon']:.3f} | "
              + " | ".join(f"{r[m]['mean']:.4f} ± {r[m]['std']:.4f}" for m in args.methods) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
