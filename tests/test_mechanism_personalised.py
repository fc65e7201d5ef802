"""Personalised aggregation (FED-PUB, FedGSP), checked from what tiny runs sent: each client receives
the average of the uploaded models under weights the method defines, and those weights follow the
method's similarity as its objective says."""
from __future__ import annotations

import json

import torch

from mechanisms import by_round, floats, train_counts

NODE = ["dataset=csbm", "dataset.num_nodes=300", "dataset.num_features=8", "partitioner=label_dirichlet",
        "partitioner.alpha=0.3", "partitioner.num_clients=4", "model=gcn", "model.hidden=8", "eval_every=10",
        "output.checkpoint=false"]
GSP = ["dataset=hetero_homophily", "dataset.num_communities=5", "dataset.nodes_per_community=60",
       "dataset.num_features=8", "partitioner=by_community", "model=unifilter", "model.K=3", "model.hidden=16",
       "algorithm=fedgsp", "algorithm.k_principal=2", "eval_every=10", "output.checkpoint=false"]


def _mix(weights: torch.Tensor, models: list[dict]) -> list[dict]:
    return [{k: sum(float(weights[i, j]) * models[j][k] for j in range(len(models))) for k in models[0]}
            for i in range(len(models))]


def _close(a: dict, b: dict, tol: float = 1e-5) -> float:
    return max((a[k] - b[k]).abs().max().item() for k in b) < tol


def test_fedpub_sends_each_client_the_similarity_weighted_average(recorded, run_fgx):
    """W_ij ∝ exp(τ·cos(e_i, e_j))·n_j from the functional embeddings and training sizes (FED-PUB)."""
    tau = 3.0
    run_fgx(*NODE, "algorithm=fedpub", f"algorithm.norm_scale={tau}", "algorithm.local_steps=2", "rounds=2")
    n = torch.tensor(train_counts(recorded["clients"]), dtype=torch.float64)
    emb = {src: p.double() for src, _, p in by_round(recorded, "functional_embedding")[1]}
    theta = {src: floats(p) for src, _, p in by_round(recorded, "weights")[1]}
    ids = sorted(theta)
    e = torch.nn.functional.normalize(torch.stack([emb[i] for i in ids]), dim=1)
    w = torch.exp(tau * e @ e.T) * n[ids][None, :]
    w = w / w.sum(1, keepdim=True)
    assert (w - torch.eye(len(ids), dtype=w.dtype)).abs().max() > 0.05     # not just the own model
    want = _mix(w, [theta[i] for i in ids])
    got = {dst: floats(p) for _, dst, p in by_round(recorded, "personalised_weights")[2]}
    for i, cid in enumerate(ids):
        assert _close(got[cid], want[i]), f"client {cid}"


def test_fedpub_clients_run_their_weights_through_their_masks(recorded, run_fgx, monkeypatch):
    """FED-PUB's sparse masks multiply the weights they belong to (issue 67 (c)): the functional
    embedding each client sent is the mean output, on the proxy graph the server sent, of the weights it
    sent times its masks, recomputed here on a copy of its model; the unmasked weights give another one."""
    import copy

    from torch_geometric.data import Data

    from fgx.algorithms.fedpub import FedPub
    from mechanisms import capture_setup

    seen = capture_setup(monkeypatch, FedPub)
    run_fgx(*NODE, "algorithm=fedpub", "algorithm.local_steps=3", "algorithm.l1=0.05", "rounds=1")
    algo = seen["algo"]
    proxy = next(p for k, p, *_ in recorded["sent"] if k == "proxy_graph")
    graph = Data(x=proxy["x"], edge_index=proxy["edge_index"], num_nodes=proxy["x"].size(0))
    emb = {src: p for src, _, p in by_round(recorded, "functional_embedding")[1]}
    theta = {src: p for src, _, p in by_round(recorded, "weights")[1]}
    assert len(emb) == len(algo.states)
    for s in algo.states:
        masks = {k: m.detach() for k, m in s.masks.items()}
        assert masks and max(float((m - 1).abs().max()) for m in masks.values()) > 1e-3     # the masks moved
        model = copy.deepcopy(s.model).eval()
        with torch.no_grad():
            model.load_state_dict({k: v * masks[k] if k in masks else v for k, v in theta[s.cid].items()})
            want = model(graph).mean(0)
            model.load_state_dict(theta[s.cid])
            unmasked = model(graph).mean(0)
        assert torch.allclose(emb[s.cid], want, atol=1e-5), f"client {s.cid}"
        assert (unmasked - want).abs().max() > 1e-4                                          # the check can tell


