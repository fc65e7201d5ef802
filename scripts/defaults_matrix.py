"""The learns-by-default matrix (issue #66): every registered algorithm on one small dataset of every
family its registration declares (its `tasks`), one seed, every value at its default (the algorithm's,
the dataset's partitioner and model, `rounds`), judged by fgx/learns.py: it learns (its headline test
number clears the trivial baseline by the stated margin, no divergence), it does not, or fgx refuses the
combination before any work with a reason (a declared refusal, exit 2).

    python scripts/defaults_matrix.py --record               # run every case, write results/defaults_matrix.json
    python scripts/defaults_matrix.py --record --only fedgsp # rerun one algorithm's cases, merged into the record
    python scripts/defaults_matrix.py --render               # docs/defaults.md from the record (statuses computed)

Each case runs `fgx run algorithm=A <family's dataset> seed=0 data_dir=<data root>` in its own process (one
thread; on a shared machine run it under nice). The record keeps each run's summary (status, metrics, the
trivial baseline's inputs, provenance and code fingerprint); nothing in docs/defaults.md is typed."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RECORD = REPO / "results" / "defaults_matrix.json"
DOC = REPO / "docs" / "defaults.md"
DATA_ROOT = "../shared/data"        # relative to the repository, as the tests read it


@dataclass(frozen=True)
class Family:
    name: str
    task: str
    dataset: tuple[str, ...]        # overrides that pick the family's dataset (its own partitioner and model)
    what: str


FAMILIES = (
    Family("homophilous node", "node", ("dataset=cora",), "Cora (real, 2,708 nodes), Louvain, 10 clients"),
    Family("heterophilous node", "node",
           ("dataset=hetero_homophily", "dataset.homophily_min=0.1", "dataset.homophily_max=0.3"),
           "generated: 10 communities of 300 nodes, edge homophily 0.1-0.3, one client each"),
    Family("graph classification", "graph", ("dataset=mutag",), "MUTAG (real, 188 graphs), 4 clients at random"),
    Family("edge (AML)", "edge", ("dataset=aml_tiny",), "generated AMLworld-format transactions, 4 banks"),
    Family("recommendation", "ranking", ("dataset=movielens100k",), "MovieLens-100K (real), spectral clients"),
    Family("decentralised", "regression", ("dataset=synthetic_regression",),
           "generated Housing-like regression, 15 nodes on a topology"),
    Family("link prediction", "link", ("task=link", "dataset=cora"),
           "Cora's edges as node pairs (task=link: random 80/10/10 split), Louvain, 10 clients"),
)
# beside one dataset per family: the cases an issue named (FedGSP must learn on real heterophilous data)
EXTRA = (("fedgsp", Family("heterophilous node (real)", "node", ("dataset=minesweeper",),
                           "Minesweeper (real, 10,000 nodes), Louvain, 10 clients")),)


@dataclass
class Case:
    algorithm: str
    family: Family
    overrides: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.algorithm} | {self.family.name}"


def cases(only: list[str] | None = None) -> list[Case]:
    """Every registered algorithm x every family of a task it declares, and the EXTRA cases."""
    from fgx.registry import ALGORITHMS

    out = []
    for name in ALGORITHMS.names():
        tasks = ALGORITHMS.get(name).meta.get("tasks") or ()
        out += [Case(name, f) for f in FAMILIES if f.task in tasks]
    out += [Case(a, f) for a, f in EXTRA]
    for c in out:
        c.overrides = [f"algorithm={c.algorithm}", *c.family.dataset, "seed=0"]
    return [c for c in out if not only or c.algorithm in only]


def run_case(case: Case, data_root: str = DATA_ROOT, timeout: int = 3600) -> dict:
    """One case in its own process: the record entry (summary subset, or the refusal's message)."""
    with tempfile.TemporaryDirectory(prefix="fgx_defaults_") as tmp:
        run_dir = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "fgx.cli", "run", *case.overrides, f"data_dir={data_root}",
               "output.checkpoint=false", "output.progress=plain", f"hydra.run.dir={run_dir}"]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "CI": "true"}
        t = time.time()
        p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
        entry = {"algorithm": case.algorithm, "family": case.family.name, "overrides": case.overrides,
                 "rc": p.returncode, "process_s": round(time.time() - t, 1)}
        summary_file = run_dir / "summary.json"
        if summary_file.exists():
            s = json.loads(summary_file.read_text())
            entry["summary"] = {k: s.get(k) for k in ("status", "main_metric", "final", "best", "rounds", "diverged",
                                                      "error", "components", "data", "wall_time_s", "total_bytes",
                                                      "diagnostics", "provenance")}
            log = run_dir / "fgx.log"
            work = [line.split("local work: ", 1)[1] for line in log.read_text().splitlines()
                    if "local work: " in line] if log.exists() else []
            entry["local_work"] = work[0] if work else None
        elif refusal(p.stderr):        # refused before any work: the message says why
            entry["refusal"] = refusal(p.stderr)
        else:
            entry["error"] = "\n".join(p.stderr.strip().splitlines()[-5:])
        return entry


