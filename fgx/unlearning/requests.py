"""Deletion requests for certified unlearning: which edges / nodes / features leave, grouped into
requests and routed to the clients that hold them; adversarial edge injection; the deleted-edge
membership-inference attack. Selection never lists every edge of a large graph: random edges are
sampled from the adjacency directly."""
from __future__ import annotations

import numpy as np

from fgx.config import ConfigError


def make_requests(parties, rp, rng, injected: dict | None = None) -> list[dict]:
    """A list of requests; each maps client id -> its items (edges as (2, k) local ids, else node ids)."""
    need = rp.batch_size * rp.num_requests
    if rp.type == "edge":
        if rp.selection == "adversarial":
            pool = [(cid, e[:, j]) for cid, e in injected.items() for j in range(e.shape[1])]
            pool = [pool[j] for j in rng.permutation(len(pool))]
        elif rp.selection == "vulnerable":
            pool = vulnerable_edges(parties, rp.max_degree, rng)
        else:
            pool = random_edges(parties, need, rng)
    elif rp.selection == "backdoor":
        # the poisoned training nodes (fgx/unlearning/backdoor_remedy.py), in a random order
        pool = [injected[j] for j in rng.permutation(len(injected))]
    else:
        if rp.selection != "random":
            raise ConfigError("unlearning.requests.selection", rp.selection,
                              f"random or backdoor for {rp.type} requests (vulnerable/adversarial select edges)")
        ids = [(p.cid, p.train_ids()) for p in parties]
        total = sum(t.size for _, t in ids)
        if total < need:
            pool = []
        else:
            flat = rng.choice(total, need, replace=False)
            offs = np.cumsum([0] + [t.size for _, t in ids])
            owner = np.searchsorted(offs, flat, side="right") - 1
            pool = [(ids[o][0], int(ids[o][1][j - offs[o]])) for o, j in zip(owner, flat)]
        if len(pool) < need:
            raise ConfigError("unlearning.requests.num_requests", rp.num_requests,
                              f"at most {total // rp.batch_size} requests of {rp.batch_size} "
                              f"({total} training nodes can be selected)")
    if len(pool) < need:
        raise ConfigError("unlearning.requests.num_requests", rp.num_requests,
                          f"at most {len(pool) // rp.batch_size} requests of {rp.batch_size} "
                          f"({len(pool)} {rp.type} items can be selected)")
    out = []
    for r in range(rp.num_requests):
        req: dict = {}
        for cid, item in pool[r * rp.batch_size:(r + 1) * rp.batch_size]:
            req.setdefault(cid, []).append(item)
        if rp.type == "edge":
            req = {c: np.array(v, dtype=np.int64).T.reshape(2, -1) for c, v in req.items()}
        out.append(req)
    return out


def random_edges(parties, k: int, rng) -> list:
    """k distinct edges drawn uniformly over all clients' edges (clients in proportion to their edge
    counts), sampled from each adjacency without listing it."""
    counts = np.array([p.prop.num_edges() for p in parties])
    if counts.sum() < k:
        return [(p.cid, e) for p in parties for e in p.prop.edges().T]
    share = rng.multivariate_hypergeometric(counts, k)
    pool = []
    for p, s in zip(parties, share):
        if s:
            pool += [(p.cid, e) for e in p.prop.sample_edges(int(s), rng).T]
    return [pool[j] for j in rng.permutation(len(pool))]


def vulnerable_edges(parties, max_degree: int, rng) -> list:
    """Paper's Table 1 selection: shuffled test nodes with fewer than ``max_degree`` neighbours; each
    contributes its edges to same-label neighbours."""
    pool, seen = [], set()
    cands = []
    for p in parties:
        test = p.split_ids("test")
        low = test[p.prop.deg[test] - 1 < max_degree]
        cands += [(p, int(u)) for u in low]
    for j in rng.permutation(len(cands)):
        p, u = cands[j]
        for t in p.prop.neighbours(u):
            t = int(t)
            key = (p.cid, min(u, t), max(u, t))
            if p.y[t] == p.y[u] and key not in seen:
                seen.add(key)
                pool.append((p.cid, np.array([u, t], dtype=np.int64)))
    return pool


def inject_adversarial(parties, num_add: int, rng) -> dict:
    """Add ``num_add`` random edges between differently labelled nodes of the same client (spread over
    clients in proportion to their size); returns client id -> injected edges (2, k)."""
    sizes = np.array([p.n for p in parties], dtype=np.float64)
    share = np.floor(num_add * sizes / sizes.sum()).astype(int)
    share[: num_add - share.sum()] += 1
    out = {}
    for p, k in zip(parties, share):
        existing = set(map(tuple, np.sort(p.edge_index.T, axis=1).tolist()))
        found: list = []
        tries = 0
        while len(found) < k and tries < 100 * k + 1000:
            tries += 1
            u, v = rng.integers(0, p.n, 2)
            key = (min(u, v), max(u, v))
            if u == v or p.y[u] == p.y[v] or key in existing:
                continue
            existing.add(key)
            found.append(key)
        p.extra_edges = np.array(found, dtype=np.int64).reshape(-1, 2).T
        out[p.cid] = p.extra_edges
    return out


def edge_mia(server, requests, rng, before: dict | None = None) -> dict:
    """Link-stealing attack on the deleted edges: score = -||p_u - p_v|| (posterior distance), AUC of
    deleted edges against node pairs that were never edges. Each client scores its own pairs and sends
    only the scores (the AUC needs no raw data)."""
    from sklearn.metrics import roc_auc_score

    if before is None:
        pos, neg = [], []
        for req in requests:
            for cid, e in req.items():
                pos += [(cid, int(u), int(v)) for u, v in e.T]
        taken = {(x[0], x[1], x[2]) for x in pos}
        for cid, u, v in pos:
            p = server.parties[cid]
            while True:
                a, b = (int(x) for x in rng.integers(0, p.n, 2))
                if a != b and not p.prop.has_edge(a, b) and (cid, a, b) not in taken:
                    break
            neg.append((cid, a, b))
        before = {"pos": pos, "neg": neg}
    scores, labels = [], []
    for label, pairs in ((1, before["pos"]), (0, before["neg"])):
        for cid, u, v in pairs:
            post = posterior(server, server.parties[cid], np.array([u, v]))
            scores.append(-float(np.linalg.norm(post[0] - post[1])))
            labels.append(label)
    return {**before, "auc": float(roc_auc_score(labels, scores))}


def posterior(server, party, nodes: np.ndarray) -> np.ndarray:
    logits = server.scores(party, nodes)
    e = np.exp(logits - logits.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)
