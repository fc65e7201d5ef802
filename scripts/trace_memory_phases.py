"""The resident set and glibc's heap against the phases of one `fgx run`: what sets its peak, and
whether what grows is kept or only left in the heap.

    OMP_NUM_THREADS=1 python scripts/trace_memory_phases.py --name fedavg_100k_1000 -- algorithm=fedavg \\
        executor=batched dataset=csbm dataset.num_nodes=100000 partitioner=metis partitioner.num_clients=1000 ...
    # the same run under another allocator setting: --env MALLOC_MMAP_THRESHOLD_=1048576

Per phase, in order (set-up: data and partition, clients, partition statistics, algorithm and
evaluator; then per round: configure, the clients' training, aggregate, server update, evaluation,
the rest of the round): the resident set (VmRSS, sampled every --interval s) at its start, its peak
inside and at its end, and glibc's heap at its end (mallinfo2: bytes in use, free inside the heap,
in mmapped blocks). A heap whose free part grows while its in-use part does not is fragmentation;
an in-use part that grows is what the run keeps. Round times come from the run's metrics.jsonl.
Writes <out>/<name>.json (command, commit, environment, phases, peak) and prints the table.
memray (scripts/profile_memory.py) names the lines that allocated what is alive at the heap's peak;
this names the phase, and the resident set, which is what bench_scale.py compares."""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SETUP = {"build_clients": "set-up: clients", "partition_stats": "set-up: partition statistics"}
ROUND_PHASES = ("configure", "aggregate", "server_update")


def status_mb(key: str) -> float:
    from fgx.bench import proc_status     # torch-free: the sampler starts before fgx's imports
    return proc_status(os.getpid())[key] / 1024


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                "fsmblks", "uordblks", "fordblks", "keepcost")]


def heap_reader():
    """glibc's heap now (MB in use, free inside the heap, in mmapped blocks), or None without mallinfo2."""
    try:
        f = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError, TypeError):
        return lambda: None
    f.restype = _MallInfo2
    mb = 1 << 20

    def read():
        m = f()
        return {"heap_in_use_mb": round(m.uordblks / mb, 1), "heap_free_mb": round(m.fordblks / mb, 1),
                "mmapped_mb": round(m.hblkhd / mb, 1)}
    return read


class Tracer:
    """Phases one after another; a sampling thread keeps each one's peak resident set."""

    def __init__(self, interval: float):
        self.rows, self.cur, self.round = [], None, 0
        self.heap, self.lock, self.t0 = heap_reader(), threading.Lock(), time.time()
        threading.Thread(target=self._sample, args=(interval,), daemon=True).start()

    def _sample(self, interval: float) -> None:
        while True:
            r = status_mb("VmRSS")
            with self.lock:
                if self.cur is not None:
                    self.cur["rss_peak_mb"] = max(self.cur["rss_peak_mb"], r)
            time.sleep(interval)

    def begin(self, phase: str) -> None:
        r = status_mb("VmRSS")
        with self.lock:
            self._close(r)
            self.cur = {"phase": phase, "round": self.round, "start_s": round(time.time() - self.t0, 3),
                        "rss_start_mb": r, "rss_peak_mb": r}

    def _close(self, r: float) -> None:
        if self.cur is not None:
            self.cur.update(rss_peak_mb=max(self.cur["rss_peak_mb"], r), rss_end_mb=r, **(self.heap() or {}),
                            seconds=round(time.time() - self.t0 - self.cur["start_s"], 3))
            self.cur = {k: round(v, 1) if isinstance(v, float) and k.endswith("_mb") else v for k, v in self.cur.items()}
            self.rows.append(self.cur)
            self.cur = None

    def end(self) -> None:
        with self.lock:
            self._close(status_mb("VmRSS"))

    def phase(self, fn, name: str, after: str):
        """``fn`` run as phase ``name``; what follows it until the next phase is ``after``."""
        def wrapped(*args, **kwargs):
            self.begin(name)
            try:
                return fn(*args, **kwargs)
            finally:
                self.begin(after)
        return wrapped


