"""Could an exact top-20 skip most of f_Pred's pairs? (issue #41, ``mlp_angle`` evaluation.)

LPSFed's 2-layer f_Pred scores a pair as s = b2 + sum_k w2_k relu(h_k) with h_k = a_uk + G_uk . v, where
a_u = W_u u + b1 and G_uk = W_v[k] + u * W_3[k] (f_Pred's first layer on [u, v, u * v], split by part).
An exact top-k needs f_Pred only on the pairs whose upper bound reaches the user's k-th best exact
score; the rest can be skipped. This measures, on an LPSFed run's trained client models, the share of
(user, item) pairs such a pruned evaluation would still score, for linear-relaxation bounds (CROWN:
relu(h) <= lam (h - l) on [l, u], relu(h) >= alpha h) built from intervals [l, u] of h_k per user:

- ``crown_global``: intervals over all items, from the item box and ball (cheap: 2 x K x D per user);
- ``crown_<C>_clusters``: intervals per k-means cluster of items (C x 4 x K x D per user);
- ``crown_<C>_clusters_exact_intervals``: the same clusters with the exact range of h_k over each
  cluster's items, which takes the exact computation itself: the best any interval bound on these
  clusters can do.

Thresholds are those of the test ranking (training and validation items masked: the smallest pool,
so the lowest k-th score; a bound that skips a pair there skips it for validation too). Every bound is
checked against the exact scores (float64) before it is counted.

    python scripts/bench_lpsfed.py --pruning RUN_DIR     # RUN_DIR: fgx run algorithm=lpsfed dataset=movielens100k
"""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf
from scipy.cluster.vq import kmeans2

from fgx.data.base import DataEnv
from fgx.data.movielens import ML100KParams, load_movielens100k
from fgx.models.lgcn import LGCN, LGCNParams
from fgx.partition.base import build_clients
from fgx.partition.spectral_bipartite import SpectralBipartiteParams, spectral_bipartite
from fgx.recsys.bipartite import client_interactions
from fgx.recsys.spectral import cached_eigenpairs

CLUSTERS = 128
TOP_K = 20


def load_run_models(run_dir: Path, data_dir: Path) -> list[tuple[LGCN, object]]:
    """The run's client models (trained weights from checkpoint.pt) with their interactions, rebuilt the
    way ``fgx run`` built them (dataset, partitioner and model from the run's .hydra/config.yaml)."""
    cfg_path, ckpt_path = run_dir / ".hydra" / "config.yaml", run_dir / "checkpoint.pt"
    for f in (cfg_path, ckpt_path):
        if not f.is_file():
            raise SystemExit(f"--pruning: {run_dir} has no {f.relative_to(run_dir)} (an fgx run directory with a checkpoint)")
    cfg = OmegaConf.to_container(OmegaConf.load(cfg_path))
    want = {("algorithm", "lpsfed"), ("dataset", "movielens100k"), ("partitioner", "spectral_bipartite"),
            ("model", "lgcn")}
    got = {(g, cfg[g]["name"]) for g, _ in want}
    if got != want or cfg["model"]["score"] != "mlp_angle" or cfg["model"]["pred_layers"] != 2:
        raise SystemExit(f"--pruning: {run_dir} is not an LPSFed run on movielens100k with the spectral_bipartite "
                         f"partitioner and LGCN's 2-layer mlp_angle f_Pred ({sorted(got)}, score "
                         f"{cfg['model']['score']}, pred_layers {cfg['model']['pred_layers']})")
    params = {g: {k: v for k, v in cfg[g].items() if k != "name"} for g in ("dataset", "partitioner", "model")}
    ds = load_movielens100k(ML100KParams(**{**params["dataset"], "download": False}),
                            DataEnv(data_dir, cfg["seed"], logging.getLogger()))
    owned = spectral_bipartite(SpectralBipartiteParams(**params["partitioner"]), ds.data, ds.info, cfg["seed"])
    states = torch.load(ckpt_path, map_location="cpu", weights_only=False)["algorithm"]["models"]
    mp = LGCNParams(**params["model"])
    out = []
    for c, state in zip(build_clients(ds.data, ds.info, owned), states, strict=True):
        inter = client_interactions(c, ds.data.num_users)
        tr = inter.train.numpy()
        _, vec = cached_eigenpairs(tr[0], tr[1], inter.num_users, inter.num_items, mp.frequency, None)
        m = LGCN(mp, inter.num_users, inter.num_items, torch.from_numpy(vec),
                 torch.bincount(inter.train[0], minlength=inter.num_users),
                 torch.bincount(inter.train[1], minlength=inter.num_items))
        m.load_state_dict(state)
        out.append((m.eval(), inter))
    return out


def fpred_parts(pred: torch.nn.Sequential, u: torch.Tensor):
    """f_Pred's first layer split for users u [M, D]: a [M, K], G [M, K, D], w2 [K], b2 (float64)."""
    d = u.size(1)
    w = pred[0].weight.double()
    a = u @ w[:, :d].T + pred[0].bias.double()
    g = w[None, :, d:2 * d] + u[:, None, :] * w[None, :, 2 * d:]
    return a, g, pred[2].weight.double().view(-1), pred[2].bias.double()


