"""FedPerGNN (Wu et al., Nature Communications 2022; preprint "FedGNN", arXiv 2102.04925) on client
user-item subgraphs: a GAT over each client's user-item graph *expanded* with neighbouring users of
other clients, trained with a privacy-preserving model update.

Per round:
1. Graph expansion through a third-party server (the paper's protocol). Every client sends, for each
   of its training interactions, a keyed token of the item (a hash under a key the clients share and
   the third party does not know; the paper signs item ids with a shared RSA key) and the row of the
   user's embedding; the third party matches equal tokens across clients and returns to each client,
   per token it sent, the embeddings of up to ``neighbors`` users of *other* clients who share it. The
   client adds them as extra user nodes linked to that item (constants: no gradient flows to them).
2. Local training: ``model=gat_ranker``'s GAT layers over the expanded graph (local users, items, foreign
   users), score = dot product of the final user and item vectors, BPR with temperature ``bpr_tau``.
3. Local differential privacy per batch, as the authors' code takes each step (model.py line 59,
   run.py lines 33-47): the gradients of all trained tensors (GAT weights, item rows, user rows) are
   clipped *together* to L2 norm ``clip`` (Keras 2.2.4's ``SGD(clipnorm=CLIP)``: one norm over every
   gradient, ``Optimizer.get_gradients``), a plain SGD step w ← w − lr·g follows (no momentum, no
   adaptive scaling), and Laplace noise of scale lr·2·clip/(√B·``ldp_epsilon``) is then added to every
   coordinate of every weight (run.py line 46), B the batch's size. The update is −lr·(clip(g) + n) with
   n ~ Laplace(2·clip/(√B·ε)) per coordinate: the released noisy gradient, whatever lr. ``ldp_epsilon:
   null`` switches the noise off (the step stays clipped SGD); ``clip: null`` also the clipping (only
   with ``ldp_epsilon: null``). The uploads (GAT and item-row changes over the round) and the user
   rows sent in the expansion are post-processing of those noisy batch gradients; ``pseudo_items`` items
   the client does not hold are added to the item upload with Gaussian fake updates of the same mean and
   standard deviation as its real item updates, so the server cannot tell which items the client holds.
   Accounting (``privacy_report``, written to privacy.json): the paper's claim is ε per release, per
   coordinate and per *user*, the √B being B users' independent noises averaged in a batch. A fgx
   client is one organisation that clips the batch gradient as a whole, so a release's per-coordinate
   sensitivity is 2·clip and its ε is √B·``ldp_epsilon``; fgx composes these (pure ε-DP, basic
   composition) over every noisy batch a client releases in the run and reports both figures.
4. The server averages the model updates over clients and the item updates per item over the clients
   that sent that item, and sends back the global GAT weights and item rows.
User embeddings stay with the client except through step 1 (as in the paper).

Checked against the authors' code (wuch15/FedPerGNN: ``expansion.py``, ``run.py``, ``model.py``,
``const.py``): expansion through signed item ids and a third party returning neighbour user embeddings,
sampled and zero-padded to NEIGHBOR_LEN = 100 per item; pseudo-interacted items' gradients drawn from a
normal distribution with the real gradients' spread; Laplace noise LR·2·CLIP/√BATCH_SIZE/EPS on all
weights after every batch step (run.py), the step plain SGD with the gradients clipped together by
clipnorm = CLIP = 0.1, LR = 0.01 (model.py, const.py). The code's BATCH_SIZE counts users (32); fgx's
B counts the batch's training pairs. fgx's default step size is 5, not the code's 0.01: with a clipped
step of at most lr·clip, 0.01 leaves the initial ranking unchanged after 3 rounds on ML-100K, 5 learns
(validation NDCG@20 0.199 with and without the noise; docs/recommendation.md). The code predicts ratings with a dense layer on [user, item] (MSE on ratings);
for top-K ranking on implicit feedback fgx scores with the dot product of the GNN outputs and trains
with BPR (a dense layer on the concatenation adds a user term and an item term, which ranks every user's
items identically). Its attention-based neighbour aggregation is PyG's GATConv here.

Adapted to subgraph clients (fgx decisions): the paper's client is one user with its items; here a
client is an organisation, so local users and items form one graph and expansion adds other clients'
users only (a client's own co-interacting users are already its neighbours)."""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

import numpy as np
import torch

