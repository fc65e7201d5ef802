"""Attack AUCs of an unlearning table's record for the three models (unlearned, retrained, never updated),
mean ± sample std over seeds, and the paired differences unlearned − retrained and never-updated −
retrained with their 95 % t-interval over seeds (docs/unlearning.md, *Attacks*).

    python scripts/unlearning_attacks.py results/scalegun_cora_table8.json [--method scalegun] [--json FILE]

A record's runs each carry the unlearning summary (``summary.unlearning``); runs are grouped by their
``unlearning`` override and paired by seed."""
from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy.stats import t as student_t

MODELS = ("unlearned", "retrained", "never_updated")


def collect(record: dict) -> dict:
    """method -> attack -> model -> {seed: AUC}."""
    out: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(dict)))
    for run in record["runs"]:
        u = (run.get("summary") or {}).get("unlearning") or {}
        method, seed = run["overrides"].get("unlearning", u.get("method")), run["overrides"].get("seed")
        for key, value in u.items():
            for model in MODELS:
                if key.endswith(f"_auc_{model}") and isinstance(value, float):
                    out[method][key[:-len(f"_auc_{model}")]][model][seed] = value
    return out


def interval(diffs: list[float]) -> tuple[float, float, float]:
    """Mean and 95 % t-interval of paired differences (the interval is 0 wide with one seed)."""
    d = np.asarray(diffs, dtype=float)
    if d.size < 2:
        return float(d.mean()), float(d.mean()), float(d.mean())
    half = student_t.ppf(0.975, d.size - 1) * d.std(ddof=1) / np.sqrt(d.size)
    return float(d.mean()), float(d.mean() - half), float(d.mean() + half)


def table(record: dict, methods: list[str] | None = None) -> list[dict]:
    rows = []
    for method, attacks in collect(record).items():
        if methods and method not in methods:
            continue
        for attack, models in attacks.items():
            seeds = sorted(set.intersection(*(set(models[m]) for m in MODELS)))
            if not seeds:
                continue
            row = {"method": method, "attack": attack, "seeds": seeds}
            for m in MODELS:
                vals = [models[m][s] for s in seeds]
                row[m] = (float(np.mean(vals)), float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0)
            for m in ("unlearned", "never_updated"):
                row[f"{m}_minus_retrained"] = interval([models[m][s] - models["retrained"][s] for s in seeds])
            rows.append(row)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("record", type=Path)
    ap.add_argument("--method", action="append", help="only these unlearning methods (repeatable)")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = ap.parse_args()
    rows = table(json.loads(args.record.read_text()), args.method)
    print("| method | attack | unlearned | retrained | never updated | unlearned − retrained (95% CI) | "
          "never updated − retrained (95% CI) | seeds |")
    print("|---|---|---|---|---|---|---|---:|")
    for r in rows:
        cells = [f"{r[m][0]:.3f} ± {r[m][1]:.3f}" for m in MODELS]
        diffs = [f"{d[0]:+.3f} [{d[1]:+.3f}, {d[2]:+.3f}]"
                 for d in (r["unlearned_minus_retrained"], r["never_updated_minus_retrained"])]
        print(f"| {r['method']} | {r['attack']} | " + " | ".join(cells + diffs) + f" | {len(r['seeds'])} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
