"""Bench: load an AMLworld-format CSV into fgx's edge-task graph.

    python scripts/bench_aml_load.py PATH/TO/Trans.csv [--preset hi_small]

Times (1) a plain ``pandas.read_csv`` of the file, (2) fgx's validated read
(``read_transactions``), (3) the whole load including node ids, ports, features and the split, and
prints rows/s and the ratio of fgx's load to the plain read."""
from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import pandas as pd

from fgx.data.aml.csv_io import read_transactions
from fgx.data.aml.features import to_graph
from fgx.data.aml_synth import AmlParams, split_masks


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("csv", type=Path)
    ap.add_argument("--preset", default="hi_small", help="for the day split")
    a = ap.parse_args()
    t0 = time.perf_counter()
    plain = pd.read_csv(a.csv)
    t1 = time.perf_counter()
    rows = len(plain)
    del plain
    t2 = time.perf_counter()
    df = read_transactions(a.csv)
    t3 = time.perf_counter()
    masks = split_masks(AmlParams(preset=a.preset), df)
    data, names = to_graph(df, masks)
    t4 = time.perf_counter()
    fgx_total = t4 - t2
    print(f"{a.csv}: {rows:,} rows, {data.num_nodes:,} nodes, edge features {names}")
    print(f"plain pandas.read_csv  {t1 - t0:6.1f}s  {rows / (t1 - t0):>12,.0f} rows/s")
    print(f"fgx read_transactions  {t3 - t2:6.1f}s  {rows / (t3 - t2):>12,.0f} rows/s  (validated, timestamps parsed)")
    print(f"fgx full load          {fgx_total:6.1f}s  {rows / fgx_total:>12,.0f} rows/s  "
          f"(+ node ids, ports, z-norm, split)")
    print(f"ratio fgx full load / plain read_csv: {fgx_total / (t1 - t0):.2f}; "
          f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2:.2f} GB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