def _simplex_projection(v: torch.Tensor) -> torch.Tensor:
    """Euclidean projection of a vector onto the probability simplex (Duchi et al. 2008)."""
    u, _ = torch.sort(v, descending=True)
    css = torch.cumsum(u, 0) - 1
    k = torch.arange(1, len(v) + 1, dtype=v.dtype)
    rho = int((u - css / k > 0).nonzero().max())
    return (v - css[rho] / (rho + 1)).clamp(min=0)


def test_fedgsp_graph_gives_more_weight_to_more_similar_clients(recorded, run_fgx):
    """With α = 0 the W row of client i minimises Σ_j -β·S_ij w_ij + γ w_ij² on the simplex (Eq. 20):
    the projection of β·S_i/(2γ), so weight grows with the homophily similarity S (recorded)."""
    beta, gamma = 1.2, 0.5
    run = run_fgx(*GSP, "rounds=1", "algorithm.alpha=0.0", f"algorithm.beta={beta}", f"algorithm.gamma={gamma}",
                  "algorithm.w_solver=converge")
    row = json.loads((run / "fedgsp_graphs.jsonl").read_text().splitlines()[0])
    w, sim = torch.tensor(row["W"], dtype=torch.float64), torch.tensor(row["similarity"], dtype=torch.float64)
    assert sim.diagonal().allclose(torch.ones(len(sim), dtype=sim.dtype))
    assert (sim - sim.diagonal().diag()).abs().max() > 0.05 and (w > 1e-6).sum() > len(w)
    for i in range(len(w)):
        assert torch.allclose(w[i], _simplex_projection(beta * sim[i] / (2 * gamma)), atol=1e-6), f"row {i}"
        order = torch.argsort(sim[i])
        assert (w[i][order].diff() >= -1e-9).all(), f"row {i}: weight not increasing with similarity"


def test_fedgsp_sends_each_client_its_graph_weighted_average(recorded, run_fgx):
    """MLP and order-0 coefficients averaged with the overall graph W, order-k coefficients with W_K[k-1]."""
    run = run_fgx(*GSP, "rounds=2")
    row = json.loads((run / "fedgsp_graphs.jsonl").read_text().splitlines()[0])
    w, w_k = torch.tensor(row["W"], dtype=torch.float64), torch.tensor(row["W_K"], dtype=torch.float64)
    ups = {src: floats(p) for src, _, p in by_round(recorded, "model")[1]}
    ids = sorted(ups)
    models = [ups[i] for i in ids]
    want = _mix(w, models)
    assert (w - torch.eye(len(ids), dtype=w.dtype)).abs().max() > 0.05
    got = {dst: floats(p) for _, dst, p in by_round(recorded, "personalised_model")[2]}
    comb = "comb_weight"
    for i, cid in enumerate(ids):
        other = {k: v for k, v in want[i].items() if k != comb}
        assert _close(got[cid], other), f"client {cid}"
        c_got, c_w = got[cid][comb], want[i][comb]
        # UniFilter's comb_weight is [1, K+1, width]: order k is index k of dim 1
        assert torch.allclose(c_got[:, 0], c_w[:, 0], atol=1e-5)
        for k in range(1, c_got.size(1)):
            c_k = sum(float(w_k[k - 1][i, j]) * models[j][comb][:, k] for j in range(len(ids)))
            assert torch.allclose(c_got[:, k], c_k, atol=1e-5), f"client {cid}, order {k}"