from fgx.algorithms.base import Algorithm
from fgx.config import ConfigError, spec
from fgx.federation.channel import Message
from fgx.federation.client import round_seed
from fgx.recsys.bipartite import client_interactions
from fgx.recsys.graph_clients import graph_client_metrics
from fgx.recsys.metrics import popularity_groups
from fgx.recsys.training import bpr_epochs, known_matrix
from fgx.registry import ALGORITHMS


@dataclass
class FedPerGNNParams:
    lr: float = field(default=5.0, metadata=spec(gt=0.0, help="plain SGD step size (code: LR = 0.01, which learns "
                                                            "nothing in 3 rounds here; fgx: 5, docs/recommendation.md)"))
    local_epochs: int = field(default=5, metadata=spec(min=1, help="passes over the training pairs per round"))
    batch_size: int = field(default=4096, metadata=spec(min=1))
    num_negatives: int = field(default=1, metadata=spec(min=1))
    bpr_tau: float = field(default=1.0, metadata=spec(gt=0.0, help="BPR temperature (1.0 = standard BPR)"))
    l2: float = field(default=1e-4, metadata=spec(min=0.0, help="L2 on the batch's layer-0 embeddings"))
    neighbors: int = field(default=20, metadata=spec(min=0, help="foreign users per item from the expansion "
                                                                 "(code: 100); 0 = no expansion"))
    expand_every: int = field(default=1, metadata=spec(min=1, help="rounds between graph expansions"))
    clip: float | None = field(default=0.1, metadata=spec(
        gt=0.0, help="L2 clip of the batch gradient, all trained tensors together (code: SGD clipnorm CLIP = 0.1); "
                     "null: no clipping (only with ldp_epsilon null)"))
    ldp_epsilon: float | None = field(default=1.0, metadata=spec(
        gt=0.0, help="ε of the per-batch LDP: Laplace lr·2·clip/(√batch·ε) on every weight after each step "
                     "(code: EPS = 1); null: no noise"))
    pseudo_items: int = field(default=10, metadata=spec(min=0, help="pseudo-interacted items per upload"))
    top_k: int = field(default=20, metadata=spec(min=1))

    def validate(self, prefix: str) -> None:
        if self.clip is None and self.ldp_epsilon is not None:
            raise ConfigError(f"{prefix}.clip", None, "a clip norm: the Laplace scale is calibrated to it "
                                                      "(null only with ldp_epsilon null)")


def item_tokens(items_global: torch.Tensor, key: bytes) -> torch.Tensor:
    """Keyed 63-bit tokens of global item ids (BLAKE2b with the clients' shared key): equal items get
    equal tokens in every client, the third party cannot invert them without the key."""
    out = [int.from_bytes(hashlib.blake2b(int(i).to_bytes(8, "little"), key=key, digest_size=8).digest(), "little")
           >> 1 for i in items_global.tolist()]
    return torch.tensor(out, dtype=torch.long)


class PerGNNClient:
    def __init__(self, cid, inter, model, optimizer, token_key: bytes):
        self.cid, self.inter, self.model, self.optimizer = cid, inter, model, optimizer
        self.known = known_matrix(inter.train, inter.num_users, inter.num_items)
        self.item_group = popularity_groups(inter.train[1], inter.num_items)
        self.tokens = item_tokens(inter.items_global, token_key)    # per local item
        self.update: dict | None = None
        self.audit = None            # fgx/privacy/audit/fedpergnn.py: canaries released beside each batch


def expansion_request(cl: PerGNNClient) -> dict:
    """Per training interaction: the item's token and the row of the user's embedding."""
    tr = cl.inter.train
    return {"tokens": cl.tokens[tr[1]], "owner": tr[0].clone(), "user_embeddings": cl.model.user_emb.weight.detach().clone()}


def third_party_match(requests: list[dict], neighbors: int, seed: int) -> list[dict]:
    """For every client, per distinct token it sent: up to ``neighbors`` embeddings of other clients'
    users who sent the same token (sampled without replacement, seeded)."""
    rng = np.random.default_rng(seed)
    holders: dict[int, list[tuple[int, int]]] = {}
    for c, req in enumerate(requests):
        for t, o in zip(req["tokens"].tolist(), req["owner"].tolist()):
            holders.setdefault(t, []).append((c, o))
    replies = []
    for c, req in enumerate(requests):
        toks, embs, which = [], [], []
        for t in sorted(set(req["tokens"].tolist())):
            others = [h for h in holders[t] if h[0] != c]
            if not others or neighbors == 0:
                continue
            pick = rng.choice(len(others), size=min(neighbors, len(others)), replace=False)
            for k in pick:
                oc, row = others[k]
                embs.append(requests[oc]["user_embeddings"][row])
                which.append(len(toks))
            toks.append(t)
        dim = req["user_embeddings"].size(1)
        replies.append({"tokens": torch.tensor(toks, dtype=torch.long),
                        "token_of": torch.tensor(which, dtype=torch.long),
                        "neighbor_embeddings": torch.stack(embs) if embs else torch.zeros(0, dim)})
    return replies


