#!/usr/bin/env bash
# Mutation testing of one fgx package with mutmut (the `dev` extra: pip install -e '.[dev]').
#
#   scripts/mutation.sh fgx/algorithms          # also: fgx/privacy, fgx/partition, fgx/federation/channel.py
#   scripts/mutation.sh fgx/partition --report  # rewrite the report from the last run's results
#   scripts/mutation.sh fgx/partition --recheck # re-run the last run's survivors against today's tests
#   scripts/mutation.sh fgx/privacy --sample 300  # a random sample of the package's mutants (seed 0)
#
# mutmut changes one thing at a time in the package's code (an operator, a constant, a dropped call)
# and runs, for each such mutant, the fast-suite tests that execute the mutated function (mutmut maps
# tests to functions in a first, traced run of the suite), stopping at the first failure. A mutant no
# test notices "survives". It all happens in a scratch copy (FGX_MUTATION_DIR, default
# ${TMPDIR:-/tmp}/fgx-mutation/<package>), so mutmut's mutants/ folder never enters the repository.
# Writes docs/mutation/<package>.md: the score and the diff of every survivor (explained in
# docs/testing.md). Run one package at a time with nothing else on the cores (the report gives its
# time); MUTMUT_CHILDREN (default 1) mutants run in parallel. PYTHON picks the interpreter (default: python).
set -euo pipefail
script_start=$(date +%s)
pkg="${1:?usage: scripts/mutation.sh PACKAGE (fgx/algorithms, fgx/privacy, fgx/partition, fgx/federation/channel.py)}"
pkg="${pkg%/}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
case "$pkg" in fgx/*) ;; *) echo "mutation.sh: $pkg is not a package or module under fgx/" >&2; exit 2;; esac
[ -e "$repo/$pkg" ] || { echo "mutation.sh: no $pkg in $repo" >&2; exit 2; }
py="${PYTHON:-python}"
name="$(echo "$pkg" | tr '/.' '__')"
work="${FGX_MUTATION_DIR:-${TMPDIR:-/tmp}/fgx-mutation/$name}"
mode="${2:-}"
case "$mode" in ""|--report|--recheck) ;;
  --sample) sample_size="${3:-}"
    [[ "$sample_size" =~ ^[1-9][0-9]*$ ]] || { echo "mutation.sh: --sample needs a positive number of mutants" >&2; exit 2; } ;;
  *) echo "mutation.sh: unknown option $mode (--report, --recheck, --sample N)" >&2; exit 2;;
esac
# --report needs mutmut only to show survivors' diffs (checked there)
[ "$mode" = --report ] || "$py" -c "import mutmut" 2>/dev/null \
  || { echo "mutation.sh: mutmut is not installed: pip install -e '.[dev]'" >&2; exit 2; }
if [ -n "$mode" ] && [ "$mode" != --sample ]; then
  [ -d "$work/mutants" ] || { echo "mutation.sh: no earlier run in $work" >&2; exit 2; }
else
rm -rf "$work" && mkdir -p "$work"
# the repository as committed plus uncommitted changes (no outputs, caches or earlier mutants)
(cd "$repo" && git ls-files -co --exclude-standard) | while read -r f; do
  [ -f "$repo/$f" ] && mkdir -p "$work/$(dirname "$f")" && cp -p "$repo/$f" "$work/$f"
done
# mutmut copies and imports all of fgx (the tests need every module) but mutates only $pkg
"$py" - "$work" "$pkg" <<'EOF'
import os, sys
from pathlib import Path
work, pkg = Path(sys.argv[1]), sys.argv[2]
skip = sorted(str(p.relative_to(work)) for p in (work / "fgx").rglob("*.py")
              if not (str(p.relative_to(work)) == pkg or str(p.relative_to(work)).startswith(pkg + "/")))
# the fast suite minus files that cost minutes and rarely reach a mutant: fgx in fresh subprocesses or
# Ray/joblib workers, the CLI, loggers and reports (test_config also checks components' validate hooks,
# so the partition list below takes it back); MUTATION_TESTS="tests/a.py tests/b.py" picks others
skip_tests = {"test_reliability.py", "test_scaling.py", "test_loggers.py", "test_hostile_inputs.py",
              "test_config.py", "test_report.py", "test_repro.py"}
# Packages used by every run (a partitioner, a privacy hook, an algorithm) are mapped by mutmut to
# hundreds of integration runs (test_run, test_docs, the tables), and each surviving mutant re-runs all
# of them: hours per package. For those, the package's own unit, mechanism and audit tests run; they are
# the tests meant to tell that the method is wrong, and a mutant they miss is counted as surviving even
# if an integration test would have noticed it (so the score is a lower bound of the whole suite's).
focused = {
    "fgx/partition": "partition mechanism_partition recsys_data aml_by_bank mafalda mechanism_gossip fedgsp "
                     "parallel_data hostile_files accuracy_floors fedgb config early_checks",
    "fgx/privacy": "dp_fedavg metric_dp_accounting mechanism_ce_fedgnn mechanism_fedavg mechanism_gossip mafalda "
                   "privacy_audit privacy_coverage ce_fedgnn channel early_checks",
    "fgx/algorithms": "mechanism_fedavg mechanism_ce_fedgnn mechanism_gossip mechanism_recsys mechanism_personalised "
                      "baselines edge_baselines fedgsp fedgsp_baselines fedsage_plus ce_fedgnn swift_fedgnn dp_fedavg "
                      "eval_model accuracy_floors privacy_audit unlearning mafalda recsys_fedmf recsys_lpsfed "
                      "recsys_fedrec_baselines recsys_graph_models fl_methods graph_methods graph_task diagnostics "
                      "divergence client_batching resume_every_algorithm inference formula_values refusals options "
                      "aml_scale paper_cuts",
    "fgx/unlearning": "unlearning unlearning_attacks unlearning_certificate fast_paths",
    # how a table's ordering is decided, and its checks: their unit tests (the table jobs of
    # test_table_evidence, test_tables and test_repro reach the same code at minutes per mutant)
    "fgx/tables/stats.py": "table_stats",
    "fgx/tables/checks.py": "table_stats",
}
chosen = os.environ.get("MUTATION_TESTS", "").split()
if not chosen and pkg in focused:
    chosen = [f"tests/test_{name}.py" for name in focused[pkg].split()]
tests = chosen or sorted(f"tests/{p.name}" for p in (work / "tests").glob("test_*.py") if p.name not in skip_tests)
missing = [t for t in tests if not (work / t).exists()]
if missing:
    sys.exit(f"mutation.sh: no such test file: {' '.join(missing)}")
# everything else the tests read (conf/, docs/, scripts/, README.md, ...) goes into mutants/ too
others = sorted(p.name + ("/" if p.is_dir() else "") for p in work.iterdir()
                if p.name not in ("fgx", "tests", "mutants", "pyproject.toml") and not p.name.startswith("mutmut"))
# forkserver: each mutant's pytest is forked from a process that has only imported and collected the
# tests. Forked from mutmut's main process (which had run the whole suite), the child deadlocked in
# torch's first parallel op (py-spy: PyG's coalesce) and mutmut reported a "timeout", which it counts
# as a kill, for mutants no test noticed.
lines = ["", "[tool.mutmut]", 'paths_to_mutate = ["fgx/"]', 'process_isolation = "forkserver"', f"also_copy = {others!r}".replace("'", '"'),
         f"tests_dir = {tests!r}".replace("'", '"'), "do_not_mutate = ["] + [f'    "{s}",' for s in skip] + ["]"]
with open(work / "pyproject.toml", "a") as f:
    f.write("\n".join(lines) + "\n")
EOF
fi
export FGX_SHARED_DATA="${FGX_SHARED_DATA:-$(cd "$repo/.." && pwd)/shared/data}"
export CI=true OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
export FGX_MUTATION_STATS="$work/mutants/mutmut-stats.json"   # tests/conftest.py: fastest tests first
unset PYTHONPATH                      # the tests must import the mutated copy, not the repository
commit="$(git -C "$repo" rev-parse --short HEAD)$(git -C "$repo" diff --quiet HEAD -- fgx tests || echo +changes)"
cd "$work"
if [ -z "$mode" ]; then
  start=$(date +%s)
  "$py" -m mutmut run --max-children "${MUTMUT_CHILDREN:-1}" > mutmut.log 2>&1 || { tail -30 mutmut.log >&2; exit 1; }
  echo $(( $(date +%s) - start )) > mutmut.seconds
  echo "$commit" > mutmut.commit
  rm -f mutmut.recheck mutmut.rerun.json mutmut.sample
elif [ "$mode" = --sample ]; then
  # A package whose every mutant would take hours on 2 cores (fgx/privacy: ~3,300, fgx/algorithms:
  # ~14,000) is scored on a simple random sample of its mutants; the report gives the estimate with a
  # 95% interval and every sampled survivor. mutmut has no sampling option and no "generate only"
  # command: a run asked for a mutant that does not exist generates all mutants and maps the tests
  # (saved in mutants/mutmut-stats.json), then stops; the sample is then run by name.
  start=$(date +%s)
  "$py" -m mutmut run --max-children "${MUTMUT_CHILDREN:-1}" "fgx.no_such_mutant" > mutmut.log 2>&1 || true
  grep -q "nothing matches" mutmut.log && [ -f mutants/mutmut-stats.json ] || { tail -30 mutmut.log >&2; exit 1; }
  sample=$("$py" - "$sample_size" "${FGX_MUTATION_SEED:-0}" <<'PY'
import json, pathlib, random, sys
size, seed = int(sys.argv[1]), int(sys.argv[2])
names = sorted(k for meta in pathlib.Path("mutants").rglob("*.meta")
               for k in json.loads(meta.read_text()).get("exit_code_by_key", {}) if k.startswith("fgx."))
picked = sorted(random.Random(seed).sample(names, min(size, len(names))))
pathlib.Path("mutmut.sample").write_text(json.dumps({"seed": seed, "population": len(names), "sample": picked}))
print("\n".join(picked))
PY
)
  # shellcheck disable=SC2086
  "$py" -m mutmut run --max-children "${MUTMUT_CHILDREN:-1}" $sample >> mutmut.log 2>&1 || { tail -30 mutmut.log >&2; exit 1; }
  echo $(( $(date +%s) - start )) > mutmut.seconds
  echo "$commit" > mutmut.commit
  rm -f mutmut.recheck mutmut.rerun.json
elif [ "$mode" = --recheck ]; then
  # tests written since (e.g. for the survivors) go into the scratch copy; the mutated code stays the
  # run's. mutmut maps the new tests in a stats run of its own, then re-runs each survivor.
  cp "$repo"/tests/*.py tests/ && cp "$repo"/tests/*.py mutants/tests/
  # survivors, and timed-out mutants that passed when run alone (forgotten here: the report re-runs them)
  survivors=$("$py" -c '
import json, pathlib
rerun_file = pathlib.Path("mutmut.rerun.json")
rerun = json.loads(rerun_file.read_text()) if rerun_file.exists() else {}
for meta in pathlib.Path("mutants").rglob("*.meta"):
    for k, code in json.loads(meta.read_text()).get("exit_code_by_key", {}).items():
        if k.startswith("fgx.") and (code in (0, 33) or rerun.get(k) == "survived"):
            print(k)
rerun_file.write_text(json.dumps({k: v for k, v in rerun.items() if v != "survived"}, indent=1))')
  start=$(date +%s)
  # shellcheck disable=SC2086
  [ -z "$survivors" ] || "$py" -m mutmut run --max-children "${MUTMUT_CHILDREN:-1}" $survivors > mutmut-recheck.log 2>&1 \
    || { tail -30 mutmut-recheck.log >&2; exit 1; }
  echo "$commit $(( $(date +%s) - start ))" > mutmut.recheck
fi
secs=$(cat mutmut.seconds)
"$py" - "$repo" "$pkg" "$secs" "$mode" "$script_start" <<'EOF'
import json, os, subprocess, sys, time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
repo, pkg, secs, mode, script_start = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
status = Counter()
survivors, timeouts = [], []
for meta in Path("mutants").rglob("*.meta"):
    data = json.loads(meta.read_text())
    for mutant, code in data.get("exit_code_by_key", {}).items():
        if not mutant.startswith("fgx."):
            continue
        kind = {None: "not checked", 0: "survived", 1: "killed", 3: "killed", 33: "no tests", 34: "skipped",
                35: "suspicious", 36: "timeout", -24: "timeout", 24: "timeout", 152: "timeout", 255: "timeout"}.get(code, "killed" if code else "survived")
        status[kind] += 1
        if kind in ("survived", "no tests"):
            survivors.append((mutant, kind))
        elif kind == "timeout":
            timeouts.append(mutant)
# A timeout counts as a kill in mutmut, but a forked test process can also hang for reasons of its own
# (this happened: torch deadlocks after a fork, see above). Each timed-out mutant is run again here, in
# a fresh process with its mapped tests (MUTMUT_CHILDREN at a time) and a limit of 60 s plus 5x their
# traced time: it stays a kill only if the tests fail or hang again. (mutmut has already waited 15x;
# a 20x limit here let each of fgx/partition's six genuine pymetis hangs take minutes, one after another.)
stats = json.loads(Path("mutants/mutmut-stats.json").read_text())
rerun_file = Path("mutmut.rerun.json")      # kept, so that --report and --recheck do not wait on hangs again
rerun = json.loads(rerun_file.read_text()) if rerun_file.exists() else {}


def run_alone(mutant):
    tests = sorted(stats["tests_by_mangled_function_name"].get(mutant.rsplit("__mutmut_", 1)[0], []))
    # 60 s for a fresh process to import torch and collect the tests, which the traced times leave out
    limit = 60 + 5 * sum(stats["duration_by_test"].get(t, 1.0) for t in tests)
    env = {**os.environ, "MUTANT_UNDER_TEST": mutant}
    try:
        code = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
                              cwd="mutants", env=env, capture_output=True, timeout=limit).returncode
        return "killed" if code else "survived"
    except subprocess.TimeoutExpired:
        return "timeout"


todo = [m for m in timeouts if m not in rerun]
with ThreadPoolExecutor(max(1, int(os.environ.get("MUTMUT_CHILDREN", "1")))) as pool:
    rerun.update(zip(todo, pool.map(run_alone, todo)))
for mutant in timeouts:
    if rerun[mutant] == "survived":
        status["timeout"] -= 1
        status["survived"] += 1
        survivors.append((mutant, "survived"))
rerun_file.write_text(json.dumps(rerun, indent=1))
timeouts = [m for m in timeouts if rerun[m] != "survived"]
rerun = {m: rerun[m] for m in rerun if m in timeouts or rerun[m] == "survived"}
killed = status["killed"] + status["timeout"]
checked = killed + status["survived"] + status["no tests"]
score = 100.0 * killed / checked if checked else float("nan")
name = pkg.replace("/", "_").replace(".", "_")
out = repo / "docs" / "mutation" / f"{name}.md"
out.parent.mkdir(parents=True, exist_ok=True)
lines = []
if Path("mutmut.recheck").exists():
    at, took = Path("mutmut.recheck").read_text().split()
    lines += [f"Survivors of that run were run again against the tests of commit {at} "
              f"(`scripts/mutation.sh {pkg} --recheck`, {int(took) // 60} min); the counts below are after it.", ""]
sample = json.loads(Path("mutmut.sample").read_text()) if Path("mutmut.sample").exists() else None
population = sum(1 for meta in Path("mutants").rglob("*.meta")
                 for k in json.loads(meta.read_text()).get("exit_code_by_key", {}) if k.startswith("fgx."))
interval = None
if sample:
    from scipy.stats import binomtest
    ci = binomtest(killed, checked).proportion_ci(confidence_level=0.95, method="wilson")
    interval = [round(100 * ci.low, 1), round(100 * ci.high, 1)]
    lines += [f"A simple random sample of {len(sample['sample'])} of the package's {population} mutants "
              f"(`--sample`, seed {sample['seed']}); the score estimates the package's, with a 95% Wilson "
              f"interval of {interval[0]}% to {interval[1]}%.", ""]
lines += [
         f"**Score: {score:.1f}%** ({killed} killed of {checked}: {status['survived']} survived, "
         f"{status['no tests']} reached by no test; {status['timeout']} of the killed timed out under mutmut and, run "
         f"again alone, failed or hung again; {len(rerun) - len(timeouts)} that timed out under mutmut passed when "
         f"run again and are counted as survivors)", ""]
if survivors:
    try:
        import mutmut  # noqa: F401
    except ImportError:
        sys.exit("mutation.sh: mutmut is not installed (the report shows each survivor's diff with it): pip install -e '.[dev]'")
for mutant, kind in sorted(survivors):
    diff = subprocess.run([sys.executable, "-m", "mutmut", "show", mutant], capture_output=True, text=True).stdout
    lines += [f"## {mutant} ({kind})", "", "```diff", diff.strip(), "```", ""]
if timeouts:   # counted as killed (mutmut's rule), listed so that a hang that is not a kill can be spotted
    outcome = {"killed": "a test failed when run alone", "timeout": "hung again when run alone"}
    lines += ["## Timed out (counted as killed)", ""] + [f"- `{m}`: {outcome[rerun[m]]}" for m in sorted(timeouts)] + [""]
# the whole script's time for the run (mutmut, the re-runs of timed-out mutants, this report); kept, so
# that --recheck and --report name the run's own
wall_file = Path("mutmut.wall")
if mode in ("", "--sample"):
    wall_file.write_text(str(int(time.time()) - script_start))
wall = int(wall_file.read_text()) if wall_file.exists() else None
whole = f" ({wall // 60} min for the whole script, re-runs of timed-out mutants and this report included)" if wall else ""
lines = [f"# Mutation testing: `{pkg}`", "",
         f"Written by `scripts/mutation.sh {pkg}` (mutmut, fast-suite tests mapped to each mutated function); "
         f"{secs // 60} min on this machine{whole}, code and tests of commit {Path('mutmut.commit').read_text().strip()}. "
         f"Survivors are explained in docs/testing.md.", ""] + lines
out.write_text("\n".join(lines))
record = {"package": pkg, "commit": Path("mutmut.commit").read_text().strip(),
          "recheck": Path("mutmut.recheck").read_text().split()[0] if Path("mutmut.recheck").exists() else None,
          "minutes": secs // 60, "script_minutes": wall // 60 if wall else None, "mutants": population, "sampled": len(sample["sample"]) if sample else None,
          "checked": checked, "killed": killed, "survived": status["survived"], "no_tests": status["no tests"],
          "score": round(score, 1), "interval95": interval}
out.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
# docs/mutation/README.md: every package's latest record and the score over all of them, each package
# weighted by its number of mutants (a sampled package by its estimated score)
records = [json.loads(f.read_text()) for f in sorted(out.parent.glob("*.json"))]
for md in sorted(out.parent.glob("fgx_*.md")):   # a report from before the JSON records: its score line
    if not md.with_suffix(".json").exists():
        import re
        text = md.read_text()
        score_line = re.search(r"\*\*Score: ([0-9.]+)%\*\* \((\d+) killed of (\d+)", text)
        head = re.search(r"^# Mutation testing: `([^`]+)`", text, re.M)
        minutes = re.search(r"; (\d+) min on this machine", text)
        if score_line and head:
            records.append({"package": head.group(1), "commit": "(not recorded)", "recheck": None,
                            "minutes": int(minutes.group(1)) if minutes else None, "mutants": int(score_line.group(3)),
                            "sampled": None, "checked": int(score_line.group(3)), "killed": int(score_line.group(2)),
                            "score": float(score_line.group(1)), "interval95": None})
records.sort(key=lambda r: r["package"])
total = sum(r["mutants"] for r in records)
overall = sum(r["score"] * r["mutants"] for r in records) / total
rows = ["# Mutation scores", "", "Written by `scripts/mutation.sh` from the records beside this file.", "",
        "| package | mutants | scored | score | 95% interval | commit (recheck) | minutes: mutmut (whole script) |", "|---|---|---|---|---|---|---|"]
for r in records:
    scored = f"sample of {r['sampled']}" if r["sampled"] else "all"
    ci = f"{r['interval95'][0]}–{r['interval95'][1]} %" if r["interval95"] else "exact"
    at = r["commit"] + (f" ({r['recheck']})" if r["recheck"] else "")
    took = f"{r['minutes']} ({r['script_minutes']})" if r.get("script_minutes") else f"{r['minutes']}"
    rows.append(f"| `{r['package']}` | {r['mutants']} | {scored} | {r['score']} % | {ci} | {at} | {took} |")
rows += ["", f"**Over the {len(records)} packages: {overall:.1f}%** of {total} mutants killed (each package weighted "
         "by its number of mutants; a sampled package counts with its estimated score).", ""]
(out.parent / "README.md").write_text("\n".join(rows))
print(f"{pkg}: score {score:.1f}% ({killed}/{checked}); {len(survivors)} survivors -> {out}")
EOF
