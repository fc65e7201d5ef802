import subprocess
import sys
from dataclasses import dataclass, field

import pytest
from omegaconf import OmegaConf

from fgx.cli import compose
from fgx.config import ConfigError, build_params, spec, validate
from fgx.registry import ALGORITHMS, DATASETS, GROUPS, Registry


def test_every_group_has_components_and_conf_files():
    from fgx.cli import conf_component_name, conf_dir
    for group, reg in GROUPS.items():
        names = reg.names()
        assert names, group
        confs = {conf_component_name(f) for f in (conf_dir() / group).glob("*.yaml")}
        assert confs <= set(names), f"conf/{group} names unknown components: {confs - set(names)}"


def test_registry_rejects_duplicate_and_unknown():
    r = Registry("thing", "fgx.models")
    r._loaded = True

    @r.register("a")
    def a():
        pass

    with pytest.raises(ValueError):
        @r.register("a")
        def b():
            pass
    with pytest.raises(ConfigError, match=r"thing.name.*one of \['a'\]"):
        r.get("zzz")


@dataclass
class P:
    n: int = field(default=1, metadata=spec(min=1))
    mode: str = field(default="x", metadata=spec(choices=["x", "y"]))
    rate: float = field(default=0.5, metadata=spec(gt=0.0, max=1.0))
    sizes: list[int] = field(default_factory=lambda: [1, 2])


@pytest.mark.parametrize("node,key,allowed", [
    ({"n": 0}, "g.n", ">= 1"),
    ({"n": "abc"}, "g.n", "int"),
    ({"mode": "z"}, "g.mode", "one of ['x', 'y']"),
    ({"rate": 0.0}, "g.rate", "> 0.0"),
    ({"bogus": 1}, "g.bogus", "keys of g"),
    ({"sizes": ["a"]}, "g.sizes", "list"),
])
def test_build_params_errors_name_key_and_allowed(node, key, allowed):
    with pytest.raises(ConfigError) as e:
        build_params(P, node, "g")
    assert e.value.key == key
    assert allowed in str(e.value)


def test_build_params_converts_types():
    p = build_params(P, {"n": "3", "rate": 1, "sizes": [4]}, "g")
    assert p.n == 3 and p.rate == 1.0 and p.sizes == [4]


def test_default_config_validates():
    v = validate(compose([]))
    assert set(v.names) == {"dataset", "partitioner", "model", "algorithm", "privacy", "unlearning", "executor",
                            "threat", "aggregator", "secure_aggregation"}


def test_task_mismatch_is_refused_before_work():
    cfg = compose(["dataset=csbm", "algorithm=fedavg", "partitioner=label_dirichlet"])
    cfg.dataset = OmegaConf.create({"name": "csbm"})
    validate(cfg)
    entry = DATASETS.get("csbm")
    old = entry.meta.get("task")
    entry.meta["task"] = "ranking"
    try:
        with pytest.raises(ConfigError, match="supports"):
            validate(cfg)
    finally:
        entry.meta["task"] = old


