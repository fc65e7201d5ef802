"""CE-FedGNN's defining updates (Eq. 5 embedding moving average, Eq. 9 gradient moving average) and
privacy=metric_dp (clipping, σ1/σ2 noise, the release count behind ε), checked from what tiny runs
sent over the channel."""
from __future__ import annotations

import json
from collections import Counter

import numpy as np
import torch
from scipy import stats

from mechanisms import by_round, flat, floats

CE = ["dataset=csbm", "dataset.num_nodes=300", "dataset.num_features=16", "partitioner=random",
      "partitioner.num_clients=3", "model=gcn", "model.hidden=16", "model.dropout=0.0", "algorithm=ce_fedgnn",
      "eval_every=10", "output.checkpoint=false"]


def _two_runs(recorded, run_fgx, common: list[str], a: list[str], b: list[str]) -> tuple[dict, dict]:
    """Run twice with the same config up to ``a`` vs ``b``; returns the two recordings."""
    run_fgx(*common, *a)
    first = {"sent": list(recorded["sent"])}
    recorded["sent"].clear()
    run_fgx(*common, *b)
    return first, {"sent": list(recorded["sent"])}


def _layer1(seen, r: int) -> dict[tuple[int, int], torch.Tensor]:
    """(sender, global node id) -> the layer-1 embedding the sender shared in round r."""
    out = {}
    for src, _, p in by_round(seen, "embeddings").get(r, []):
        if int(p["layer"]) == 1:
            for gid, v in zip(p["ids"].tolist(), p["values"]):
                out[(src, gid)] = v.double()
    return out


def test_eq5_shared_embedding_is_the_moving_average_of_fresh_values(recorded, run_fgx):
    """Round 1 shares f1 = the fresh layer-1 value (ma_init=first) whatever γ is, and the models of
    round 2 are the same for every γ; so with γ = 1 round 2 shares the fresh f2, and with γ = 0.3 it
    must share ReLU((1-γ)·f1 + γ·f2): on coordinates where both are positive, (1-γ)·u1 + γ·u2."""
    common = [*CE, "rounds=2", "algorithm.local_steps=1", "algorithm.batch_size=null", "algorithm.fanouts=null",
              "algorithm.ma_init=first", "algorithm.local_optimizer=adam_on_g", "algorithm.lr=0.05"]
    fresh, ma = _two_runs(recorded, run_fgx, common, ["algorithm.gamma=1.0"], ["algorithm.gamma=0.3"])
    u1, u2, u_ma = _layer1(fresh, 1), _layer1(fresh, 2), _layer1(ma, 2)
    assert _layer1(ma, 1).keys() == u1.keys() and u2.keys() == u_ma.keys() and u2
    for key in u1:
        assert torch.allclose(_layer1(ma, 1)[key], u1[key], atol=1e-6)   # round 1 does not depend on γ
    a = torch.stack([u1[k] for k in u2])
    b = torch.stack([u2[k] for k in u2])
    got = torch.stack([u_ma[k] for k in u2])
    both = (a > 1e-4) & (b > 1e-4)
    assert both.sum() > 50 and (a - b)[both].abs().max() > 1e-2   # f1 and f2 differ: the check can fail
    want = 0.7 * a + 0.3 * b
    err = (got - want)[both].abs().max().item()
    assert err < 1e-4 * max(1.0, want.abs().max().item()), f"Eq. 5 off by {err}"


def test_stale_sharing_sends_the_fresh_value_under_the_current_global_model(recorded, run_fgx):
    """FedGNN-ST (embedding_sharing=stale): the layer-1 embedding a client shares in round 2 is the
    one its owned subgraph gives under round 2's global model, computed here independently."""
    from fgx.models.base import GNNParams
    from fgx.registry import MODELS

    run_fgx(*CE, "rounds=2", "algorithm.embedding_sharing=stale", "algorithm.gamma=0.3", "algorithm.local_steps=1",
            "algorithm.batch_size=null", "algorithm.fanouts=null", "algorithm.remote_layer0=drop")
    glob = by_round(recorded, "global_weights")[2][0][2]
    clients = recorded["clients"]
    model = MODELS.get("gcn").obj(GNNParams(layers=2, hidden=16, dropout=0.0), clients[0].data.x.size(1),
                                  int(recorded["data"].y.max()) + 1, None)
    model.load_state_dict(glob)
    model.eval()
    shared = _layer1(recorded, 2)
    assert len(shared) > 10
    with torch.no_grad():
        for c in clients:
            pre, _ = model.layer(0, c.data.x[: c.num_owned], None, c.data.edge_index)
            fresh = model.activate(0, pre).double()
            local = {int(g): i for i, g in enumerate(c.nodes.tolist())}
            for (src, gid), v in shared.items():
                if src == c.cid:
                    assert torch.allclose(v, fresh[local[gid]], atol=1e-5), f"client {c.cid}, node {gid}"


