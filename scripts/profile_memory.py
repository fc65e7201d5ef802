"""Where a run's memory goes at its peak: runs one `fgx run` under memray (native allocations, so
torch's tensors count) and sums the allocations alive at the high-water mark by the innermost fgx
source line that made them.

    pip install memray
    OMP_NUM_THREADS=1 python scripts/profile_memory.py --name fedgsp_100k_10 -- algorithm=fedgsp rounds=1 \\
        dataset=csbm dataset.num_nodes=100000 dataset.num_features=64 partitioner=metis partitioner.num_clients=10

Writes <out>/<name>.json (the command, commit, peak and the top lines) and prints the table. memray,
not tracemalloc: tracemalloc sees only Python's allocator, and a tensor's storage is allocated by
torch's C++ code."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def by_fgx_line(records) -> dict[str, int]:
    """Bytes per innermost fgx frame ("path:line function", path under fgx/) of (size, stack) pairs,
    each stack innermost first as memray gives it; allocations with no fgx frame go to "(outside fgx)"."""
    out: dict[str, int] = defaultdict(int)
    for size, stack in records:
        where = next((f"{path.split('/fgx/', 1)[1]}:{line} {func}" for func, path, line in stack
                      if "/fgx/" in path and "/site-packages/" not in path), "(outside fgx)")
        out[where] += size
    return dict(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", required=True, help="stem of the output file")
    ap.add_argument("--out", default=str(REPO / "results" / "benchmarks" / "memory"))
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("overrides", nargs="+", help="fgx run overrides (after --)")
    a = ap.parse_args()
    try:
        from memray import FileReader
    except ImportError:
        raise SystemExit("profile_memory: memray is not installed (pip install memray)")
    overrides = [*a.overrides, "output.progress=off", "output.checkpoint=false"]
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "run.bin"
        cmd = [sys.executable, "-m", "memray", "run", "--native", "-q", "-o", str(trace), "-m", "fgx.cli", "run",
               *overrides, f"hydra.run.dir={tmp}/run"]
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"profile_memory: the run failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        reader = FileReader(str(trace))
        lines = by_fgx_line((r.size, r.stack_trace()) for r in reader.get_high_watermark_allocation_records(merge_threads=True))
        peak = reader.metadata.peak_memory
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    top = sorted(lines.items(), key=lambda kv: -kv[1])[:a.top]
    # the record names no path of this machine: a data root is written as the placeholder
    shown = [o if not o.startswith("data_dir=") else "data_dir=<data root>" for o in a.overrides]
    result = {"bench": "memory_profile", "command": "fgx run " + " ".join(shown), "commit": commit,
              "peak_mb": round(peak / 1e6, 1),
              "top": [{"where": w, "mb": round(b / 1e6, 1), "share": round(b / peak, 4)} for w, b in top]}
    Path(a.out).mkdir(parents=True, exist_ok=True)
    (Path(a.out) / f"{a.name}.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"peak {result['peak_mb']:,.1f} MB  ({result['command']}, {commit})")
    for t in result["top"]:
        print(f"{t['mb']:10,.1f} MB {100 * t['share']:5.1f} %  {t['where']}")


if __name__ == "__main__":
    main()
