"""Accuracy-vs-removals table from fgx runs with unlearning=scalegun|cgu|retrain (unlearning.json).

    python scripts/unlearning_table.py RUN_DIR [RUN_DIR ...] [--every 50] [--reference scalegun]

Prints test accuracy (%) after every N requests for each run (requests where a run has no accuracy,
e.g. retrain with retrain_every > 1, are taken from its last evaluated request at or before N), the
largest gap of the reference method to each other method over the requests where both have an
accuracy, and the average total / propagation cost per request."""
from __future__ import annotations

import argparse
import json
from pathlib import Path


def load(run: Path) -> dict:
    return json.loads((run / "unlearning.json").read_text())


def accuracy_at(rows: list[dict], n: int, initial: float) -> float:
    acc = initial
    for r in rows:
        if r["request"] > n:
            break
        if r["test_accuracy"] is not None:
            acc = r["test_accuracy"]
    return acc


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--reference", default="scalegun")
    a = ap.parse_args()
    runs = {}
    for r in a.runs:
        u = load(r)
        runs[u["method"]] = u
    names = list(runs)
    total = max(len(u["requests"]) for u in runs.values())
    print("| removed | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for n in range(0, total + 1, a.every):
        cells = [f"{100 * accuracy_at(u['requests'], n, u['setup']['test_accuracy']):.2f}" for u in runs.values()]
        print(f"| {n} | " + " | ".join(cells) + " |")
    print("| Total (s) | " + " | ".join(f"{u['summary']['mean_total_s']:.3f}" for u in runs.values()) + " |")
    print("| Prop (s) | " + " | ".join(f"{u['summary']['mean_propagation_s']:.4f}" for u in runs.values()) + " |")
    print("| #retrain | " + " | ".join(str(u["summary"]["retrain_count"]) for u in runs.values()) + " |")
    if a.reference in runs:
        ref = {r["request"]: r["test_accuracy"] for r in runs[a.reference]["requests"]}
        ref[0] = runs[a.reference]["setup"]["test_accuracy"]
        for name, u in runs.items():
            if name == a.reference:
                continue
            other = {r["request"]: r["test_accuracy"] for r in u["requests"] if r["test_accuracy"] is not None}
            other[0] = u["setup"]["test_accuracy"]
            common = [k for k in other if ref.get(k) is not None]
            gap = max(abs(ref[k] - other[k]) for k in common)
            print(f"\nlargest |{a.reference} - {name}| test-accuracy gap over {len(common)} common points: "
                  f"{100 * gap:.2f} points")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
