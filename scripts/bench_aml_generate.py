"""Bench: generate a full-scale AML preset and write its Kaggle-schema CSV.

    python scripts/bench_aml_generate.py [--preset hi_small] [--scale 1.0] [--seed 0] [--out DIR]

Prints generation and CSV-write time, peak RSS, transactions/s, and the statistics next to the
preset's targets (Table 3 counts, AMLworld illicit ratio) with their relative error."""
from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from fgx.data.aml.csv_io import write_csv_atomic
from fgx.data.aml.generator import generate, to_frames
from fgx.data.aml.presets import get_preset


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="hi_small")
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="folder for Trans.csv (default: a temp dir, removed)")
    a = ap.parse_args()
    p = get_preset(a.preset)
    tmp = None
    if a.out is None:
        tmp = tempfile.TemporaryDirectory(prefix="fgx_aml_bench_")
        a.out = Path(tmp.name)
    t0 = time.perf_counter()
    tx = generate(p, a.scale, a.seed)
    t1 = time.perf_counter()
    write_csv_atomic(to_frames(tx), a.out / "Trans.csv")
    t2 = time.perf_counter()
    n = len(tx)
    accounts = np.unique(np.concatenate([tx.from_account, tx.to_account])).size
    ratio = float(tx.is_laundering.mean())
    print(f"preset {a.preset} scale {a.scale} seed {a.seed}")
    print(f"generate {t1 - t0:.1f}s + write CSV {t2 - t1:.1f}s = {t2 - t0:.1f}s; "
          f"{n / (t2 - t0):,.0f} transactions/s; peak RSS {peak_rss_gb():.2f} GB; "
          f"CSV {(a.out / 'Trans.csv').stat().st_size / 1e9:.2f} GB")
    ok = True
    for name, got, want in [("transactions", n, p.transactions * a.scale),
                            ("accounts (nodes)", accounts, p.accounts * a.scale),
                            ("illicit ratio", ratio, p.illicit_ratio)]:
        err = abs(got - want) / want
        ok &= err <= 0.05
        print(f"  {name:18s} {got:>14,.6g}  target {want:>14,.6g}  error {100 * err:5.2f}%")
    print("statistics within 5% of the targets" if ok else "STATISTICS OFF TARGET (> 5%)")
    if tmp is not None:
        tmp.cleanup()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
