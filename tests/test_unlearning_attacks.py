"""The attacks that judge unlearning (fgx/unlearning/attacks.py): they find the edges and members a model
was trained on, and they are reported for the unlearned model, a model retrained from scratch and the
never-updated model; the difference attacks (Chen et al. 2021) see the model before and after."""
from __future__ import annotations

import json

import numpy as np

from fgx.unlearning import attacks
from fgx.unlearning.requests import edge_mia
from test_unlearning import build_server, certified, processor
from test_unlearning_certificate import generated_party


def test_edge_attacks_find_edges_and_lose_them_after_retraining():
    server = build_server([generated_party(n=400, f=8)], noise_std=0.1, r_max=1e-5)
    rng = np.random.default_rng(0)
    edges = server.parties[0].prop.sample_edges(60, rng)
    requests = [{0: edges[:, j:j + 1]} for j in range(60)]
    state = attacks.prepare(server, requests, "edge", edge_mia(server, requests, rng), rng)
    before = attacks.evaluate(server, state)
    # on the model trained with the edges, the influence of u on v is direct for an edge, absent or
    # two hops away for a non-edge; propagated rows of neighbours are alike
    assert before["linkteller"] > 0.95 and before["link_stealing_features"] > 0.75
    assert before["link_stealing_posterior"] > 0.65
    proc = processor(server, budget=0.05)
    for req in requests:
        proc.process(req, evaluate=False)
    out = attacks.three_models(server, state)
    assert out["linkteller_auc_retrained"] < 0.6 and out["linkteller_auc_unlearned"] < 0.6
    assert out["link_stealing_features_auc_retrained"] < before["link_stealing_features"] - 0.1
    assert out["link_stealing_raw_features_auc"] == before["link_stealing_raw_features"]
    assert server.parties[0].prop.stored_residue_rows() == 0      # the retrained model's exact state


def test_membership_inference_on_deleted_nodes():
    server = build_server([generated_party(n=400, f=80, seed=4)], noise_std=0.1, r_max=1e-5, lam=1e-5)
    rng = np.random.default_rng(0)
    nodes = rng.choice(server.parties[0].train_ids(), 100, replace=False)
    requests = [{0: [int(u)]} for u in nodes]
    state = attacks.prepare(server, requests, "node", None, rng)
    before = attacks.evaluate(server, state)["mia_deleted_nodes"]
    assert before > 0.6                                      # an overfitted model: members are more confident
    proc = processor(server, budget=0.05, **{"requests.type": "node"})
    for req in requests:
        proc.process(req, evaluate=False)
    out = attacks.three_models(server, state)
    assert out["mia_deleted_nodes_auc_retrained"] < before - 0.05
    assert out["mia_deleted_nodes_auc_unlearned"] < before - 0.05


def test_fgx_run_reports_attacks_for_three_models(run_fgx, tiny_cfg):
    over = certified(tiny_cfg)
    for method, kind, names in (("scalegun", "edge", ("link_stealing_posterior", "link_stealing_features", "linkteller")),
                                ("cgu", "node", ("mia_deleted_nodes",))):
        run = run_fgx(*over, f"unlearning={method}", f"unlearning.requests.type={kind}",
                      "unlearning.requests.num_requests=6")
        s = json.loads((run / "unlearning.json").read_text())["summary"]
        names = (*names, "difference")
        for name in names:
            for model in attacks.MODELS:
                assert 0.0 <= s[f"{name}_auc_{model}"] <= 1.0
        assert json.loads((run / "summary.json").read_text())["unlearning"][f"{names[0]}_auc_retrained"] >= 0
        # the log names each attack with its three AUCs
        line = next(ln for ln in (run / "fgx.log").read_text().splitlines()
                    if "attack AUCs, unlearned / retrained / never updated" in ln)
        for name in names:
            assert (f"{name} {s[f'{name}_auc_unlearned']:.3f} / {s[f'{name}_auc_retrained']:.3f} / "
                    f"{s[f'{name}_auc_never_updated']:.3f}") in line


def test_difference_attack_tells_an_unlearned_model_from_one_that_never_changed():
    """The model before the requests and after them (Chen et al. 2021). A model whose weights never moved
    is separated from a retrained one: on the served posteriors it shows the graph change unmasked, while
    retraining's fresh noise moves every posterior (AUC far above retraining's); its weights alone show
    nothing (0.5). The unlearned model is told from it: its weights moved. (A Newton-unlearned model is
    as far from retraining as the never-updated one in this attack - docs/unlearning.md, *Attacks*.)"""
    server = build_server([generated_party(n=400, f=8, seed=3)], noise_std=1.0, r_max=1e-5)
    rng = np.random.default_rng(5)
    edges = server.parties[0].prop.sample_edges(40, rng)
    requests = [{0: edges[:, j:j + 1]} for j in range(40)]
    state = attacks.prepare(server, requests, "edge", edge_mia(server, requests, rng), rng)
    proc = processor(server, budget=1e9)
    for req in requests:
        proc.process(req, evaluate=False)
    out = attacks.three_models(server, state)
    assert out["difference_auc_never_updated"] > out["difference_auc_retrained"] + 0.15
    assert out["difference_weights_auc_never_updated"] == 0.5
    assert out["difference_weights_auc_unlearned"] != 0.5
    assert out["difference_auc_unlearned"] != out["difference_auc_never_updated"]
    assert out["difference_auc_unlearned"] > out["difference_auc_retrained"] + 0.15     # the finding above


def test_linkteller_influence_is_the_propagation_matrix_entry():
    """LinkTeller's influence of u on v: sum_l w_l (A_hat^l)[v, u], A_hat = D^-1/2 A D^-1/2 with the
    propagation's self-loops, against the dense matrix powers."""
    from fgx.unlearning.propagation import GPRPropagator, symmetric_adjacency
    rng = np.random.default_rng(2)
    ei = rng.integers(0, 12, (2, 30))
    w = [0.1, 0.5, 0.4]
    prop = GPRPropagator(symmetric_adjacency(ei, 12), np.eye(12), w, 0.0, dtype="float64")
    a = prop.adj.toarray()
    a_hat = a / np.sqrt(np.outer(prop.deg, prop.deg))
    dense = sum(wl * np.linalg.matrix_power(a_hat, lvl) for lvl, wl in enumerate(w))
    src, dst = np.array([0, 3, 5, 7]), np.array([1, 3, 9, 2])
    assert np.allclose(attacks._influence(prop, src, dst), dense[dst, src], atol=1e-12)
