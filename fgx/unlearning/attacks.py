"""Attacks that judge unlearning, run on the unlearned model and on a model retrained from scratch on D'.

Edge requests (the removed edges against node pairs that were never edges, AUC; 0.5 = nothing learnt):
- ``link_stealing_posterior``: cosine similarity of the two nodes' posteriors (He et al., *Stealing Links
  from Graph Neural Networks*, USENIX Security 2021, attack-0 with a posterior similarity);
- ``mia_edges``: minus the Euclidean distance of the posteriors (``edge_mia``'s score, the deleted-edge
  membership inference ``mia_auc_before/after`` report for the unlearned model);
- ``link_stealing_features``: cosine similarity of the propagated feature rows the model predicts from
  (the feature-similarity attack applied to what the served model consumes; on raw features every
  model would score the same, so ``link_stealing_raw_features`` is reported once as the reference);
- ``linkteller``: LinkTeller's influence analysis (Wu et al., IEEE S&P 2022): perturb u's features by a
  factor (1 + delta), measure how much v's posterior moves, ||p_v(x_u (1+delta)) - p_v|| / delta, both
  directions averaged; the change of v's propagated row is sum_l w_l (A_hat^l)_vu delta x_u on the current
  graph (an exact sparse walk from u).

Node and feature requests: ``mia_deleted_nodes``: the confidence attack (Yeom et al., CSF 2018): the
posterior of the true label, queried with the record as it was trained on (its embedding before the
request), for the deleted training nodes against as many test nodes (non-members).

Difference attacks (Chen et al., *When Machine Unlearning Jeopardizes Privacy*, CCS 2021): the attacker
queried the model before the requests and queries it again after them, and scores a target by how far its
posteriors moved (their Euclidean distance, the paper's distance feature, used as the score itself):
- ``difference`` (edges): the served posteriors of both endpoints, before and after (each on the graph of
  its time), summed - what a client of the service sees;
- ``difference_weights`` (edges): both endpoints queried with their rows as they were before the requests,
  so only the weights' change shows;
- ``difference`` (nodes): the deleted node's record (its row as trained on), before and after.

Every attack is scored for three models: ``unlearned`` (what the method released after the last
request), ``retrained`` (from scratch on exact embeddings of D', fresh noise) and ``never_updated`` (the
weights before the first request, served on the current graph: what a method that skipped every update
would release).

Each client scores its own pairs or nodes and the AUC needs only the scores (as ``edge_mia``)."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from fgx.unlearning.requests import posterior

LINKTELLER_DELTA = 1e-3


def prepare(server, requests, kind: str, link_pairs: dict | None, rng) -> dict:
    """What the attacker holds before the requests: the removed edges and never-edges (``link_pairs``
    from ``edge_mia``), or the deleted nodes and test nodes with their embeddings as trained on."""
    before = {"W": server.W.copy()}
    if kind == "edge":
        state = {"kind": "edge", "pos": link_pairs["pos"], "neg": link_pairs["neg"], "before": before}
        for cid, nodes in _endpoints(link_pairs["pos"] + link_pairs["neg"]).items():
            p = server.parties[cid]
            before[cid] = {"nodes": nodes, "rows": p.prop.rows(nodes), "posteriors": posterior(server, p, nodes)}
        return state
    members = [(cid, int(u)) for req in requests for cid, items in req.items() for u in np.ravel(items)]
    nonmembers = []
    for p in server.parties:
        k = sum(1 for cid, _ in members if cid == p.cid)
        test = p.split_ids("test")
        if k and test.size:
            nonmembers += [(p.cid, int(u)) for u in rng.choice(test, min(k, test.size), replace=False)]
    rows = {}
    for label, nodes in ((1, members), (0, nonmembers)):
        for cid, u in nodes:
            rows[(label, cid, u)] = server.parties[cid].prop.rows(np.array([u]))[0]
    return {"kind": kind, "members": members, "nonmembers": nonmembers, "rows": rows, "before": before}


def _endpoints(pairs) -> dict[int, np.ndarray]:
    out: dict[int, set] = {}
    for cid, u, v in pairs:
        out.setdefault(cid, set()).update((int(u), int(v)))
    return {cid: np.array(sorted(nodes), dtype=np.int64) for cid, nodes in out.items()}


def _auc(pos, neg) -> float:
    from sklearn.metrics import roc_auc_score   # here, not at the top: validating a config imports this module

    return float(roc_auc_score(np.r_[np.ones(len(pos)), np.zeros(len(neg))], np.r_[pos, neg]))


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-300)


def _softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def _by_party(pairs):
    out: dict[int, list] = {}
    for cid, u, v in pairs:
        out.setdefault(cid, []).append((u, v))
    return {cid: np.array(uv, dtype=np.int64).reshape(-1, 2) for cid, uv in out.items()}


def _influence(prop, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """sum_l w_l (A_hat^l)[dst_k, src_k] on the current graph, A_hat = D^-1/2 A D^-1/2 (self-loops)."""
    inv = 1.0 / np.sqrt(prop.deg)
    a_hat = sp.diags(inv) @ prop.adj.astype(np.float64) @ sp.diags(inv)
    k = src.size
    walk = sp.csr_matrix((np.ones(k), (src, np.arange(k))), shape=(prop.n, k))
    out = np.zeros(k)
    for lvl, w in enumerate(prop.weights):
        if lvl:
            walk = (a_hat @ walk).tocsr()
        if w:
            out += w * np.asarray(walk[dst, np.arange(k)]).ravel()
    return out


def _linkteller(server, party, uv: np.ndarray) -> np.ndarray:
    x = party.current_features()
    scores = np.zeros(uv.shape[0])
    for a, b in ((0, 1), (1, 0)):
        u, v = uv[:, a], uv[:, b]
        infl = _influence(party.prop, u, v)
        z_v = party.prop.rows(v)
        base = _softmax(z_v @ server.W)
        moved = _softmax((z_v + (LINKTELLER_DELTA * infl)[:, None] * x[u].astype(np.float64)) @ server.W)
        scores += 0.5 * np.linalg.norm(moved - base, axis=1) / LINKTELLER_DELTA
    return scores


def _edge_scores(server, pairs, before: dict) -> dict[str, np.ndarray]:
    out: dict[str, list] = {"link_stealing_posterior": [], "mia_edges": [], "link_stealing_features": [],
                            "linkteller": [], "link_stealing_raw_features": [], "difference": [],
                            "difference_weights": []}
    for cid, uv in _by_party(pairs).items():
        p = server.parties[cid]
        post_u, post_v = posterior(server, p, uv[:, 0]), posterior(server, p, uv[:, 1])
        then = before[cid]
        at = np.searchsorted(then["nodes"], uv)                   # positions of the endpoints in the record
        moved = [np.linalg.norm(posterior_now - then["posteriors"][at[:, k]], axis=1)
                 for k, posterior_now in enumerate((post_u, post_v))]
        out["difference"].append(moved[0] + moved[1])
        same_rows = [_softmax(then["rows"][at[:, k]] @ server.W) for k in (0, 1)]
        out["difference_weights"].append(sum(np.linalg.norm(same_rows[k] - _softmax(then["rows"][at[:, k]] @ before["W"]),
                                                            axis=1) for k in (0, 1)))
        out["link_stealing_posterior"].append(_cosine(post_u, post_v))
        out["mia_edges"].append(-np.linalg.norm(post_u - post_v, axis=1))
        out["link_stealing_features"].append(_cosine(p.prop.rows(uv[:, 0]), p.prop.rows(uv[:, 1])))
        out["link_stealing_raw_features"].append(_cosine(p.x[uv[:, 0]].astype(np.float64),
                                                         p.x[uv[:, 1]].astype(np.float64)))
        out["linkteller"].append(_linkteller(server, p, uv))
    return {k: np.concatenate(v) for k, v in out.items()}


def evaluate(server, state: dict) -> dict[str, float]:
    """Attack AUCs against the server's current model (and its clients' current propagation state)."""
    before = state["before"]
    if state["kind"] == "edge":
        pos, neg = _edge_scores(server, state["pos"], before), _edge_scores(server, state["neg"], before)
        return {name: _auc(pos[name], neg[name]) for name in pos}
    conf, moved = {}, {}
    for label, nodes in ((1, state["members"]), (0, state["nonmembers"])):
        z = np.array([state["rows"][(label, cid, u)] for cid, u in nodes])
        y = np.array([server.parties[cid].y[u] for cid, u in nodes])
        post = _softmax(z @ server.W)
        conf[label] = post[np.arange(len(nodes)), y]
        moved[label] = np.linalg.norm(post - _softmax(z @ before["W"]), axis=1)
    return {"mia_deleted_nodes": _auc(conf[1], conf[0]), "difference": _auc(moved[1], moved[0])}


MODELS = ("unlearned", "retrained", "never_updated")


def three_models(server, state: dict) -> dict[str, float]:
    """Every attack's AUC for the unlearned model (the server's current weights), the never-updated one
    (the weights before the first request, on the current graph) and a model retrained from scratch on
    the exact embeddings of D' (fresh noise; what the certificate compares with). Leaves the retrained
    model in place."""
    unlearned = evaluate(server, state)
    released = server.W
    server.W = state["before"]["W"]
    never = evaluate(server, state)
    server.W = released
    server.retrain_exact()
    retrained = evaluate(server, state)
    out = {}
    for name in unlearned:
        if name == "link_stealing_raw_features":      # the same for every model: reported once
            out[f"{name}_auc"] = unlearned[name]
            continue
        for model, res in zip(MODELS, (unlearned, retrained, never)):
            out[f"{name}_auc_{model}"] = res[name]
    return out