def apply_expansion(cl: PerGNNClient, reply: dict) -> int:
    """Link each received embedding to the local item whose token it answers; returns their number."""
    local = {t: k for k, t in enumerate(cl.tokens.tolist())}
    items = torch.tensor([local[t] for t in reply["tokens"].tolist()], dtype=torch.long)
    foreign_items = items[reply["token_of"]] if len(items) else torch.zeros(0, dtype=torch.long)
    cl.model.set_graph(cl.inter.train, reply["neighbor_embeddings"], foreign_items)
    return int(reply["neighbor_embeddings"].size(0))


class BatchLDP:
    """The authors' batch step around a plain ``torch.optim.SGD``: ``__call__(B)`` runs between backward
    and the step and clips the gradients of all ``groups`` tensors together to L2 norm ``clip`` (torch's
    clip_grad_norm_ over the group = Keras 2.2.4's clipnorm, model.py line 59); the SGD step follows;
    ``after_step`` (the optimizer's post-step hook) adds Laplace noise of scale lr·2·clip/(√B·ε) to every
    coordinate of every weight (run.py line 46; also rows the batch did not touch, as the code noises
    all weights). ``groups``: lists of tensors each clipped as one (the model: one group, as the code;
    the privacy audit's canaries: one group each). Counts the releases, their per-coordinate client-level
    ε (2·clip / scale = √B·ε) and the squared norms of clipped gradient and noise in gradient units
    (the noise-to-signal diagnostic)."""

    def __init__(self, groups: list[list[torch.nn.Parameter]], p: FedPerGNNParams, rng: np.random.Generator):
        self.groups, self.p, self.rng = groups, p, rng
        self.batch_len = 0
        self.releases, self.epsilon, self.signal_sq, self.noise_sq = 0, 0.0, 0.0, 0.0

    def scale(self, batch_len: int) -> float:
        return 2 * self.p.clip / (math.sqrt(batch_len) * self.p.ldp_epsilon)

    def __call__(self, batch_len: int) -> None:
        self.batch_len = batch_len
        for group in self.groups:
            for prm in group:
                if prm.grad is None:
                    prm.grad = torch.zeros_like(prm)
            if self.p.clip is not None:
                torch.nn.utils.clip_grad_norm_(group, self.p.clip)
            self.signal_sq += sum(float(prm.grad.pow(2).sum()) for prm in group)

    def after_step(self, optimizer: torch.optim.Optimizer, *_) -> None:
        if self.p.ldp_epsilon is None:
            return
        scale = self.scale(self.batch_len)
        lr = optimizer.param_groups[0]["lr"]
        with torch.no_grad():
            for prm in (q for group in self.groups for q in group):
                noise = torch.from_numpy(self.rng.laplace(0.0, lr * scale, tuple(prm.shape))).to(prm.dtype)
                self.noise_sq += float(noise.pow(2).sum()) / lr ** 2
                prm.add_(noise)
        self.releases += 1
        self.epsilon += 2 * self.p.clip / scale


def local_optimizer(params, p: FedPerGNNParams) -> torch.optim.Optimizer:
    """The authors' optimiser: plain SGD (model.py line 59, ``SGD(lr=LR, clipnorm=CLIP)``; Keras' SGD
    defaults momentum 0, decay 0). The noise is added to the weights after its step, so no adaptive
    optimiser may sit between the noise and the weights."""
    return torch.optim.SGD(params, lr=p.lr)


