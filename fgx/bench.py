"""The small harness every benchmark in scripts/ shares: interleaved repeats, median and spread,
whole-process wall time and peak RSS of a child process, and one final JSON line.

    from fgx.bench import Bench, run_process
    bench = Bench(repeats=3)
    bench.run({"fgx": lambda rep: {...measurements...}, "peer": lambda rep: {...}})
    bench.print_table()              # one row per variant: median [min, max] of every measurement
    bench.final_json({...})          # the line a script's caller parses

Repeats are interleaved (fgx, peer, fgx, peer, ...), so that a slow phase of a shared machine hits
every variant alike, and the median of the repeats is reported with its range."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping


@dataclass
class ProcessResult:
    """One child process: its exit status, whole-process wall time and peak resident memory."""
    returncode: int
    wall_s: float
    peak_rss_mb: float
    stdout: str
    stderr: str
    limit: str | None = None      # "timeout" or "memory": the child was killed for passing that limit
    cpu_s: float = 0.0            # the child's user + system CPU seconds (wait4): its wall time on a free core

    def check(self, what: str) -> "ProcessResult":
        if self.returncode != 0:
            tail = "\n".join((self.stderr or self.stdout).strip().splitlines()[-15:])
            raise RuntimeError(f"{what} failed with exit status {self.returncode}:\n{tail}")
        return self


def proc_status(pid: int) -> dict[str, int]:
    """The kB counters of /proc/<pid>/status (VmRSS, VmHWM, ...)."""
    with open(f"/proc/{pid}/status") as f:
        return {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in f if line.startswith("Vm"))}


_ROLLUP = os.path.exists("/proc/self/smaps_rollup")   # Linux >= 4.14


def _private_kb(pid: int) -> int:
    """The pages only this process maps (smaps_rollup's Private_Clean + Private_Dirty); 0 for a process
    caught between fork and exec or already gone; VmRSS where the kernel has no smaps_rollup."""
    if not _ROLLUP:
        return proc_status(pid).get("VmRSS", 0)
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return sum(int(line.split()[1]) for line in f if line.startswith(("Private_Clean:", "Private_Dirty:")))
    except (OSError, ValueError, IndexError):
        return 0


def _same_pages(vm: dict[str, int], parent: dict[str, int] | None) -> bool:
    """A child that still maps its parent's pages: started by fork, clone(CLONE_VM) or vfork and not
    yet exec'd (Python's subprocess), or a forked worker that has allocated nothing of its own."""
    if parent is None or (vm.get("VmPeak"), vm.get("VmSize")) != (parent.get("VmPeak"), parent.get("VmSize")):
        return False
    return abs(vm.get("VmRSS", 0) - parent.get("VmRSS", 0)) <= 0.01 * parent.get("VmRSS", 0) + 1024


def _tree_usage(pid: int) -> tuple[float, float]:
    """Resident memory (MB) and CPU seconds (user + system) of ``pid`` and all its live descendants,
    from /proc (0 where it is gone). Read by hand rather than with psutil, which fgx does not depend
    on; wait4 gives only the child's own peak, not its descendants' live usage.

    The child counts with its whole resident set, each descendant with the pages it alone maps, and a
    descendant that still maps its parent's pages with none. Summing VmRSS counted such pages twice:
    a 9 GB child that starts `git` is, between clone and exec, a second 9 GB process (sharing the
    child's memory), and a scale-bench run read 18 GB that way."""
    rss, cpu, todo = 0.0, 0.0, [(pid, None)]
    tick = os.sysconf("SC_CLK_TCK")
    while todo:
        p, parent = todo.pop()
        try:
            vm = proc_status(p)
            if p == pid:
                rss += vm.get("VmRSS", 0) / 1024.0
            elif not _same_pages(vm, parent):
                rss += _private_kb(p) / 1024.0
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            cpu += (int(fields[11]) + int(fields[12])) / tick        # utime, stime (fields 14, 15 of stat)
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [(int(c), vm) for c in f.read().split()]
        except (OSError, ValueError, IndexError):
            continue
    return rss, cpu


def run_process(cmd: list[str], env: Mapping[str, str] | None = None, cwd: str | Path | None = None,
                timeout: float | None = None, mem_limit_mb: float | None = None,
                raise_on_timeout: bool = True, cpu_timeout: float | None = None, poll_s: float = 0.1) -> ProcessResult:
    """Run ``cmd`` to completion. Peak RSS is the child's own, from ``wait4`` (``RUSAGE_CHILDREN``
    would give the largest child this process ever had); its output goes to temporary files, so a
    chatty child can never block on a full pipe. On Linux a child's peak RSS is at least this
    process's RSS when it starts the child (exec keeps the old address space's high-water mark):
    a benchmark that compares peak RSS keeps its own process small (no torch import).

    ``mem_limit_mb``: a watchdog reads the resident memory of the child and its descendants every
    ``poll_s`` seconds and kills them all once it passes the limit (``limit="memory"``); a child whose
    ``wait4`` peak passes it between two reads counts as over it too. Resident memory, not address
    space: RLIMIT_AS would also count torch's reserved but untouched virtual memory. ``timeout``
    kills the child (with a memory limit: its whole process group); it raises unless ``raise_on_timeout=False`` (then
    ``limit="timeout"``). ``cpu_timeout``: the same watchdog kills the child once the CPU seconds of
    its tree pass it (``limit="timeout"``): a limit that other work on a shared machine cannot
    shorten."""
    full_env = {**os.environ, **(env or {})}
    limit: list[str] = []
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        # with a watchdog the child gets its own process group, so that its descendants die with it
        group = bool(mem_limit_mb or cpu_timeout)
        proc = subprocess.Popen(cmd, env=full_env, cwd=cwd, stdout=out, stderr=err, text=True,
                                start_new_session=group)
        done = threading.Event()
        watched_mb = [0.0]

        def kill(why: str) -> None:
            if not done.is_set() and not limit:
                limit.append(why)
                try:
                    os.killpg(proc.pid, 9) if group else proc.kill()
                except OSError:
                    pass

        def watch() -> None:
            while not done.wait(poll_s):
                rss, cpu = _tree_usage(proc.pid)
                watched_mb[0] = max(watched_mb[0], rss)
                if mem_limit_mb and rss > mem_limit_mb:
                    kill("memory")
                    return
                if cpu_timeout and cpu > cpu_timeout:
                    kill("timeout")
                    return

        killer = threading.Timer(timeout, kill, ("timeout",)) if timeout else None
        watcher = threading.Thread(target=watch, daemon=True) if group else None
        for t in (killer, watcher):
            if t:
                t.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            done.set()
            if killer:
                killer.cancel()
        if watcher:
            watcher.join()
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)   # reaped here: Popen must not wait again
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    # ru_maxrss is in KiB on Linux (bytes on macOS)
    rss_mb = max(usage.ru_maxrss / (1024.0 * 1024.0 if sys.platform == "darwin" else 1024.0), watched_mb[0])
    if mem_limit_mb and not limit and rss_mb > mem_limit_mb:
        limit.append("memory")
    if limit == ["timeout"] and raise_on_timeout:
        raise RuntimeError(f"{cmd[0]} ran past {timeout or cpu_timeout} s and was killed")
    return ProcessResult(proc.returncode, wall, rss_mb, stdout, stderr, limit[0] if limit else None,
                         usage.ru_utime + usage.ru_stime)