def refusal(stderr: str) -> str | None:
    """fgx's refusal of a config before any work (`fgx: config error: ...`, no run directory), or None."""
    last = (stderr.strip().splitlines() or [""])[-1]
    return last if last.startswith("fgx: config error") else None


def status(entry: dict) -> dict:
    """The case's status, computed from its record entry (fgx/learns.py)."""
    from fgx.learns import judge

    if "refusal" in entry:
        return {"status": "refuses", "why": entry["refusal"]}
    if "summary" not in entry:
        return {"status": "failed", "why": entry.get("error", "")}
    return judge(entry["summary"])


def record(entries: list[dict], command: str) -> dict:
    from fgx.provenance import provenance

    old = json.loads(RECORD.read_text()) if RECORD.exists() else {"cases": []}
    new = {(e["algorithm"], e["family"]): e for e in entries}
    kept = [e for e in old["cases"] if (e["algorithm"], e["family"]) not in new]
    order = {c.key: i for i, c in enumerate(cases())}
    merged = sorted(kept + list(new.values()), key=lambda e: order.get(f"{e['algorithm']} | {e['family']}", 1e9))
    from fgx.learns import MARGIN, MSE_SHARE, NDCG_FLOOR

    out = {"what": "learns-by-default matrix (scripts/defaults_matrix.py, issue #66)",
           "rule": {"margin": MARGIN, "ndcg_floor": NDCG_FLOOR, "mse_share": MSE_SHARE},
           "families": {f.name: {"task": f.task, "overrides": list(f.dataset), "what": f.what}
                        for f in (*FAMILIES, *(f for _, f in EXTRA))},
           "last_command": provenance(command), "cases": merged}
    from fgx.outputs import atomic_write_bytes, dumps

    atomic_write_bytes(RECORD, (dumps(out) + "\n").encode())
    return out


def _fmt(x) -> str:
    return "-" if not isinstance(x, (int, float)) or x != x else f"{x:.3f}"


def clustering(diag: dict) -> str:
    """GCFL/GCFL+: whether and when the clients were split, and how far the closest round was from the split
    condition (a split needs the mean update norm below eps1); empty for other algorithms."""
    if "clusters" not in diag:
        return ""
    first = diag.get("first_split_round")
    when = f"first split in round {first['min']:.0f}" if first else "never split"
    norm = diag.get("mean_norm_over_eps1") or {}
    return (f"{when}, {diag['clusters']['last']:.0f} cluster(s) at the end"
            + (f"; mean update norm >= {norm['min']:.1f} x eps1" if "min" in norm else ""))