def test_component_modules_do_not_import_heavy_libraries():
    """Config errors must be fast: importing every component must not pull in PyG or sklearn."""
    code = ("import sys; from fgx.registry import GROUPS; [g.names() for g in GROUPS.values()];"
            "heavy=[m for m in ('torch_geometric','sklearn','ogb','opacus','dp_accounting','ray','matplotlib')"
            " if m in sys.modules]; print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"imported at registry load: {out.stdout.strip()}"


@pytest.mark.parametrize("override,needle", [
    ("algorithm=nope", "algorithm"),
    ("partitioner.num_clients=-3", "partitioner.num_clients"),
    ("model.hidden=abc", "model.hidden"),
])
def test_cli_config_errors_are_refused_before_work_and_leave_no_run_dir(tmp_path, override, needle):
    """Refused before any data is loaded (what makes it fast: the < 5 s target is measured by
    scripts/bench_fast_paths.py, not timed here, since a busy machine makes any limit flaky)."""
    out = subprocess.run([sys.executable, "-m", "fgx.cli", "run", override, "data_dir=missing-data-root"],
                         cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode != 0
    assert needle in out.stderr and ("allowed" in out.stderr or "Available options" in out.stderr)
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "missing-data-root").exists()


def test_every_command_line_starts_from_the_default_job():
    """`fgx run` runs conf/config.yaml; any override replaces only what it names. A dataset brings
    its partitioner and model, an algorithm that runs on one model brings it, the command line wins."""
    names = lambda *o: (lambda v: (v.names["dataset"], v.names["partitioner"], v.names["model"],
                                   v.names["algorithm"], v.names["privacy"]))(validate(compose(list(o))))
    assert names() == ("aml_synth", "by_bank", "gine", "ce_fedgnn", "none")
    v = validate(compose(["seed=1"]))
    assert v.top.seed == 1 and v.names == validate(compose([])).names
    assert names("dataset=cora") == ("planetoid", "louvain", "gcn", "ce_fedgnn", "none")
    assert names("algorithm=ce_fedgnn", "dataset=aml_hi_small")[:3] == ("aml", "by_bank", "gine")
    assert names("dataset=movielens100k", "algorithm=fedmf")[1:4] == ("spectral_bipartite", "mf", "fedmf")
    assert names("algorithm=fedmf", "dataset=movielens100k", "model=lightgcn")[2] == "lightgcn"
    assert names("dataset=cora", "partitioner=metis", "model=sage", "algorithm=fedavg")[1:4] == \
        ("metis", "sage", "fedavg")
    assert names("dataset=diabetes", "algorithm=dsgd")[1:3] == ("topology", "mlp_tabular")
    # an experiment preset overrides the dataset's choices; the command line overrides the preset
    assert names("+experiment=ce_fedgnn_table2_cora", "model=sage")[1:3] == ("louvain", "sage")


def test_fgx_run_cfg_job_shows_the_default_job_with_the_override(tmp_path):
    out = subprocess.run([sys.executable, "-m", "fgx.cli", "run", "seed=1", "--cfg", "job"], cwd=tmp_path,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    cfg = OmegaConf.create(out.stdout)
    assert cfg.seed == 1 and cfg.algorithm.name == "ce_fedgnn" and cfg.dataset.preset == "tiny"
    assert cfg.model.name == "gine" and cfg.partitioner.name == "by_bank"




def test_a_data_root_that_is_a_file_is_refused_before_work_with_one_message(tmp_path):
    (tmp_path / "data.tar").write_text("not a folder")
    out = subprocess.run([sys.executable, "-m", "fgx.cli", "run", "dataset=cora", "algorithm=fedavg",
                          f"data_dir={tmp_path / 'data.tar'}"], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode != 0
    assert "data_dir=" in out.stderr and "this is a file" in out.stderr, out.stderr
    assert "download" not in out.stderr + out.stdout and not (tmp_path / "outputs").exists()


@pytest.mark.parametrize("override, suggestion", [
    ("algoritm=fedavg", "did you mean 'algorithm'?"),
    ("algorithm.lrr=0.1", "did you mean 'algorithm.lr'?"),
    ("algorithm=fedavgg", "did you mean 'fedavg'"),
])
def test_a_mistyped_group_or_key_gets_a_did_you_mean_above_hydras_message(override, suggestion, tmp_path,
                                                                         monkeypatch):
    from fgx.cli import prevalidate

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        prevalidate(["algorithm=fedavg", override] if "." in override else [override], False)
    msg = str(e.value.code)
    assert suggestion in msg.splitlines()[0], msg
    assert "Could not" in msg          # Hydra's own message kept below it


def test_more_clients_than_the_files_have_nodes_is_refused_before_loading(tmp_path, monkeypatch):
    """Cora has 2708 nodes: 100000 clients are refused by the config check, before any file is read
    (data_dir points nowhere: a load would fail differently)."""
    from fgx.cli import prevalidate

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match=r"partitioner.num_clients=100000.*at most 2708 \(Cora has 2708 nodes"):
        prevalidate(["dataset=cora", "algorithm=fedavg", "partitioner.num_clients=100000",
                     f"data_dir={tmp_path / 'nowhere'}"], False)
    with pytest.raises(SystemExit, match=r"at most 890"):
        prevalidate(["dataset=chameleon_filtered", "algorithm=fedavg", "partitioner.num_clients=900"], False)
    prevalidate(["dataset=cora", "algorithm=fedavg", "partitioner.num_clients=100"], False)


def test_hi_small_brings_ce_fedgnns_design_card_defaults_and_nothing_else_takes_them():
    """Issue #72: `fgx run algorithm=ce_fedgnn dataset=aml_hi_small` takes the recipe of the learning curves
    (conf/algorithm_on_dataset/ce_fedgnn_aml_hi_small.yaml); the command line wins; another algorithm on
    HI-Small and the paper-scale table (every row alike) keep their own."""
    card = compose(["algorithm=ce_fedgnn", "dataset=aml_hi_small"])
    assert (card.algorithm.local_optimizer, card.algorithm.lr, card.algorithm.positive_share,
            card.algorithm.local_steps, list(card.algorithm.class_weights)) == ("adam_on_g", 0.005, 0.1, 38, [1.0, 6.275])
    assert card.dataset.ports is False and card.dataset.timestamp_feature is False and card.rounds == 20
    mine = compose(["algorithm=ce_fedgnn", "dataset=aml_hi_small", "algorithm.lr=0.01", "dataset.ports=true"])
    assert mine.algorithm.lr == 0.01 and mine.dataset.ports is True and mine.algorithm.positive_share == 0.1
    other = compose(["algorithm=fedavg", "dataset=aml_hi_small"])
    assert other.algorithm.positive_share is None and other.dataset.ports is True
    for method in ("ce_fedgnn", "fedgnn_st"):
        t = compose(["+experiment=ce_fedgnn_table1_hi_small", f"method={method}"])
        assert (t.algorithm.local_optimizer, t.algorithm.positive_share, t.algorithm.class_weights,
                t.dataset.ports, t.dataset.timestamp_feature) == ("ema_sgd", None, None, True, True)
