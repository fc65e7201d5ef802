"""Every refusal an algorithm makes (fgx/algorithms: its check_config, setup and config hooks) reached
from `fgx run`, with the whole message a user reads: the key, the value and what is allowed, and why.
The messages are the interface of a refusal (a user fixes the config from them), so each is pinned
here; a changed message changes its line. Refusals found by config checks stop before any work."""
from __future__ import annotations

import contextlib
import io

import pytest

TINY = ["dataset=csbm", "dataset.num_nodes=300", "dataset.num_features=16", "partitioner=random",
        "partitioner.num_clients=3", "rounds=3", "eval_every=1", "model.hidden=16", "output.checkpoint=false"]
RANK = ["dataset=synthetic_bipartite", "dataset.num_users=60", "dataset.num_items=80",
        "dataset.mean_degree=10", "partitioner=random_users", "partitioner.num_clients=3", "rounds=1",
        "output.checkpoint=false"]
GOSSIP = ["dataset=diabetes", "partitioner=topology", "partitioner.graph=florentine", "model=mlp_tabular",
          "model.hidden=8", "data_dir=.", "rounds=2", "output.checkpoint=false"]
EDGE = ["dataset=aml_tiny", "dataset.scale=0.25", "partitioner.num_clients=2", "model.hidden=8",
        "algorithm.local_steps=3", "algorithm.batch_size=16", "algorithm.fanouts=[3,3]", "rounds=1"]