def pergnn_train(cl: PerGNNClient, p: FedPerGNNParams, seed: int, num_items_global: int) -> dict:
    """One round of local training; returns the loss and this round's LDP releases (count, composed
    per-coordinate ε, squared norms of clipped gradients and of noise)."""
    model = cl.model
    start_gat = model.shared_state()
    start_items = model.item_emb.weight.detach().clone()
    g = torch.Generator().manual_seed(seed + cl.cid)
    rng = np.random.default_rng(seed * 7 + cl.cid)
    ldp = BatchLDP([[q for q in model.parameters() if q.requires_grad]], p, rng)
    hook = ldp if cl.audit is None else cl.audit.wrap(ldp)   # privacy.audit's canaries, if any
    noise = cl.optimizer.register_step_post_hook(ldp.after_step)
    try:
        loss = bpr_epochs(model, cl.inter.train, cl.known, cl.optimizer, p.local_epochs, p.batch_size,
                          p.num_negatives, p.l2, g, bpr_tau=p.bpr_tau, grad_hook=hook)
    finally:
        noise.remove()
    gat = {k: v - start_gat[k] for k, v in model.shared_state().items()}
    real = model.item_emb.weight.detach() - start_items
    ids = cl.inter.items_global.clone()
    if p.pseudo_items:
        held = set(ids.tolist())
        pool = np.array([i for i in range(num_items_global) if i not in held])
        fake_ids = torch.from_numpy(rng.choice(pool, size=min(p.pseudo_items, len(pool)), replace=False))
        mu, sd = real.mean(0), real.std(0) if real.size(0) > 1 else torch.zeros_like(real[0])
        fake = mu + sd * torch.from_numpy(rng.standard_normal((len(fake_ids), real.size(1)))).to(real.dtype)
        order = torch.from_numpy(rng.permutation(len(ids) + len(fake_ids)))
        ids, real = torch.cat([ids, fake_ids])[order], torch.cat([real, fake])[order]
    cl.update = {"model": gat, "items": ids, "delta": real}
    return {"loss": loss, "releases": ldp.releases, "epsilon": ldp.epsilon, "signal_sq": ldp.signal_sq,
            "noise_sq": ldp.noise_sq}


