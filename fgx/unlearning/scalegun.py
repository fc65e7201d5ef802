"""Certified graph unlearning: ``unlearning=scalegun`` (lazy local propagation + Newton step + certificate
accountant), ``cgu`` (exact re-propagation + the same Newton step and accountant) and ``retrain``
(exact re-propagation + training from scratch with fresh noise). All run after ``algorithm=certified_lr``
has trained, on its clients' propagation states; a request is routed to the clients that hold the
deleted items and only they update their state.

Accountant (Algorithm 1 of ScaleGUN, per class of the one-vs-rest model): beta_c accumulates
gamma2 ||Z'|| ||H^-1 Delta_c|| ||Z' H^-1 Delta_c|| over Newton steps; the approximation term
2 c1 ||1^T R|| (current residues) plus the training gradient norm is added fresh each time; when any
class exceeds alpha eps / sqrt(2 log(1.5/delta)) every class is retrained with fresh noise on the
current embeddings (no re-propagation) and beta resets."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from fgx.config import ConfigError, spec
from fgx.registry import UNLEARNING
from fgx.unlearning.base import UnlearningMethod
from fgx.unlearning.certified import C1, certificate_budget


@dataclass
class RequestParams:
    type: str = field(default="edge", metadata=spec(choices=["edge", "node", "feature"]))
    selection: str = field(default="random", metadata=spec(
        choices=["random", "vulnerable", "adversarial"],
        help="random items; vulnerable: edges of low-degree test nodes to same-label neighbours; "
             "adversarial: inject edges between differently labelled nodes, train, then remove them"))
    batch_size: int = field(default=1, metadata=spec(min=1, help="items per request"))
    num_requests: int = field(default=10, metadata=spec(min=1))
    max_degree: int = field(default=5, metadata=spec(min=1, help="vulnerable: test nodes with fewer neighbours"))
    num_add: int = field(default=500, metadata=spec(min=1, help="adversarial: edges injected before training"))


@dataclass
class CertificateParams:
    epsilon: float = field(default=1.0, metadata=spec(gt=0.0))
    delta: float = field(default=1e-4, metadata=spec(gt=0.0, max=1.0))
    include_approx_term: bool = field(default=True, metadata=spec(
        help="add 2 c1 ||1^T R|| (paper); false = the reference code's check"))
    include_train_residual: bool = field(default=True, metadata=spec(
        help="add the training gradient norm (the optimum is reached only to tolerance)"))
    residue_norm: str = field(default="signed", metadata=spec(
        choices=["signed", "abs"], help="1^T R with signed residues (paper) or |R| (conservative)"))


@dataclass
class CertifiedUnlearningParams:
    requests: RequestParams = field(default_factory=RequestParams)
    certificate: CertificateParams = field(default_factory=CertificateParams)
    solver: str = field(default="cg", metadata=spec(
        choices=["cg", "hessian"], help="cg: Hessian-vector products (one round each); hessian: clients send "
                                        "F x F Hessians and the Gram matrix (two rounds per request)"))
    retrain_every: int = field(default=1, metadata=spec(
        min=1, help="retrain baseline only: re-propagate and retrain every N requests (accuracy recorded there)"))
    mia: bool = field(default=True, metadata=spec(help="edge requests: deleted-edge membership-inference AUC"))
    seed_offset: int = field(default=0, metadata=spec(help="added to the run seed to draw the requests"))


class CertifiedUnlearning(UnlearningMethod):
    exact = False        # embeddings re-propagated exactly after each request
    newton = True        # Newton step + accountant (False: retrain after every request)

    @classmethod
    def check_config(cls, params, validated) -> None:
        if validated.names.get("algorithm") != "certified_lr":
            raise ConfigError("algorithm.name", validated.names.get("algorithm"),
                              f"certified_lr (unlearning={cls.name} unlearns the certified linear model)")

    def run(self, ctx, algorithm) -> dict:
        p = self.params
        algo, server = algorithm, algorithm.server
        rng = np.random.default_rng([ctx.seed + p.seed_offset, 4099])
        server.round = int(ctx.cfg.rounds) + 1
        out: dict = {"method": self.name, "requests_config": _plain(p), "setup": {}}
        if p.requests.selection == "adversarial":
            out["setup"]["clean_test_accuracy"] = server.accuracy("test")
            injected = _inject_adversarial(algo.parties, p.requests.num_add, rng)
            out["setup"]["injected_edges"] = int(sum(e.shape[1] for e in injected.values()))
            algo.build_propagation(exact=self.exact or algo.exact)
            algo.train(fresh_noise=False, warm_start=False)
        elif self.exact and not algo.exact:
            # CGU/retrain start from exactly propagated embeddings and the model trained on them
            out["setup"]["exact_propagation_s"] = algo.build_propagation(exact=True)
            # same noise b as the run's model: the baselines differ from ScaleGUN only in propagation
            out["setup"]["train_s"] = algo.train(fresh_noise=False, warm_start=False)
        out["setup"]["test_accuracy"] = server.accuracy("test")
        requests = self._requests(algo.parties, rng, injected if p.requests.selection == "adversarial" else None)
        budget = certificate_budget(server.noise_std, p.certificate.epsilon, p.certificate.delta)
        mia_before = _edge_mia(server, requests, rng) if p.mia and p.requests.type == "edge" else None

        proc = RequestProcessor(server, p, budget, newton=self.newton,
                                retrain=lambda: algo.train(fresh_noise=True),
                                baseline_retrain=lambda: algo.train(fresh_noise=False, warm_start=False))
        rows = []
        for i, req in enumerate(requests, start=1):
            row = {"request": i, **proc.process(req)}
            rows.append(row)
            if i % max(1, len(requests) // 10) == 0 or i == len(requests):
                ctx.log.info("%s: request %d/%d test acc %s, retrains %d, %.3fs (prop %.4fs)", self.name, i,
                             len(requests), row["test_accuracy"], proc.retrains, row["total_s"],
                             row["propagation_s"])
        retrains = proc.retrains

        summary = {
            "method": self.name, "requests": len(rows), "type": p.requests.type,
            "selection": p.requests.selection, "batch_size": p.requests.batch_size,
            "initial_test_accuracy": out["setup"]["test_accuracy"],
            "final_test_accuracy": next((r["test_accuracy"] for r in reversed(rows) if r["test_accuracy"] is not None),
                                        out["setup"]["test_accuracy"]),
            "retrain_count": retrains, "budget": float(budget),
            "mean_total_s": float(np.mean([r["total_s"] for r in rows])) if rows else 0.0,
            "mean_propagation_s": float(np.mean([r["propagation_s"] for r in rows])) if rows else 0.0,
            "mean_exchanges": float(np.mean([r["exchanges"] for r in rows])) if rows else 0.0,
        }
        if mia_before is not None:
            summary["mia_auc_before"] = mia_before["auc"]
            summary["mia_auc_after"] = _edge_mia(server, requests, rng, mia_before)["auc"]
        if p.requests.selection == "adversarial":
            summary["clean_test_accuracy"] = out["setup"]["clean_test_accuracy"]
            summary["accuracy_recovery"] = summary["final_test_accuracy"] - summary["initial_test_accuracy"]
        out.update({"budget": float(budget), "requests": rows, "summary": summary})
        return out

    # -- request selection ------------------------------------------------------------------------------
    def _requests(self, parties, rng, injected) -> list[dict]:
        """A list of requests; each maps client id -> its items (edges as (2, k) local ids, else node ids)."""
        rp = self.params.requests
        need = rp.batch_size * rp.num_requests
        if rp.type == "edge":
            if rp.selection == "adversarial":
                pool = [(cid, e[:, j]) for cid, e in injected.items() for j in range(e.shape[1])]
                pool = [pool[j] for j in rng.permutation(len(pool))]
            elif rp.selection == "vulnerable":
                pool = _vulnerable_edges(parties, rp.max_degree, rng)
            else:
                pool = [(p.cid, e) for p in parties for e in p.prop.edges().T]
                pool = [pool[j] for j in rng.permutation(len(pool))]
        else:
            if rp.selection != "random":
                raise ConfigError("unlearning.requests.selection", rp.selection,
                                  f"random for {rp.type} requests (vulnerable/adversarial select edges)")
            pool = [(p.cid, int(u)) for p in parties for u in p.train_ids()]
            pool = [pool[j] for j in rng.permutation(len(pool))]
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


class RequestProcessor:
    """One deletion request after another: route items to their clients (only those update their
    propagation state), then either the Newton step under the accountant or (retrain baseline)
    training from scratch. Returns the row ``unlearning.json`` records."""

    def __init__(self, server, params, budget: float, newton: bool, retrain, baseline_retrain):
        self.server, self.params, self.budget, self.newton = server, params, budget, newton
        self.retrain, self.baseline_retrain = retrain, baseline_retrain
        self.beta = np.zeros(server.C)
        self.retrains = 0
        self.spectral = None
        self.count = 0

    def process(self, req: dict) -> dict:
        server, p = self.server, self.params
        kind = p.requests.type
        server.round += 1
        ex0, t0 = server.exchanges, time.perf_counter()
        n_old = server.num_train()
        delta = np.zeros_like(server.W)
        prop_s = 0.0
        self.count += 1
        if not self.newton:
            return self._retrain_baseline(req, ex0, t0)
        for cid, items in req.items():
            # client-side: gradient change of its own training rows at the last broadcast weights
            party = server.parties[cid]
            g_old = party.local_data(server.C).grad(server.W)
            t1 = time.perf_counter()
            _apply(party, kind, items)
            prop_s += time.perf_counter() - t1
            delta += g_old - party.local_data(server.C).grad(server.W)
        delta += server.lam * (n_old - server.num_train()) * server.W
        row = {"items": int(sum(v.shape[1] if kind == "edge" else len(v) for v in req.values())),
               "clients": sorted(int(c) for c in req), "propagation_s": prop_s}
        newton_s = retrain_s = 0.0
        retrained = False
        t1 = time.perf_counter()
        step = server.newton_step(delta, p.solver, p.certificate.residue_norm, self.spectral)
        self.spectral = step["spectral_vector"]
        self.beta = self.beta + step["unlearning_term"]
        approx = 2 * C1 * step["residue_norm"] if p.certificate.include_approx_term else 0.0
        if p.certificate.include_train_residual:
            approx = approx + server.train_residual
        newton_s = time.perf_counter() - t1
        bound = self.beta + approx
        if np.any(bound > self.budget):
            t1 = time.perf_counter()
            self.retrain()          # fresh noise, current embeddings, no re-propagation
            retrain_s = time.perf_counter() - t1
            self.beta[:] = 0.0
            self.retrains += 1
            retrained = True
        else:
            server.W = server.W + step["v"]
            server.broadcast("weights", server.W)
        approx = np.broadcast_to(np.asarray(approx, dtype=np.float64), self.beta.shape)
        row.update({"z_norm": step["z_norm"], "newton_norm": float(step["v_norm"].max()),
                    "prediction_change_norm": float(step["zv_norm"].max()),
                    "unlearning_term": float(step["unlearning_term"].max()),
                    "bound": float(bound.max()), "beta": float(self.beta.max()),
                    "approx_term": float(approx.max()), "residue_norm": step["residue_norm"],
                    "cg_iterations": step["cg_iterations"],
                    "budget_left": float(self.budget - (self.beta + approx).max())})
        row.update({"newton_s": newton_s, "retrain_s": retrain_s, "retrained": retrained,
                    "retrain_count": self.retrains, "total_s": time.perf_counter() - t0,
                    "test_accuracy": server.accuracy("test"), "exchanges": server.exchanges - ex0})
        return row

    def _retrain_baseline(self, req: dict, ex0: int, t0: float) -> dict:
        """Exact re-propagation + training from scratch (zero init; same seed, so the same b). With
        ``retrain_every`` > 1 the graph changes accumulate and both happen every N requests only."""
        server, kind = self.server, self.params.requests.type
        evaluate = self.count % self.params.retrain_every == 0
        prop_s = 0.0
        for cid, items in req.items():
            party = server.parties[cid]
            party.prop.deferred = True
            t1 = time.perf_counter()
            _apply(party, kind, items)
            prop_s += time.perf_counter() - t1
        row = {"items": int(sum(v.shape[1] if kind == "edge" else len(v) for v in req.values())),
               "clients": sorted(int(c) for c in req)}
        retrain_s = 0.0
        if evaluate:
            t1 = time.perf_counter()
            for party in server.parties:
                party.prop.embedding()          # the deferred exact re-propagation
            prop_s += time.perf_counter() - t1
            t1 = time.perf_counter()
            self.baseline_retrain()
            retrain_s = time.perf_counter() - t1
            self.retrains += 1
        row.update({"propagation_s": prop_s, "newton_s": 0.0, "retrain_s": retrain_s, "retrained": evaluate,
                    "retrain_count": self.retrains, "total_s": time.perf_counter() - t0,
                    "test_accuracy": server.accuracy("test") if evaluate else None,
                    "exchanges": server.exchanges - ex0})
        return row


def _apply(party, kind: str, items) -> None:
    party.invalidate()
    if kind == "edge":
        party.prop.remove_edges(items)
        return
    nodes = np.asarray(items, dtype=np.int64)
    if party.removed_train is None:
        party.removed_train = np.zeros(party.n, dtype=bool)
    party.removed_train[nodes] = True       # the node's label leaves the training set
    if kind == "feature":
        party.prop.remove_node_features(nodes)
    else:
        party.prop.remove_nodes(nodes)


def _vulnerable_edges(parties, max_degree: int, rng) -> list:
    """Paper's Table 1 selection: shuffled test nodes with fewer than ``max_degree`` neighbours; each
    contributes its edges to same-label neighbours."""
    pool, seen = [], set()
    cands = [(p, int(u)) for p in parties for u in np.flatnonzero(p.masks["test"])]
    for j in rng.permutation(len(cands)):
        p, u = cands[j]
        lo, hi = p.prop.adj.indptr[u], p.prop.adj.indptr[u + 1]
        nbrs = [int(t) for t, w in zip(p.prop.adj.indices[lo:hi], p.prop.adj.data[lo:hi]) if w != 0 and t != u]
        if len(nbrs) >= max_degree:
            continue
        for t in nbrs:
            key = (p.cid, min(u, t), max(u, t))
            if p.y[t] == p.y[u] and key not in seen:
                seen.add(key)
                pool.append((p.cid, np.array([u, t], dtype=np.int64)))
    return pool


def _inject_adversarial(parties, num_add: int, rng) -> dict:
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


def _edge_mia(server, requests, rng, before: dict | None = None) -> dict:
    """Link-stealing attack on the deleted edges: score = -||p_u - p_v|| (posterior distance), AUC of
    deleted edges against node pairs that were never edges. Each client scores its own pairs and sends
    only the scores (the AUC needs no raw data)."""
    from sklearn.metrics import roc_auc_score

    if before is None:
        pos, neg = [], []
        for req in requests:
            for cid, e in req.items():
                pos += [(cid, int(u), int(v)) for u, v in e.T]
        for cid, u, v in pos:
            p = server.parties[cid]
            while True:
                a, b = (int(x) for x in rng.integers(0, p.n, 2))
                if a != b and not _has_edge(p, a, b) and (a, b) not in {(x[1], x[2]) for x in pos if x[0] == cid}:
                    break
            neg.append((cid, a, b))
        before = {"pos": pos, "neg": neg}
    scores, labels = [], []
    for label, pairs in ((1, before["pos"]), (0, before["neg"])):
        for cid, u, v in pairs:
            post = _posterior(server, server.parties[cid], np.array([u, v]))
            scores.append(-float(np.linalg.norm(post[0] - post[1])))
            labels.append(label)
    return {**before, "auc": float(roc_auc_score(labels, scores))}


def _has_edge(party, a: int, b: int) -> bool:
    lo, hi = party.prop.adj.indptr[a], party.prop.adj.indptr[a + 1]
    k = lo + np.searchsorted(party.prop.adj.indices[lo:hi], b)
    return bool(k < hi and party.prop.adj.indices[k] == b and party.prop.adj.data[k] != 0)


def _posterior(server, party, nodes: np.ndarray) -> np.ndarray:
    logits = party.prop.Z[nodes] @ server.W
    e = np.exp(logits - logits.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def _plain(obj):
    from dataclasses import asdict, is_dataclass
    return asdict(obj) if is_dataclass(obj) else obj


@UNLEARNING.register("scalegun", params=CertifiedUnlearningParams)
class ScaleGUN(CertifiedUnlearning):
    name = "scalegun"


@UNLEARNING.register("cgu", params=CertifiedUnlearningParams)
class CGU(CertifiedUnlearning):
    name = "cgu"
    exact = True


@UNLEARNING.register("retrain", params=CertifiedUnlearningParams)
class Retrain(CertifiedUnlearning):
    name = "retrain"
    exact = True
    newton = False