CASES = [
    ("adafgl_extractor_rounds", [*TINY, "algorithm=adafgl", "algorithm.extractor_rounds=3"],
     "algorithm.extractor_rounds=3 is not allowed; allowed: < rounds (3): step 2 (personalised training) needs at least one round"),
    ("adafgl_batch", [*TINY, "algorithm=adafgl", "algorithm.batch_size=8"],
     "algorithm.batch_size=8 is not allowed; allowed: null: AdaFGL's step 2 is full batch"),
    ("require_model", [*TINY, "algorithm=moon", "model=gamlp"],
     "model='gamlp' is not allowed; allowed: gcn or sage or gin or gcn_graph or gin_graph (algorithm=moon needs the representation under a linear classifier)"),
    ("class_weights", [*TINY, "algorithm=fedavg", "algorithm.class_weights=[1.0,2.0]"],
     "algorithm.class_weights=[1.0, 2.0] is not allowed; allowed: a list of 5 weights"),
    ("ce_remote_raw", [*TINY, "algorithm=ce_fedgnn", "algorithm.remote_layer0=raw"],
     "algorithm.remote_layer0='raw' is not allowed; allowed: drop, zeros or auto: dataset 'csbm' does not declare its node features public (dataset.features_public=true, where the dataset has that key)"),
    ("ce_share0", [*TINY, "algorithm=ce_fedgnn", "algorithm.share_layers=[0]"],
     "algorithm.share_layers=[0] is not allowed; allowed: layers >= 1 (sharing layer 0 sends raw node features; use remote_layer0=raw on a dataset that declares its features public)"),
    ("ce_share_deep", [*TINY, "algorithm=ce_fedgnn", "algorithm.share_layers=[7]"],
     "algorithm.share_layers=[7] is not allowed; allowed: layers between 1 and 2"),
    ("ce_class_weights", [*TINY, "algorithm=ce_fedgnn", "algorithm.class_weights=[1.0,2.0]"],
     "algorithm.class_weights=[1.0, 2.0] is not allowed; allowed: a list of 5 weights"),
    ("feddc_weighting", [*TINY, "algorithm=feddc", "algorithm.weighting=train_items"],
     "algorithm.weighting='train_items' is not allowed; allowed: uniform: FedDC averages the sampled clients' models uniformly (the authors' code)"),
    ("fedgcn_public", [*TINY, "algorithm=fedgcn"],
     "dataset.features_public=False is not allowed; allowed: true for algorithm=fedgcn with hops=2: FedGCN sends neighbour feature sums, which equal raw feature rows for nodes with one neighbour in a client (or use algorithm.hops=0)"),
    ("fedgnn_share_layer", [*TINY, "algorithm=fedgnn", "algorithm.share_layer=2", "model.layers=2"],
     "algorithm.share_layer=2 is not allowed; allowed: < the model's number of message-passing layers (2); FedGNN needs a layer-wise model (gcn, sage, gin) whose layer L receives the shared embeddings"),
    ("fedgta_batch", [*TINY, "algorithm=fedgta", "algorithm.batch_size=8"],
     "algorithm.batch_size=8 is not allowed; allowed: null: FedGTA trains and propagates labels full batch"),
    ("fedper_model", [*TINY, "algorithm=fedper", "model=gamlp"],
     "algorithm.name='fedper' is not allowed; allowed: a model that lists its layers (gcn, sage, gin, unifilter)"),
    ("fedper_head", [*TINY, "algorithm=fedper", "algorithm.head_layers=5"],
     "algorithm.head_layers=5 is not allowed; allowed: < the model's 3 layers: something must be shared"),
    ("fedpub_batch", [*TINY, "algorithm=fedpub", "algorithm.batch_size=8"],
     "algorithm.batch_size=8 is not allowed; allowed: null: FED-PUB trains full batch"),
    ("fedssp_hidden", [*RANK, "algorithm=fedssp", "algorithm.hidden=7"],
     "algorithm.hidden=7 is not allowed; allowed: an even width (sine and cosine halves)"),
    ("gcfl_fraction", [*TINY, "algorithm=gcfl", "algorithm.client_fraction=0.5"],
     "algorithm.client_fraction=0.5 is not allowed; allowed: 1.0 for gcfl: clusters are split on every client's update"),
    ("gcfl_warmup", [*TINY, "algorithm=gcfl", "algorithm.warmup_rounds=3"],
     "algorithm.warmup_rounds=3 is not allowed; allowed: < rounds (3): with no round after the warm-up GCFL never uses a split and is FedAvg (null: rounds // 10)"),
    ("gossip_noise", [*GOSSIP, "algorithm=mafalda_sgd", "privacy=none"],
     "privacy='none' is not allowed; allowed: mf_gdp (algorithm=mafalda_sgd is defined by its noise, which privacy=mf_gdp adds and accounts; the noise-free baseline is algorithm=dsgd)"),
    ("dsgd_privacy", [*GOSSIP, "algorithm=dsgd", "privacy=mf_gdp"],
     "privacy='mf_gdp' is not allowed; allowed: none (algorithm=dsgd is the non-private baseline; its private variants are dp_dsgd, mafalda_sgd, ...)"),
    ("gossip_rounds", [*GOSSIP, "algorithm=dsgd", "algorithm.k=2", "algorithm.b=1", "rounds=3"],
     "rounds=3 is not allowed; allowed: algorithm.k * algorithm.b = 2"),
    ("gossip_b", [*GOSSIP, "algorithm=dsgd", "algorithm.k=1", "algorithm.b=100000", "rounds=100000"],
     "algorithm.b=100000 is not allowed; allowed: <= the smallest node's training rows (23)"),
    ("lpsfed_signal", [*RANK, "algorithm=lpsfed", "algorithm.signal=learned_kernel_x_eigvals", "model.layers=0"],
     "algorithm.signal='learned_kernel_x_eigvals' is not allowed; allowed: eigvals unless model=lgcn with model.layers >= 1 (no learned kernel otherwise)"),
    ("repr_fanouts", [*TINY, "algorithm=moon", "algorithm.fanouts=[5,5]"],
     "algorithm.fanouts=[5, 5] is not allowed; allowed: null with algorithm=moon (whole client graphs)"),
    ("repr_classifier", [*TINY, "algorithm=scaffold", "model.classifier=none"],
     "model.classifier='none' is not allowed; allowed: linear with algorithm=scaffold (it needs the representation under the classifier)"),
    ("swift_local_epochs", [*TINY, "algorithm=swift_fedgnn", "algorithm.local_epochs=2"],
     "algorithm.local_epochs=2 is not allowed; allowed: null for swift_fedgnn (clients step in lock-step iterations: use local_steps)"),
    ("swift_edge", [*EDGE, "algorithm=swift_fedgnn", "algorithm.remote_layer0=aggregate"],
     "algorithm.remote_layer0='aggregate' is not allowed; allowed: drop on an edge task (the edge models need each remote endpoint's own embedding, not sums)"),
    ("swift_one_layer", [*TINY, "algorithm=swift_fedgnn", "model.layers=1"],
     "algorithm.remote_layer0='drop' is not allowed; allowed: aggregate for a 1-layer model (with drop a cross-client step would carry nothing), or model.layers >= 2"),
    ("certified_weights_len", [*TINY, "algorithm=certified_lr", "algorithm.propagation.weights=[0.5]"],
     "algorithm.propagation.weights=[0.5] is not allowed; allowed: 3 weights (w_0..w_L for L=2)"),
    ("certified_weights_sum", [*TINY, "algorithm=certified_lr", "algorithm.propagation.L=1", "algorithm.propagation.weights=[0.9,0.9]"],
     "algorithm.propagation.weights=[0.9, 0.9] is not allowed; allowed: sum of |w| <= 1"),
    ("max_client_nodes", [*TINY, "algorithm=fedpub", "algorithm.max_client_nodes=20"],
     "algorithm.max_client_nodes=20 is not allowed; allowed: >= 100 (client 0): FED-PUB trains full batch on each client subgraph and does not scale to this data"),
    ("fedsage_max_nodes", [*TINY, "algorithm=fedsage_plus", "algorithm.max_client_nodes=20"],
     "algorithm.max_client_nodes=20 is not allowed; allowed: >= 100 (client 0): FedSage+ generates num_pred feature vectors per node on the fly (a mended graph of up to (1 + num_pred)·n nodes, full-batch NeighGen, M·(M-1) generator passes per epoch) and does not scale to this data"),
    ("adafgl_max_nodes", [*TINY, "algorithm=adafgl", "algorithm.max_client_nodes=20"],
     "algorithm.max_client_nodes=20 is not allowed; allowed: >= 100 (client 0): AdaFGL's step 2 builds dense n x n node similarity matrices on each client"),
]