def crown_upper(a, g, w2, b2, lo, hi, v):
    """Upper bounds [M, n] of f_Pred's pre-tanh score for items v [n, D], given intervals lo <= h_k <= hi
    [M, K] that hold for these items: relu(h) <= lam h + mu (the chord over [lo, hi]) where w2_k > 0,
    relu(h) >= alpha h (alpha 1 or 0, the side of the wider half) where w2_k < 0."""
    dead, live = hi <= 0, lo >= 0
    lam = torch.where(dead, 0.0, torch.where(live, 1.0, hi / (hi - lo).clamp(min=1e-300)))
    mu = torch.where(dead | live, 0.0, -lam * lo)
    alpha = torch.where(dead, 0.0, torch.where(live, 1.0, (hi > -lo).double()))
    pos = (w2 > 0)[None]
    c = torch.where(pos, w2 * lam, w2 * alpha)                        # [M, K]: the bound is linear in h
    const = b2 + (c * a).sum(1) + torch.where(pos, w2 * mu, 0.0).sum(1)
    return const[:, None] + torch.einsum("uk,ukd,nd->un", c, g, v)


def box_ball_intervals(a, g, v):
    """Intervals of h_k over items v from their bounding box and their ball around the mean (both hold;
    the tighter of each side is kept)."""
    lo_v, hi_v = v.min(0).values, v.max(0).values
    mid, rad = (lo_v + hi_v) / 2, (hi_v - lo_v) / 2
    centre = v.mean(0)
    radius = (v - centre).norm(dim=1).max()
    h_mid, box = a + g @ mid, g.abs() @ rad
    h_centre, ball = a + g @ centre, g.norm(dim=2) * radius
    return torch.maximum(h_mid - box, h_centre - ball), torch.minimum(h_mid + box, h_centre + ball)


def pruning_counts(model: LGCN, inter, k: int = TOP_K, clusters: int = CLUSTERS, seed: int = 0) -> dict[str, float]:
    """Pairs (user, non-training item) each bound keeps for an exact top-k, and the pairs in all."""
    with torch.no_grad():
        uh, vh = (t.double() for t in model.embed())
        a, g, w2, b2 = fpred_parts(model.pred, uh)
        h = a[:, :, None] + g @ vh.T                                   # exact [M, K, N]
        s = torch.einsum("k,ukn->un", w2, h.relu()) + b2
        m, n = s.shape
        train = torch.zeros(m, n, dtype=torch.bool)
        train[inter.train[0], inter.train[1]] = True
        seen = train.clone()
        seen[inter.val[0], inter.val[1]] = True
        pool = s.masked_fill(seen, float("-inf"))
        # a user with fewer than k unseen items keeps every pair
        kth = pool.topk(min(k, n), 1).values[:, -1:]
        theta = torch.where(((~seen).sum(1) >= k)[:, None], kth, float("-inf"))

        def kept(ub, cols=slice(None)):
            if not bool((ub >= s[:, cols] - 1e-9 * (1 + s[:, cols].abs())).all()):
                raise AssertionError("an upper bound fell below an exact score")
            return float(((ub >= theta) & ~train[:, cols]).sum())

        counts = {"pairs": float(m * n), "crown_global": kept(crown_upper(a, g, w2, b2, *box_ball_intervals(a, g, vh), vh))}
        _, label = kmeans2(vh.numpy(), min(clusters, n), seed=seed, minit="++")
        boxed = exact = 0.0
        for c in np.unique(label):
            cols = torch.from_numpy(np.flatnonzero(label == c))
            v = vh[cols]
            boxed += kept(crown_upper(a, g, w2, b2, *box_ball_intervals(a, g, v), v), cols)
            hc = h[:, :, cols]
            exact += kept(crown_upper(a, g, w2, b2, hc.min(2).values, hc.max(2).values, v), cols)
        counts[f"crown_{clusters}_clusters"] = boxed
        counts[f"crown_{clusters}_clusters_exact_intervals"] = exact
        # what computing the cluster bounds costs, in exact-pair units (K x D multiply-adds): per user and
        # cluster h at the box's and the ball's centres and the box's reach (3 x K x D), the bound's slope (K x D)
        counts["cluster_bound_cost_pairs"] = float(m * len(np.unique(label)) * 4)
    return counts


def pruning_report(run_dir: Path, data_dir: Path) -> dict:
    total: dict[str, float] = {}
    for model, inter in load_run_models(run_dir, data_dir):
        for key, val in pruning_counts(model, inter).items():
            total[key] = total.get(key, 0.0) + val
    pairs = total.pop("pairs")
    shares = {key: round(val / pairs, 4) for key, val in total.items() if key != "cluster_bound_cost_pairs"}
    cost = total["cluster_bound_cost_pairs"] / pairs
    overrides = run_dir / ".hydra" / "overrides.yaml"
    # the run's command line, without where its data and outputs were on the machine that ran it
    command = [o for o in (OmegaConf.to_container(OmegaConf.load(overrides)) if overrides.is_file() else [])
               if not o.split("=")[0].lstrip("+~").startswith(("data_dir", "hydra."))]
    return {"lpsfed_pruning": {"pairs": int(pairs), "top_k": TOP_K, "share_of_pairs_scored": shares,
                               f"crown_{CLUSTERS}_clusters_work_share": round(shares[f"crown_{CLUSTERS}_clusters"] + cost, 4),
                               "run": "fgx run " + " ".join(command)}}