@ALGORITHMS.register("fedpergnn", params=FedPerGNNParams, tasks=("ranking",))
class FedPerGNN(Algorithm):
    requires_model = ("gat_ranker", "FedPerGNN's GAT over the expanded graph")
    messages = {
        "expansion_request": Message("up", reason=(
            "FedPerGNN's graph expansion: to the third party, per interaction a keyed item token (key unknown to "
            "it) and a local user row, plus the users' embeddings; it learns the client's graph up to pseudonyms")),
        "expansion_reply": Message("down"),      # other clients' user embeddings per token
        "model_update": Message("up"),           # GAT weight changes: post-processing of the noisy batch gradients
        "item_updates": Message("up"),           # item-row changes (likewise), pseudo items mixed in
        "global_model": Message("down"),
        "item_embeddings": Message("down"),
    }

    def setup(self) -> None:
        ctx, p, mp = self.ctx, self.params, self.ctx.model_params
        key = hashlib.sha256(f"fedpergnn-client-key-{ctx.seed}".encode()).digest()[:32]   # never sent
        self.clients = []
        for c in ctx.clients:
            inter = client_interactions(c, ctx.global_data.num_users)
            torch.manual_seed(ctx.seed * 7919 + c.cid)
            model = ctx.model_builder.per_client(mp, inter)
            opt = local_optimizer(model.parameters(), p)
            self.clients.append(PerGNNClient(c.cid, inter, model, opt, key))
        g = torch.Generator().manual_seed(int(np.random.SeedSequence([ctx.seed, 0x9E7]).generate_state(1)[0]))
        self.items = torch.randn(ctx.global_data.num_items, mp.dim, generator=g) * mp.emb_init_std
        self.gat = self.clients[0].model.shared_state()
        self.ldp_releases = [0] * len(self.clients)       # noisy batch gradients each client released
        self.ldp_epsilon = [0.0] * len(self.clients)      # their composed per-coordinate client-level ε
        self.send_global(0)

    def send_global(self, r: int) -> None:
        ch = self.ctx.channel
        for cl in self.clients:
            gat = ch.send("global_model", {k: v.clone() for k, v in self.gat.items()}, src="server", dst=cl.cid, round=r)
            rows = ch.send("item_embeddings", self.items[cl.inter.items_global].clone(), src="server", dst=cl.cid, round=r)
            cl.model.load_state_dict(gat, strict=False)
            with torch.no_grad():
                cl.model.item_emb.weight.copy_(rows)

    def expand(self, r: int) -> None:
        ch = self.ctx.channel
        reqs = [ch.send("expansion_request", expansion_request(cl), src=cl.cid, dst="third_party", round=r)
                for cl in self.clients]
        added = []
        for cl, rep in zip(self.clients, third_party_match(reqs, self.params.neighbors, round_seed(self.ctx.seed, r))):
            added.append(apply_expansion(cl, ch.send("expansion_reply", rep, src="third_party", dst=cl.cid, round=r)))
        self.ctx.record("fedpergnn_expansion", {"foreign_users": added})

    def round(self, r: int) -> dict[str, float]:
        p, ch = self.params, self.ctx.channel
        if p.neighbors and (r - 1) % p.expand_every == 0:
            self.expand(r)
        outs = self.ctx.executor.map(pergnn_train, self.clients, p, round_seed(self.ctx.seed, r),
                                     self.items.size(0))
        for cl, o in zip(self.clients, outs):
            self.ldp_releases[cl.cid] += o["releases"]
            self.ldp_epsilon[cl.cid] += o["epsilon"]
        gat_sum = {k: torch.zeros_like(v) for k, v in self.gat.items()}
        total, count = torch.zeros_like(self.items), torch.zeros(self.items.size(0))
        for cl in self.clients:
            up = ch.send("model_update", cl.update["model"], src=cl.cid, dst="server", round=r)
            for k in gat_sum:
                gat_sum[k] += up[k]
            it = ch.send("item_updates", {"items": cl.update["items"], "delta": cl.update["delta"]},
                         src=cl.cid, dst="server", round=r)
            total.index_add_(0, it["items"], it["delta"].to(total.dtype))
            count.index_add_(0, it["items"], torch.ones(it["items"].numel()))
        self.gat = {k: self.gat[k] + gat_sum[k] / len(self.clients) for k in self.gat}
        held = count > 0
        self.items[held] += total[held] / count[held, None]
        self.send_global(r)
        stats = {"loss": float(np.mean([o["loss"] for o in outs]))}
        if p.ldp_epsilon is not None:
            # ‖noise‖ / ‖clipped gradient‖ over all of the round's batch releases: the mechanism at work
            stats["noise_to_signal"] = math.sqrt(sum(o["noise_sq"] for o in outs) /
                                                 max(sum(o["signal_sq"] for o in outs), 1e-30))
            stats["ldp_epsilon_spent"] = max(self.ldp_epsilon)
        return stats

    def privacy_report(self) -> dict:
        """FedPerGNN's own LDP accounting (privacy.json ``algorithm_ldp``): every noisy release is a batch
        gradient; uploads and expansion rows are post-processing of them."""
        p = self.params
        if p.ldp_epsilon is None:
            return {"mechanism": "none (ldp_epsilon: null)", "epsilon": None}
        return {
            "mechanism": "per-batch Laplace on clipped gradients (wuch15/FedPerGNN run.py)",
            "noise_scale": "2*clip/(sqrt(batch)*ldp_epsilon) per coordinate of every batch gradient",
            "params": {"clip": p.clip, "ldp_epsilon": p.ldp_epsilon, "batch_size": p.batch_size},
            "releases_per_client": list(self.ldp_releases),
            "epsilon_per_client": list(self.ldp_epsilon),
            "epsilon": max(self.ldp_epsilon),
            "unit": "per coordinate, client level (a client's whole batch gradient may change: sensitivity "
                    "2*clip per coordinate, so one release costs sqrt(batch)*ldp_epsilon), pure epsilon-DP, "
                    "basic composition over every release of the run",
            "paper_epsilon_per_release": p.ldp_epsilon,
            "paper_unit": "per coordinate and release, per user, with the noise of B users averaged in a batch "
                          "(the code's 1/sqrt(BATCH_SIZE)); not composed over releases",
            "covers": ["model_update", "item_updates", "expansion_request.user_embeddings"],
            "not_covered": ["expansion_request.tokens/owner: the client's interactions under item pseudonyms, "
                            "seen by the third party (the paper's design)"]}

    def client_metrics(self, client) -> dict[str, dict[str, float]]:
        return graph_client_metrics(self.clients[client.cid], self.params.top_k)

    def state_dict(self) -> dict:
        return {"items": self.items, "gat": self.gat, "ldp": (self.ldp_releases, self.ldp_epsilon),
                "models": [c.model.state_dict() for c in self.clients],
                "graphs": [(c.model.edge_index, c.model.foreign) for c in self.clients],
                "optimizers": [c.optimizer.state_dict() for c in self.clients]}

    def load_state_dict(self, state: dict) -> None:
        self.items, self.gat = state["items"], state["gat"]
        self.ldp_releases, self.ldp_epsilon = map(list, state["ldp"])
        for c, m, (ei, fo), o in zip(self.clients, state["models"], state["graphs"], state["optimizers"]):
            c.model.load_state_dict(m)
            c.model.edge_index, c.model.foreign = ei, fo
            c.optimizer.load_state_dict(o)