def render(rec: dict) -> str:
    """docs/defaults.md: the families, the matrix (status per algorithm x family) and one row per case."""
    from fgx.report.table import to_markdown

    fams = list(rec["families"])
    by = {(e["algorithm"], e["family"]): (e, status(e)) for e in rec["cases"]}
    algos = sorted({a for a, _ in by})
    lines = ["# Defaults that learn", "",
             "Every registered algorithm on one small dataset of every family its registration declares, one seed "
             "(0), every value at its default: the algorithm's, the dataset's partitioner and model, `rounds`. "
             "Written by `python scripts/defaults_matrix.py --record` into "
             "[results/defaults_matrix.json](../results/defaults_matrix.json) and rendered by "
             "`python scripts/defaults_matrix.py --render`; every status below is computed from that record by "
             "`fgx/learns.py` (`tests/test_defaults_learn.py` checks this page against it, and "
             "`python -m pytest -m slow tests/test_defaults_learn.py` reruns the cases).", "",
             "**learns**: the final test metric (mean over clients) clears the trivial baseline by the margin; "
             "**does not learn**: it does not; **diverged**: the training loss diverged (the run stopped, "
             "`fgx/divergence.py`); **refuses**: fgx refuses the combination before any work, with the reason; "
             "`·`: the algorithm does not declare the family's task.", "",
             f"Rule (`fgx/learns.py`): accuracy > majority-class rate + {rec['rule']['margin']}; ROC-AUC > 0.5 + "
             f"{rec['rule']['margin']}; minority F1 > the F1 of flagging every item + {rec['rule']['margin']}; "
             f"NDCG@20 > {rec['rule']['ndcg_floor']} (a random ranking: ~0.01); MSE < {rec['rule']['mse_share']} x "
             f"the MSE of predicting the training mean.", "", "## Families", ""]
    lines += [to_markdown(["family", "task", "dataset", "overrides"],
                          [[n, f["task"], f["what"], " ".join(f"`{o}`" for o in f["overrides"])]
                           for n, f in rec["families"].items()]), "", "## The matrix", ""]
    rows = [[f"`{a}`"] + [by[(a, f)][1]["status"] if (a, f) in by else "·" for f in fams] for a in algos]
    lines += [to_markdown(["algorithm"] + fams, rows), ""]
    counts: dict[str, int] = {}
    for _, st in by.values():
        counts[st["status"]] = counts.get(st["status"], 0) + 1
    lines += [f"{len(by)} cases: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) + ".", "",
              "## Every case", ""]
    rows = []
    for (a, f), (e, st) in by.items():
        s = e.get("summary") or {}
        comp = s.get("components") or {}
        rows.append([f"`{a}`", f, st["status"], st.get("metric") or "-", _fmt(st.get("value")),
                     _fmt(st.get("baseline")), _fmt(st.get("threshold")),
                     f"{comp.get('model', '-')}, {comp.get('partitioner', '-')}", str(s.get("rounds") or "-"),
                     (e.get("local_work") or "-").split(" (")[0],
                     _fmt(s.get("wall_time_s")).replace(".000", "") if s else "-",
                     (st.get("why") or (f"round {s['diverged']['round']}" if s.get("diverged") else "")
                      or clustering(s.get("diagnostics") or {}))[:160]])
    lines += [to_markdown(["algorithm", "family", "status", "metric", "final", "baseline", "needs", "model, partitioner",
                           "rounds", "local work per round", "wall s", "note"], rows), ""]
    prov = rec.get("last_command") or {}
    lines += [f"Last recorded: `{prov.get('command', '?')}` at commit {prov.get('commit', '?')} "
              f"({prov.get('date', '?')}); each case's own provenance and code fingerprint are in the record.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--record", action="store_true", help="run the cases and merge them into the record")
    ap.add_argument("--render", action="store_true", help="write docs/defaults.md from the record")
    ap.add_argument("--only", action="append", help="algorithm(s) to run (repeatable)")
    ap.add_argument("--family", action="append", help="family name(s) to run (repeatable)")
    ap.add_argument("--data-dir", default=DATA_ROOT)
    args = ap.parse_args(argv)
    if args.record:
        todo = [c for c in cases(args.only) if not args.family or c.family.name in args.family]
        command = " ".join(["python scripts/defaults_matrix.py", *(argv if argv is not None else sys.argv[1:])])
        done = []
        for i, c in enumerate(todo, 1):
            e = run_case(c, args.data_dir)
            done.append(e)
            st = status(e)
            print(f"[{i}/{len(todo)}] {c.key}: {st['status']} {st.get('metric') or ''} {_fmt(st.get('value'))} "
                  f"(needs {_fmt(st.get('threshold'))}) {e['process_s']}s", flush=True)
            record(done, command)           # after every case: a killed matrix keeps what it ran
    if args.render or args.record:
        DOC.write_text(render(json.loads(RECORD.read_text())))
        print(f"wrote {DOC.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