def _summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


@dataclass
class Bench:
    repeats: int = 3
    results: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    log: Callable[[str], None] = field(default=lambda msg: print(msg, file=sys.stderr, flush=True))

    def run(self, variants: Mapping[str, Callable[[int], dict[str, Any]]], warmup: bool = False) -> None:
        """Call every variant once per repeat, interleaved; each returns a dict of measurements.
        ``warmup``: one untimed call of each first (caches, lazily built files)."""
        if warmup:
            for name, fn in variants.items():
                self.log(f"[bench] warm-up {name}")
                fn(-1)
        for rep in range(self.repeats):
            for name, fn in variants.items():
                row = fn(rep)
                self.results.setdefault(name, []).append(row)
                self.log(f"[bench] {name} repeat {rep + 1}/{self.repeats}: " +
                         ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()
                                   if isinstance(v, (int, float)) and not isinstance(v, bool)))

    def stats(self, name: str) -> dict[str, dict[str, float]]:
        """Per numeric measurement of ``name``: median, min, max and count over the repeats."""
        rows = self.results.get(name, [])
        keys = [k for k in (rows[0] if rows else {}) if all(
            isinstance(r.get(k), (int, float)) and not isinstance(r.get(k), bool) for r in rows)]
        return {k: _summary([float(r[k]) for r in rows]) for k in keys}

    def median(self, name: str, key: str) -> float:
        return self.stats(name)[key]["median"]

    def print_table(self, keys: list[str] | None = None, file=sys.stdout) -> None:
        for name in self.results:
            st = self.stats(name)
            cells = [f"{k} {s['median']:.3f} [{s['min']:.3f}, {s['max']:.3f}]" for k, s in st.items()
                     if keys is None or k in keys]
            print(f"{name:<28} " + "  ".join(cells), file=file, flush=True)


def final_json(obj: Any) -> str:
    """Print (and return) the one-line JSON a benchmark ends with."""
    line = json.dumps(obj, sort_keys=False, separators=(", ", ": "))
    print(line, flush=True)
    return line