def test_eq9_uploaded_estimator_is_the_moving_average_of_gradients(recorded, run_fgx):
    """With a vanishing step size the local gradient g_c stays put, so after K steps from G0 a client
    uploads G = (1-β)^K G0 + (1-(1-β)^K) g_c (Eq. 9); β = 1 uploads g_c itself. Round 2 starts from the
    server's average of round 1's estimators."""
    beta, K = 0.5, 3
    common = [*CE, "rounds=2", f"algorithm.local_steps={K}", "algorithm.batch_size=null", "algorithm.fanouts=null",
              "algorithm.local_optimizer=ema_sgd", "algorithm.lr=1e-9", "algorithm.embedding_sharing=none",
              "algorithm.weighting=uniform"]
    plain, ma = _two_runs(recorded, run_fgx, common, ["algorithm.beta=1.0"], [f"algorithm.beta={beta}"])
    g = {src: flat(p) for src, _, p in by_round(plain, "grad_estimator")[1]}
    up = by_round(ma, "grad_estimator")
    keep = (1 - beta) ** K
    assert min(v.norm().item() for v in g.values()) > 1e-3
    for src, _, p in up[1]:
        want = (1 - keep) * g[src]
        assert (flat(p) - want).norm() < 1e-4 * want.norm(), f"round 1, client {src}"
    g0 = torch.stack([flat(p) for _, _, p in up[1]]).mean(0)
    broadcast = flat(by_round(ma, "global_grad_estimator")[2][0][2])
    assert (broadcast - g0).norm() < 1e-5 * g0.norm()           # the server averages the estimators
    for src, _, p in up[2]:
        want = keep * g0 + (1 - keep) * g[src]
        assert (flat(p) - want).norm() < 1e-4 * want.norm(), f"round 2, client {src}"


def test_metric_dp_accounts_the_largest_per_node_release_count(recorded, run_fgx):
    d = run_fgx(*CE, "rounds=3", "algorithm.local_steps=2", "algorithm.batch_size=16", "algorithm.fanouts=null",
                "privacy=metric_dp_paper",
                "privacy.k=5")
    counts = Counter()
    for _, _, p in (m for ms in by_round(recorded, "embeddings").values() for m in ms):
        counts.update(p["ids"].tolist())
    assert counts and max(counts.values()) > min(counts.values())     # the choice of statistic matters
    rep = json.loads((d / "privacy.json").read_text())
    assert rep["steps_used"] == max(counts.values())
    assert rep["epsilon"]["releases"] == max(counts.values())


def test_metric_dp_clips_w_and_g_and_noises_their_averages(recorded, run_fgx):
    clip_w, clip_g, s1, s2 = 0.004, 0.002, 0.01, 0.001
    run_fgx(*CE, "model.hidden=32", "rounds=4", "algorithm.local_steps=2", "algorithm.batch_size=null",
            "algorithm.fanouts=null",
            "privacy=metric_dp_paper", "privacy.k=5", f"privacy.clip_model={clip_w}",
            f"privacy.clip_grad_estimator={clip_g}", f"privacy.sigma1={s1}", f"privacy.sigma2={s2}")
    ups, gs = by_round(recorded, "update"), by_round(recorded, "grad_estimator")
    for kind, msgs, clip in (("update", ups, clip_w), ("grad_estimator", gs, clip_g)):
        norms = [flat(p).norm().item() for r in msgs for _, _, p in msgs[r]]
        assert max(norms) <= clip * (1 + 1e-5), f"a released {kind} has norm {max(norms)} > {clip}"
        assert sum(abs(n - clip) < 1e-6 * clip + 1e-9 for n in norms) >= len(norms) // 2, (kind, norms)
    glob = {r: floats(m[0][2]) for r, m in by_round(recorded, "global_weights").items()}
    gglob = {r: flat(m[0][2]) for r, m in by_round(recorded, "global_grad_estimator").items()}
    w_noise, g_noise = [], []
    for r in sorted(glob)[:-1]:
        mean_up = torch.stack([flat(p) for _, _, p in ups[r]]).mean(0)
        w_noise.append(flat(glob[r + 1]) - flat(glob[r]) - mean_up)
        g_noise.append(gglob[r + 1] - torch.stack([flat(p) for _, _, p in gs[r]]).mean(0))
    for noise, std in ((torch.cat(w_noise).numpy(), s1), (torch.cat(g_noise).numpy(), s2)):
        assert noise.size > 1500
        assert abs(float(np.std(noise)) / std - 1) < 0.08, (float(np.std(noise)), std)
        assert abs(float(np.mean(noise))) < 5 * std / np.sqrt(noise.size)
        assert stats.kstest(noise, "norm", args=(0, std)).pvalue > 1e-4