def refusal(overrides: list[str], run_dir) -> str:
    """The config error `fgx run` reports: raised before work (SystemExit) or from setup (exit code 2)."""
    from fgx.cli import main

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            rc = main(["run", *overrides, f"hydra.run.dir={run_dir}"])
    except SystemExit as e:
        return str(e.code).splitlines()[0]
    assert rc == 2, f"fgx run {' '.join(overrides)} returned {rc}, not a refusal"
    return [line for line in err.getvalue().splitlines() if "config error" in line][-1]


@pytest.mark.parametrize("name,overrides,message", CASES, ids=[c[0] for c in CASES])
def test_refusal_names_the_key_and_says_what_is_allowed(name, overrides, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert refusal(overrides, tmp_path / "run") == f"fgx: config error: {message}"


def test_fedgcn_refuses_raw_feature_sums_at_setup_too(tmp_path, monkeypatch):
    """The second guard, where the sums would be built: with the config check skipped, setup refuses."""
    from fgx.algorithms.fedgcn import FedGCN

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(FedGCN, "check_config", classmethod(lambda cls, params, validated: None))
    want = [m for n, _, m in CASES if n == "fedgcn_public"][0]
    assert refusal([*TINY, "algorithm=fedgcn"], tmp_path / "run") == f"fgx: config error: {want}"


REDUCES = [
    (["algorithm=fedprox", "algorithm.mu=0"], "fedavg: mu = 0"),
    (["algorithm=fedprox", "algorithm.local_steps=1"],
     "fedavg: with one local step the proximal term's gradient is zero at the global weights"),
    (["algorithm=fedprox", "algorithm.local_epochs=1"],
     "fedavg: with one local step the proximal term's gradient is zero at the global weights"),
    (["algorithm=fedprox", "algorithm.local_epochs=1", "algorithm.batch_size=16"], None),
    (["algorithm=fedprox", "algorithm.local_epochs=2"], None),
    (["algorithm=fedprox", "algorithm.local_steps=2", "algorithm.mu=0.01"], None),
    (["algorithm=moon", "algorithm.mu=0"], "fedavg: mu = 0"),
    (["algorithm=moon", "algorithm.mu=0.5"], None),
    (["algorithm=gcfl", "algorithm.warmup_rounds=2"], None),
    (["algorithm=fedavg"], None),
]


@pytest.mark.parametrize("overrides,why", REDUCES, ids=[" ".join(o) for o, _ in REDUCES])
def test_a_method_says_when_its_settings_make_it_another_row(overrides, why):
    """``reduces_to``: what the tables read to refuse a row that cannot differ from a simpler method's
    (fgx/tables/run.py identical_rows), with the reason a user reads; None where the method is itself."""
    from fgx.config import validate
    from fgx.launch import compose

    v = validate(compose([*TINY, *overrides]))
    assert v.entries["algorithm"].obj.reduces_to(v.params["algorithm"], v.top) == why


def test_gcfl_says_it_is_fedavg_when_the_run_ends_inside_its_warm_up():
    """GCFL's config check refuses such a run first; ``reduces_to`` gives the tables the same reason."""
    import dataclasses

    from fgx.config import validate
    from fgx.launch import compose

    v = validate(compose([*TINY, "algorithm=gcfl", "algorithm.warmup_rounds=2"]))
    gcfl = v.entries["algorithm"].obj
    assert gcfl.reduces_to(v.params["algorithm"], dataclasses.replace(v.top, rounds=2)) == \
        "fedavg: rounds 2 ≤ warmup_rounds 2, so no cluster splits before the run ends"
    assert gcfl.reduces_to(dataclasses.replace(v.params["algorithm"], warmup_rounds=None), v.top) is None


def test_refusals_an_earlier_check_always_preempts_still_name_the_key_when_called_directly():
    """Second lines of defence that no `fgx run` configuration reaches, because an earlier check refuses
    the same configuration first (the task check refuses gossip off the topology partitioner; each
    representation method's model check refuses a model without a linear classifier): called directly,
    each still raises the ConfigError naming the key (seed-5 mutation sample: a KeyError and a TypeError
    in their place survived)."""
    from types import SimpleNamespace

    import torch

    from fgx.algorithms.gossip import GossipParams, GossipSGD
    from fgx.algorithms.representation import split_forward
    from fgx.errors import ConfigError

    validated = SimpleNamespace(names={"algorithm": "dsgd", "privacy": "none", "partitioner": "metis"})
    with pytest.raises(ConfigError, match=r"^config error: partitioner='metis' is not allowed; allowed: topology "
                                          r"\(decentralised algorithms need the communication graph\)$"):
        GossipSGD.check_config(GossipParams(), validated)
    with pytest.raises(ConfigError, match=r"^config error: model.name='Linear' is not allowed; allowed: one of "
                                          r"\['gcn', 'sage', 'gin', 'gcn_graph', 'gin_graph'\] \(a model with a linear classifier\)$"):
        split_forward(torch.nn.Linear(2, 2), None)
