"""A new user's first commands on graph-level data (issue #66): `fgx run dataset=mutag` runs a graph
algorithm (the dataset's `default_algorithm`, as a dataset brings its partitioner and model); a method
that does not support the task is refused with the allowed names and its sibling for the task; a
dataset-specific key in a sweep over datasets works, or is refused by name before any work."""
import ast
import json

import pytest


def test_a_graph_dataset_brings_a_graph_algorithm(run_fgx, data_root):
    run = run_fgx("dataset=mutag", f"data_dir={data_root}", "rounds=2", "eval_every=1")
    s = json.loads((run / "summary.json").read_text())
    assert s["status"] == "completed" and s["components"]["algorithm"] == "fedavg"
    assert s["components"]["model"] == "gin_graph" and s["data"]["task"] == "graph"
    # the command line still wins, and a preset keeps its own algorithm
    from fgx.launch import dataset_algorithm

    assert dataset_algorithm(["dataset=mutag"], False) == ["algorithm=fedavg"]
    assert dataset_algorithm(["dataset=mutag", "algorithm=gcfl"], False) == []
    assert dataset_algorithm(["+experiment=graph_mutag"], False) == []
    assert dataset_algorithm(["dataset=cora"], False) == []                 # the default job's runs on it
    assert dataset_algorithm(["dataset=movielens100k"], False) == ["algorithm=lpsfed"]


def test_the_config_of_a_graph_dataset_is_the_same_with_or_without_its_default_algorithm():
    """`dataset.default_algorithm` says how a command line resolves, not what a run computes: the
    config fingerprint (table records, resume) leaves it out."""
    from fgx.config import config_fingerprint
    from fgx.launch import compose

    cfg = compose(["dataset=mutag", "algorithm=fedavg"])
    assert cfg.dataset.default_algorithm == "fedavg"
    without = compose(["dataset=mutag", "algorithm=fedavg", "~dataset.default_algorithm"])
    assert config_fingerprint(cfg)[1] == config_fingerprint(without)[1]


def test_a_method_of_another_task_is_refused_with_the_allowed_names_and_its_sibling(tmp_path, monkeypatch):
    from fgx.cli import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["run", "dataset=mutag", "algorithm=fedssp"])
    err = str(e.value)
    assert "did you mean algorithm=fedssp_graph?" in err
    allowed = ast.literal_eval("[" + err.split("one of [")[1].split("]")[0] + "]")
    assert {"fedavg", "gcfl_plus", "fedstar", "fedssp_graph"} <= set(allowed) and "ce_fedgnn" not in allowed
    with pytest.raises(SystemExit) as e:
        main(["run", "dataset=mutag", "algorithm=fedavg", "model=gcn"])
    assert "did you mean model=gcn_graph?" in str(e.value)
    assert not (tmp_path / "outputs").exists()


def test_a_dataset_key_in_a_sweep_over_datasets(tmp_path, monkeypatch, capsys, data_root):
    """Hydra composes a sweep's base config (the default job's dataset) before its jobs, and refused
    `dataset.use_node_attr` there as "not in struct"; the key now reaches every job."""
    from fgx.cli import main

    monkeypatch.chdir(tmp_path)
    rc = main(["run", "-m", "dataset=mutag,enzymes", "dataset.use_node_attr=true", "rounds=1", "model.hidden=8",
               f"data_dir={data_root}", f"hydra.sweep.dir={tmp_path / 'sweep'}"])
    assert rc == 0, capsys.readouterr().err
    for job in ("0", "1"):
        assert json.loads((tmp_path / "sweep" / job / "summary.json").read_text())["status"] == "completed"
        assert "use_node_attr: true" in (tmp_path / "sweep" / job / ".hydra" / "config.yaml").read_text()
    # a dataset without the key: refused naming the key, its allowed keys and the job, before any work
    with pytest.raises(SystemExit) as e:
        main(["run", "-m", "dataset=mutag,graph_synth", "dataset.use_node_attr=true", "rounds=1",
              f"data_dir={data_root}", f"hydra.sweep.dir={tmp_path / 'sweep2'}"])
    msg = str(e.value)
    assert "dataset.use_node_attr=True is not allowed" in msg and "dataset=graph_synth" in msg
    assert "a key of some of the swept datasets only: sweep those apart" in msg
    assert not (tmp_path / "sweep2").exists()


def test_a_sweep_over_datasets_of_other_tasks_names_the_fix(tmp_path, monkeypatch):
    from fgx.cli import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["run", "-m", "dataset=mutag,cora", "rounds=1"])
    assert "run different algorithms" in str(e.value) and "algorithm=NAME" in str(e.value)


def test_the_test_extra_is_lean_and_ci_runs_a_readme_install_with_the_readme_test_command():
    """Issue #66: the test install took 21.8 min with Ray, MLflow, TensorBoard, Optuna and OGB in it. The
    `test` extra holds what the default suite needs; `all` adds every optional extra; .ci/run installs `all`
    with a command the README shows and runs the README's test command."""
    import re
    import tomllib
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    extras = tomllib.loads((repo / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {re.split(r"[<>=\[ ]", d)[0].lower() for d in extras["test"]}
    assert names == {"pytest", "pytest-xdist", "hypothesis"}
    optional = {"ray", "mlflow", "tensorboard", "optuna", "joblib", "ogb", "fedgb"}
    assert optional <= set(extras) and all(e in extras["all"][0] for e in optional | {"test"})
    ci = [line.strip() for line in (repo / ".ci" / "run").read_text().splitlines()]
    install = next(line for line in ci if line.startswith("pip install"))
    test = next(line for line in ci if line.startswith("python -m pytest"))
    readme = (repo / "README.md").read_text()
    commands = [line for line in readme.splitlines() if "pip install" in line and "pytest" in line]
    assert any(install.replace(" -q", "") in c and c.endswith("&& " + test) for c in commands), (install, test)
    assert any("'.[test]'" in c and c.endswith("&& " + test) for c in commands)
    # the libraries fgx computes with pinned to the records' versions (docs/REPRODUCTION.md judges against them)
    assert "-c constraints.txt" in install and all("-c constraints.txt" in c for c in commands)
