"""Does F2MF's fairness term ever act (issue #67)? F2MF on its table's data (`+experiment=lpsfed_table1_ml100k
method=f2mf`, MovieLens-100K, 4 spectral clients, the tuned lr and BPR temperature) for a few rounds, one
seed, at fgx's fair_lambda = 1 (the paper states no λ) with each of the other knobs moved, then at larger λ.
Records per setting the regulariser share (λ·gap² over the local loss), the communicated fairness gap and
the test NDCG@20 of the advantaged and disadvantaged users at every evaluation.

    python scripts/f2mf_share_sweep.py            # writes results/f2mf_share_sweep.json (about 15 min on 2 cores)

Each run is `fgx run +experiment=lpsfed_table1_ml100k method=f2mf seed=0 rounds=R eval_every=E
data_dir=<data root> <setting>` in its own process (one thread)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RECORD = REPO / "results" / "f2mf_share_sweep.json"
DATA_ROOT = "../shared/data"
ROUNDS, EVAL_EVERY = 10, 2
BASE = ["+experiment=lpsfed_table1_ml100k", "method=f2mf", "seed=0", f"rounds={ROUNDS}", f"eval_every={EVAL_EVERY}",
        f"data_dir={DATA_ROOT}", "output.progress=off", "output.checkpoint=false"]
SETTINGS = {          # name -> overrides beside BASE
    "lambda 1 (defaults)": [],
    "lambda 1, no noise": ["algorithm.dp_epsilon=null"],
    "lambda 1, epsilon 0.1": ["algorithm.dp_epsilon=0.1"],
    "lambda 1, bpr_tau 0.2": ["algorithm.bpr_tau=0.2"],
    "lambda 1, advantaged 50 %": ["algorithm.advantaged_share=0.5"],
    "lambda 1, utility clip 1": ["algorithm.utility_clip=1.0"],
    "lambda 1, lr 0.005": ["algorithm.lr=0.005"],
    "lambda 0 (FedMF's objective)": ["algorithm.fair_lambda=0"],
    "lambda 10": ["algorithm.fair_lambda=10"],
    "lambda 100": ["algorithm.fair_lambda=100"],
    "lambda 1000": ["algorithm.fair_lambda=1000"],
}


def run(overrides: list[str], where: Path) -> list[dict]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "fgx.cli", "run", *BASE, *overrides, f"hydra.run.dir={where}"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    summary = where / "summary.json"
    if not summary.exists():
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    status = json.loads(summary.read_text())["status"]      # completed, or diverged (a large λ): kept as such
    rows = [json.loads(line) for line in (where / "metrics.jsonl").read_text().splitlines()]
    return status, [{"round": r["round"], "regulariser_share": r.get("regulariser_share"), "fairness_gap": r.get("fairness_gap"),
             "ndcg@20": r["mean"]["ndcg@20"], "ndcg@20_advantaged": r["mean"]["ndcg@20_advantaged"],
             "ndcg@20_disadvantaged": r["mean"]["ndcg@20_disadvantaged"]}
            for r in rows if r.get("split") == "test"]


def main() -> int:
    commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    out = {"what": __doc__.split("\n\n")[0], "command": "python scripts/f2mf_share_sweep.py", "commit": commit,
           "base": BASE, "settings": {}}
    with tempfile.TemporaryDirectory(prefix="fgx-f2mf-") as tmp:
        for k, (name, extra) in enumerate(SETTINGS.items()):
            status, evals = run(extra, Path(tmp) / f"run{k}")
            out["settings"][name] = {"overrides": extra, "status": status, "evaluations": evals}
            RECORD.write_text(json.dumps(out, indent=1) + "\n")       # durable after every setting
            last = evals[-1]
            print(f"{name:32s} {status:9s} round {last['round']}: share {last['regulariser_share']:.3g}  "
                  f"gap {last['fairness_gap']:+.4f}  NDCG@20 {last['ndcg@20']:.4f} "
                  f"(A {last['ndcg@20_advantaged']:.4f}, D {last['ndcg@20_disadvantaged']:.4f})", flush=True)
    print(f"wrote {RECORD.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