def child(a) -> None:
    """Runs `fgx run` in this process with the phases instrumented; writes the phases to a.child."""
    tracer = Tracer(a.interval)
    tracer.begin("set-up: start, data and partition")
    from fgx import launch, trainer

    for fn, label in SETUP.items():
        setattr(trainer, fn, tracer.phase(getattr(trainer, fn), label, label + " done"))
    build = trainer._build

    def traced_build(*args, **kwargs):
        job = build(*args, **kwargs)
        start_round = job.executor.start_round

        def new_round(seed, r):
            tracer.round = r
            return start_round(seed, r)
        job.executor.start_round = new_round
        job.executor.map = tracer.phase(job.executor.map, "clients' training", "after training")
        for name in ROUND_PHASES:      # instance attributes: Algorithm.round calls self.<phase>
            setattr(job.algo, name, tracer.phase(getattr(job.algo, name), name, f"after {name}"))
        tracer.begin("after set-up")
        return job

    trainer._build = traced_build
    evaluate = trainer.Evaluator.__call__
    trainer.Evaluator.__call__ = tracer.phase(evaluate, "evaluation", "after evaluation")
    code = launch.run(a.overrides)
    tracer.end()
    Path(a.child).write_text(json.dumps({"exit": code, "phases": tracer.rows, "rss_peak_mb": round(status_mb("VmHWM"), 1)}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", required=True, help="stem of the output file")
    ap.add_argument("--out", default=str(REPO / "results" / "benchmarks" / "memory"))
    ap.add_argument("--interval", type=float, default=0.01, help="seconds between resident-set samples")
    ap.add_argument("--env", nargs="*", default=[], metavar="KEY=VALUE", help="environment of the run")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("overrides", nargs="+", help="fgx run overrides (after --)")
    a = ap.parse_args()
    if a.child:
        return child(a)
    env = dict(os.environ)
    for kv in a.env:
        k, sep, v = kv.partition("=")
        if not sep or not k:
            raise SystemExit(f"trace_memory_phases: --env takes KEY=VALUE, not {kv!r}")
        env[k] = v
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "phases.json"
        run_dir = Path(tmp) / "run"
        overrides = [*a.overrides, "output.progress=off", "output.checkpoint=false", f"hydra.run.dir={run_dir}"]
        cmd = [sys.executable, __file__, "--name", a.name, "--interval", str(a.interval), "--child", str(out), "--",
               *overrides]
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
        if proc.returncode != 0 or not out.exists():
            raise SystemExit(f"trace_memory_phases: the run failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        traced = json.loads(out.read_text())
        if traced["exit"] != 0:
            raise SystemExit(f"trace_memory_phases: fgx run exited {traced['exit']}:\n{proc.stderr[-3000:]}")
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    round_s = {r["round"]: r["round_time_s"] for r in rows}
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    # the record names no path of this machine: a data root is written as the placeholder
    shown = [o if not o.startswith("data_dir=") else "data_dir=<data root>" for o in a.overrides]
    # an environment value may name a file of this machine (LD_PRELOAD=<python prefix>/.../libjemalloc.so)
    env_shown = [kv.replace(sys.prefix, "<python prefix>").replace(str(REPO.parent), "<repository parent>")
                 for kv in a.env]
    result = {"bench": "memory_phases", "command": "fgx run " + " ".join(shown), "env": env_shown, "commit": commit,
              "rss_peak_mb": traced["rss_peak_mb"], "round_s": [round(round_s[k], 4) for k in sorted(round_s)],
              "phases": traced["phases"]}
    Path(a.out).mkdir(parents=True, exist_ok=True)
    (Path(a.out) / f"{a.name}.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"peak RSS {result['rss_peak_mb']:,.1f} MB; rounds {result['round_s']} s  ({result['command']}, {commit}"
          f"{', ' + ' '.join(env_shown) if env_shown else ''})")
    print(f"{'round':>5} {'phase':34} {'RSS start':>9} {'peak':>7} {'end':>7} {'heap used':>9} {'free':>6} {'mmap':>6}")
    for p in result["phases"]:
        print(f"{p['round']:>5} {p['phase'][:34]:34} {p['rss_start_mb']:9.1f} {p['rss_peak_mb']:7.1f} {p['rss_end_mb']:7.1f}"
              f" {p.get('heap_in_use_mb', float('nan')):9.1f} {p.get('heap_free_mb', float('nan')):6.1f}"
              f" {p.get('mmapped_mb', float('nan')):6.1f}")


if __name__ == "__main__":
    main()
