"""scripts/mutation.sh: its refusals, and the report it writes from a run's results (mutmut itself is
not needed for either: a run's results are mutmut's .meta files, made here by hand)."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "mutation.sh"


def mutation_sh(repo, *args, work=None):
    env = {"PATH": "/usr/bin:/bin", "PYTHON": sys.executable, "HOME": str(repo)}
    if work is not None:
        env["FGX_MUTATION_DIR"] = str(work)
    return subprocess.run(["bash", str(repo / "scripts" / "mutation.sh"), *args], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def repo(tmp_path):
    """A git repository with the script and an fgx/partition package, as the script expects."""
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(SCRIPT, root / "scripts" / "mutation.sh")
    (root / "fgx" / "partition").mkdir(parents=True)
    (root / "fgx" / "partition" / "__init__.py").write_text("")
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-qm", "init"], check=True)
    return root


@pytest.mark.parametrize("args, message", [
    (["fgx/no_such"], "no fgx/no_such in"),
    (["tests"], "tests is not a package or module under fgx/"),
    (["fgx/partition", "--fast"], "unknown option --fast"),
    (["fgx/partition", "--sample", "ten"], "--sample needs a positive number"),
    (["fgx/partition", "--sample", "0"], "--sample needs a positive number"),
    (["fgx/partition", "--report"], "no earlier run in"),
])
def test_refusals_name_the_problem(repo, tmp_path, args, message):
    result = mutation_sh(repo, *args, work=tmp_path / "empty")
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert not (repo / "docs").exists()


def fake_run(work, codes, rerun, seconds=600, wall=None, tests=None):
    meta = work / "mutants" / "fgx" / "partition" / "split.py.meta"
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps({"exit_code_by_key": codes}))
    (work / "mutants" / "mutmut-stats.json").write_text(
        json.dumps({"tests_by_mangled_function_name": tests or {}, "duration_by_test": {}}))
    (work / "mutmut.seconds").write_text(str(seconds))
    (work / "mutmut.commit").write_text("abc1234")
    (work / "mutmut.rerun.json").write_text(json.dumps(rerun))
    if wall is not None:
        (work / "mutmut.wall").write_text(str(wall))


def test_report_counts_kills_and_hangs_and_weights_packages_by_mutants(repo, tmp_path):
    work = tmp_path / "work"
    mutant = "fgx.partition.split.x_split__mutmut_{}".format
    # mutmut's exit codes: 1 and 3 a test failed, 36 and -24 timeouts (re-run: hung again / failed)
    fake_run(work, {mutant(1): 1, mutant(2): 3, mutant(3): 36, mutant(4): -24},
             {mutant(3): "timeout", mutant(4): "killed"}, seconds=650, wall=1530)
    records = repo / "docs" / "mutation"
    records.mkdir(parents=True)
    (records / "fgx_privacy.json").write_text(json.dumps(
        {"package": "fgx/privacy", "commit": "def5678", "recheck": None, "minutes": 19, "script_minutes": 25,
         "mutants": 396, "sampled": 100, "checked": 100, "killed": 50, "score": 50.0, "interval95": [40.4, 59.6]}))
    result = mutation_sh(repo, "fgx/partition", "--report", work=work)
    assert result.returncode == 0, result.stderr
    record = json.loads((records / "fgx_partition.json").read_text())
    assert (record["killed"], record["checked"], record["survived"], record["score"]) == (4, 4, 0, 100.0)
    assert (record["minutes"], record["script_minutes"], record["commit"]) == (10, 25, "abc1234")
    report = (records / "fgx_partition.md").read_text()
    assert "10 min on this machine (25 min for the whole script" in report
    assert f"`{mutant(3)}`: hung again when run alone" in report
    assert f"`{mutant(4)}`: a test failed when run alone" in report
    summary = (records / "README.md").read_text()
    # (100 % x 4 + 50 % x 396) / 400 mutants
    assert "**Over the 2 packages: 50.5%** of 400 mutants" in summary
    assert "| `fgx/partition` | 4 | all | 100.0 % | exact | abc1234 | 10 (25) |" in summary
    assert "| `fgx/privacy` | 396 | sample of 100 | 50.0 % | 40.4–59.6 % | def5678 | 19 (25) |" in summary


def test_report_counts_a_survivor_and_needs_mutmut_only_to_show_it(repo, tmp_path):
    work = tmp_path / "work"
    mutant = "fgx.partition.split.x_split__mutmut_{}".format
    fake_run(work, {mutant(1): 1, mutant(2): 0}, {})
    result = mutation_sh(repo, "fgx/partition", "--report", work=work)
    try:
        import mutmut  # noqa: F401
    except ImportError:
        assert result.returncode != 0 and "mutmut is not installed" in result.stderr
        assert not (repo / "docs" / "mutation" / "fgx_partition.json").exists()
    else:
        assert result.returncode == 0, result.stderr
        record = json.loads((repo / "docs" / "mutation" / "fgx_partition.json").read_text())
        assert (record["killed"], record["survived"], record["score"]) == (1, 1, 50.0)


def test_a_timed_out_mutant_is_run_again_alone_with_its_mapped_tests(repo, tmp_path):
    work = tmp_path / "work"
    mutant = "fgx.partition.split.x_split__mutmut_{}".format
    # the mapped test fails only when it runs against mutant 5: a kill that the re-run must find
    fake_run(work, {mutant(1): 1, mutant(5): 36}, {},
             tests={"fgx.partition.split.x_split": ["tests/test_fake.py::test_mapped"]})
    (work / "mutants" / "tests").mkdir()
    (work / "mutants" / "tests" / "test_fake.py").write_text(
        "import os\n\ndef test_mapped():\n"
        f"    assert os.environ['MUTANT_UNDER_TEST'] != {mutant(5)!r}\n")
    result = mutation_sh(repo, "fgx/partition", "--report", work=work)
    assert result.returncode == 0, result.stderr
    assert json.loads((work / "mutmut.rerun.json").read_text()) == {mutant(5): "killed"}
    report = (repo / "docs" / "mutation" / "fgx_partition.md").read_text()
    assert f"`{mutant(5)}`: a test failed when run alone" in report
