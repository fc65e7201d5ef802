"""Unlearning as a remedy for a backdoor (issue #70): run ``+experiment=threat_unlearning`` on paired seeds,
read each run's attack success rate (ASR) and clean accuracy before the requests, after them, and of the
model retrained from scratch without the poisoned nodes, and decide the claims on the seeds' paired
differences. Writes one JSON record (the runs' numbers and provenance, the claims with their statuses).

    python scripts/threat_unlearning.py --data-dir <data root>                      # 10 seeds, scalegun and cgu
    python scripts/threat_unlearning.py --data-dir <data root> --record             # ... into results/threat_unlearning.json
    python scripts/threat_unlearning.py --from-runs outputs/threat_unlearning/<time> # the claims again from run folders

The tables machinery (fgx/tables) compares rows of a sweep on a test metric of a model state; here the three
models are states of one run, and their ASR is not a test metric with bootstrap replicates, so the claims
are decided here. Each seed draws its own split, partition, malicious clients and poisoned nodes, so the
test items' noise is inside the seeds' spread (docs/tables.md: no shared items term); the 95 % interval is
Student's t over the seeds' paired differences.

Claims, per unlearning method:
- the poison took: ASR before > ASR retrained (the interval of the difference above 0);
- unlearning removes it: ASR before > ASR after;
- after matches retraining: the interval of ASR after - ASR retrained inside +-0.05 (equivalence; fails when it
  lies wholly outside), and likewise clean accuracy after - retrained inside +-0.02;
- the certificate holds: in every run no released model above the budget, no refused request, and every
  released model's true gradient norm on exact embeddings under its bound (report.bounds).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats

REPO = Path(__file__).resolve().parents[1]
PRESET = "threat_unlearning"
RECORD = REPO / "results" / f"{PRESET}.json"
MODELS = ("before", "after", "retrained")
ASR_MARGIN, ACC_MARGIN = 0.05, 0.02


def run_all(data_dir: str, seeds: list[int], methods: list[str], out: Path) -> list[Path]:
    dirs = []
    for method in methods:
        for seed in seeds:
            d = out / f"{method}_s{seed}"
            if not (d / "unlearning.json").exists():
                cmd = ["fgx", "run", f"+experiment={PRESET}", f"unlearning={method}", f"seed={seed}",
                       f"data_dir={data_dir}", f"hydra.run.dir={d}"]
                print(" ".join(cmd), flush=True)
                subprocess.run(cmd, check=True, env={**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"},
                               stdout=subprocess.DEVNULL)
            dirs.append(d)
    return dirs


def read_run(d: Path) -> dict:
    summ = json.loads((d / "summary.json").read_text())
    unl = json.loads((d / "unlearning.json").read_text())
    s = unl["summary"]
    return {"method": unl["method"], "seed": summ["seed"], "run_dir": d.name,
            "asr": {m: s[f"backdoor_asr_{m}"] for m in MODELS},
            "test_accuracy": {m: s[f"backdoor_test_accuracy_{m}"] for m in MODELS},
            "clean_test_accuracy": s["clean_test_accuracy"], "triggered_items": s["backdoor_triggered_items"],
            "removed": s["backdoor_removed"], "backdoor": unl["setup"]["backdoor"],
            "certificate": {k: s.get(k) for k in ("budget", "max_released_bound", "requests_outside_budget",
                                                  "certificate_failed", "true_norm_violations",
                                                  "bounds_true_le_data_dependent", "actions_newton",
                                                  "actions_retrain", "actions_refused", "whole_model_epsilon",
                                                  "whole_model_delta")},
            # what the bound is made of where it is largest, beside the true gradient norm on exact embeddings
            "largest_bound_request": _largest(unl["requests"]),
            "epsilon": unl["requests_config"]["certificate"]["epsilon"],
            "delta": unl["requests_config"]["certificate"]["delta"],
            "provenance": summ["provenance"], "config_sha": summ["config_sha"]}


def _largest(rows: list[dict]) -> dict:
    r = max(rows, key=lambda r: r["bound"])
    return {k: r.get(k) for k in ("request", "bound", "beta", "approx_term", "residue_norm", "rounding_term",
                                  "true_norm", "action")}


def paired(diffs: list[float]) -> dict:
    d = np.asarray(diffs, dtype=np.float64)
    n = d.size
    mean = float(d.mean())
    if n < 2:
        return {"n": n, "mean": mean, "ci95": [float("nan"), float("nan")]}
    half = float(stats.t.ppf(0.975, n - 1) * d.std(ddof=1) / np.sqrt(n))
    return {"n": n, "mean": mean, "sd": float(d.std(ddof=1)), "ci95": [mean - half, mean + half]}


def greater(test: dict) -> str:
    lo, hi = test["ci95"]
    return "holds" if lo > 0 else "fails" if hi < 0 else "inconclusive"


def equivalent(test: dict, margin: float) -> str:
    lo, hi = test["ci95"]
    if -margin < lo and hi < margin:
        return "holds"
    return "fails" if lo >= margin or hi <= -margin else "inconclusive"


def claims(runs: list[dict]) -> list[dict]:
    out = []
    for method in sorted({r["method"] for r in runs}):
        rs = sorted((r for r in runs if r["method"] == method), key=lambda r: r["seed"])
        asr = {m: [r["asr"][m] for r in rs] for m in MODELS}
        acc = {m: [r["test_accuracy"][m] for r in rs] for m in MODELS}
        took = paired(np.subtract(asr["before"], asr["retrained"]))
        removed = paired(np.subtract(asr["before"], asr["after"]))
        like = paired(np.subtract(asr["after"], asr["retrained"]))
        like_acc = paired(np.subtract(acc["after"], acc["retrained"]))
        out += [
            {"method": method, "claim": "the poison took: ASR before > ASR retrained", **took, "status": greater(took)},
            {"method": method, "claim": "unlearning removes the backdoor: ASR before > ASR after", **removed,
             "status": greater(removed)},
            {"method": method, "claim": f"ASR after = ASR retrained within ±{ASR_MARGIN}", **like,
             "status": equivalent(like, ASR_MARGIN)},
            {"method": method, "claim": f"clean accuracy after = retrained within ±{ACC_MARGIN}", **like_acc,
             "status": equivalent(like_acc, ACC_MARGIN)}]
        cert = [r["certificate"] for r in rs]
        ok = all(c["requests_outside_budget"] == 0 and not c["certificate_failed"] and c["actions_refused"] == 0
                 and c["true_norm_violations"] == 0 and c["bounds_true_le_data_dependent"] == 1.0
                 and c["max_released_bound"] <= c["budget"] for c in cert)
        out.append({"method": method, "claim": "the certificate holds for every request of every run "
                    "(released bound <= budget, true gradient norm <= bound, nothing refused)",
                    "n": len(cert), "max_released_bound": max(c["max_released_bound"] for c in cert),
                    "budget": cert[0]["budget"], "retrains": int(sum(c["actions_retrain"] for c in cert)),
                    "epsilon_per_class": rs[0]["epsilon"], "delta_per_class": rs[0]["delta"],
                    "whole_model_epsilon": cert[0]["whole_model_epsilon"],
                    "whole_model_delta": cert[0]["whole_model_delta"], "status": "holds" if ok else "fails"})
    return out


def means(runs: list[dict]) -> list[dict]:
    out = []
    for method in sorted({r["method"] for r in runs}):
        rs = [r for r in runs if r["method"] == method]
        row = {"method": method, "seeds": len(rs),
               "clean_test_accuracy": [float(np.mean([r["clean_test_accuracy"] for r in rs])),
                                       float(np.std([r["clean_test_accuracy"] for r in rs], ddof=1))]}
        for key in ("asr", "test_accuracy"):
            for m in MODELS:
                vals = [r[key][m] for r in rs]
                row[f"{key}_{m}"] = [float(np.mean(vals)), float(np.std(vals, ddof=1))]
        out.append(row)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", help="data root holding Cora (fgx's data_dir)")
    ap.add_argument("--seeds", default="0-9", help="a-b or a,b,c")
    ap.add_argument("--methods", default="scalegun,cgu")
    ap.add_argument("--out", type=Path, help="run folder (default outputs/threat_unlearning/<time>)")
    ap.add_argument("--from-runs", type=Path, help="read completed run folders instead of running")
    ap.add_argument("--record", action="store_true", help=f"write {RECORD.relative_to(REPO)}")
    a = ap.parse_args()
    if a.from_runs:
        out = a.from_runs
        dirs = sorted(d for d in out.iterdir() if (d / "unlearning.json").exists())
    else:
        if not a.data_dir:
            ap.error("--data-dir is needed to run (or --from-runs)")
        lo, _, hi = a.seeds.partition("-")
        seeds = list(range(int(lo), int(hi) + 1)) if hi else [int(s) for s in a.seeds.split(",")]
        out = a.out or Path("outputs") / PRESET / time.strftime("%Y-%m-%d_%H-%M-%S")
        dirs = run_all(a.data_dir, seeds, a.methods.split(","), out)
    runs = [read_run(d) for d in dirs]
    res = {"command": "python scripts/threat_unlearning.py " + " ".join(sys.argv[1:]),
           "preset": f"conf/experiment/{PRESET}.yaml", "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
           "means": means(runs), "claims": claims(runs), "runs": runs}
    for c in res["claims"]:
        ci = c.get("ci95")
        num = f"mean {c['mean']:+.4f} [{ci[0]:+.4f}, {ci[1]:+.4f}]" if ci else \
            f"max bound {c['max_released_bound']:.4g} / budget {c['budget']:.4g}, {c['retrains']} retrains"
        print(f"{c['method']:9s} {c['status']:12s} {c['claim']}: {num} (n = {c['n']})")
    text = json.dumps(res, indent=1, default=float)
    (out / f"{PRESET}.json").write_text(text + "\n")
    if a.record:
        RECORD.write_text(text + "\n")
        print(f"record: {RECORD.relative_to(REPO)}")
    return 0 if all(c["status"] == "holds" for c in res["claims"]) else 1


if __name__ == "__main__":
    sys.exit(main())
