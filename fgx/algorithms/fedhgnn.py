"""FedHGNN (Yan et al., WWW 2024): federated heterogeneous GNN recommendation on a user-item graph that
clients *publish* under local differential privacy, with semantics preserved by perturbing within
shared item groups ("shared HINs").

1. Publishing (once, before training). For each of its users a client perturbs the user's training
   items in two steps and publishes the result under a random pseudonym:
   (a) exponential mechanism over the public item groups: with G_u the groups of the user's items,
       |G_u| groups are drawn without replacement with probability ∝ exp(ε1/|G_u| · q(g)/2), q(g) =
       max_{g'∈G_u} (cos(r_g, r_g') + 1)/2; kept groups keep the user's items, newly drawn groups get as
       many random items of theirs as a dropped group had;
   (b) randomised response with ε2 on the user's item bits inside the drawn groups, then each group's
       ones are thinned with q = d/(d(2p−1) + n(1−p)) so that its expected degree is kept (p = e^ε2 /
       (e^ε2 + 1), d the group degree, n the group size).
2. The server builds the meta-path graphs of the published graph, U-I-U for users and I-U-I for items
   (each node keeps its ``metapath_neighbors`` most co-occurring neighbours), holds the user (one row per
   pseudonym) and item embedding tables and the two HAN encoders (one per node type), and sends them.
3. Each round every client trains the HAN encoders and the embedding tables on BPR over its *true*
   training interactions (its users are its pseudonyms' rows, items its global item ids), scores
   being dot products of the user and item encoders' outputs; it sends the changes of the encoders and
   of every embedding row it changed, the server averages them (per row over the clients that changed
   it) and sends the new state back.

Checked against the authors' code (BUPT-GAMMA/FedHGNN: ``client.py: perturb_adj``, ``server.py``,
``model.py``, ``util.py``, ``local_differential_privacy_library.py``): the EM quality, the group
substitution keeping degrees, RR (``perturbation_test``) masked to the drawn groups, the degree-keeping
thinning q, one GAT per meta-path with semantic attention and a linear output (HAN; hidden 8, 2 heads,
out 64), server-held user and item tables updated with the averaged client contributions per row, BPR.

Adapted (fgx decisions): (i) the code's item groups are k-means clusters of public item attributes
(ACM: an item's conferences) and r_g their mean attribute vectors; interaction-only datasets have no
public item attributes, so fgx's groups are a seeded random partition of the items into
``shared_groups`` groups with one-hot r_g (q = 1 for the user's own groups, 1/2 otherwise); (ii) with
only users and items, the meta-paths are U-I-U and I-U-I; (iii) a client is an organisation: it
publishes all its users and trains ``local_epochs`` of mini-batch BPR with Adam per round, uploading the
changes (the code's client is one user computing one gradient that the server applies with SGD);
(iv) the code counts 5 random non-interacted items as positives of each user (``sample_item_augment``),
a privacy device fgx leaves out (``pseudo_positives`` is not implemented)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
import torch
from torch import nn

from fgx.algorithms.base import Algorithm
from fgx.config import spec
from fgx.federation.channel import Message
from fgx.federation.client import round_seed
from fgx.recsys.bipartite import client_interactions
from fgx.recsys.graph_clients import graph_client_metrics
from fgx.recsys.metrics import popularity_groups
from fgx.recsys.training import bpr_epochs, known_matrix
from fgx.registry import ALGORITHMS


@dataclass
class FedHGNNParams:
    lr: float = field(default=0.005, metadata=spec(gt=0.0))
    local_epochs: int = field(default=5, metadata=spec(min=1))
    batch_size: int = field(default=4096, metadata=spec(min=1))
    num_negatives: int = field(default=1, metadata=spec(min=1))
    bpr_tau: float = field(default=1.0, metadata=spec(gt=0.0, help="BPR temperature (1.0 = standard BPR)"))
    l2: float = field(default=1e-4, metadata=spec(min=0.0, help="L2 on the batch's embedding rows"))
    eps1: float = field(default=1.0, metadata=spec(gt=0.0, help="ε of the exponential mechanism over groups (code p1)"))
    eps2: float = field(default=2.0, metadata=spec(gt=0.0, help="ε of randomised response inside groups (code p2; README 2)"))
    shared_groups: int = field(default=20, metadata=spec(min=1, help="public item groups (code shared_num 20)"))
    metapath_neighbors: int = field(default=20, metadata=spec(min=1, help="neighbours kept per node in U-I-U / I-U-I"))
    hidden: int = field(default=8, metadata=spec(min=1, help="HAN hidden size per head (code 8)"))
    heads: int = field(default=2, metadata=spec(min=1, help="HAN attention heads (code 2)"))
    dropout: float = field(default=0.0, metadata=spec(min=0.0, max=1.0))
    top_k: int = field(default=20, metadata=spec(min=1))


# ---------------------------------------------------------------- publishing (client side, LDP)
def item_groups(num_items: int, groups: int, seed: int) -> np.ndarray:
    """The public shared groups: a seeded random partition of the items (no item attributes here)."""
    rng = np.random.default_rng([seed, 0x4E1])
    return rng.permutation(num_items) % min(groups, num_items)


def perturb_items(items: np.ndarray, group_of: np.ndarray, eps1: float, eps2: float,
                  rng: np.random.Generator) -> np.ndarray:
    """One user's published item set (global ids): EM over groups, then RR with degree-keeping
    thinning inside the drawn groups."""
    n_groups = int(group_of.max()) + 1
    members = [np.flatnonzero(group_of == g) for g in range(n_groups)]
    own: dict[int, list[int]] = {}
    for i in items.tolist():
        own.setdefault(int(group_of[i]), []).append(i)
    if not own:
        return np.zeros(0, dtype=np.int64)
    k = len(own)
    quality = np.where(np.isin(np.arange(n_groups), list(own)), 1.0, 0.5)   # one-hot group representations
    logits = eps1 / k * quality / 2
    prob = np.exp(logits - logits.max())
    prob /= prob.sum()
    drawn = rng.choice(n_groups, size=k, replace=False, p=prob)
    degrees = [len(v) for v in own.values()]
    chosen: dict[int, np.ndarray] = {}
    for g in drawn:                                   # groups the user really has keep its items
        if g in own:
            chosen[g] = np.array(own[g])
            degrees.remove(len(own[g]))
    for g in drawn:                                   # new groups: as many random items as a dropped group had
        if g not in own:
            d = degrees.pop(0)
            chosen[g] = rng.choice(members[g], size=min(d, len(members[g])), replace=False)
    p = np.exp(eps2) / (np.exp(eps2) + 1)
    out = []
    for g, sel in chosen.items():
        bits = np.isin(members[g], sel)
        keep = rng.random(len(bits)) < p
        rr = np.where(keep, bits, ~bits)
        d, n = len(sel), len(members[g])
        q = d / (d * (2 * p - 1) + n * (1 - p))
        rr &= rng.random(len(bits)) < q
        out.append(members[g][rr])
    return np.concatenate(out).astype(np.int64) if out else np.zeros(0, dtype=np.int64)


def publish(inter, group_of: np.ndarray, p: FedHGNNParams, seed: int, cid: int) -> dict:
    """A client's published interactions: per local user a random 62-bit pseudonym and its perturbed items."""
    rng = np.random.default_rng([seed, cid, 0xFE0])
    tr = inter.train.numpy()
    items_g = inter.items_global.numpy()
    pseud = rng.integers(0, 2 ** 62, size=inter.num_users, dtype=np.int64)
    us, its = [], []
    for u in range(inter.num_users):
        pub = perturb_items(items_g[tr[1][tr[0] == u]], group_of, p.eps1, p.eps2, rng)
        us.append(np.full(len(pub), pseud[u]))
        its.append(pub)
    return {"pseudonyms": torch.from_numpy(pseud), "user": torch.from_numpy(np.concatenate(us)),
            "item": torch.from_numpy(np.concatenate(its))}


# ---------------------------------------------------------------- server side
def metapath_edges(r: sp.csr_matrix, k: int) -> torch.Tensor:
    """Edges j -> i of the co-occurrence graph R Rᵀ, each node i keeping its k most co-occurring
    neighbours j ≠ i (ties by index)."""
    c = (r @ r.T).tocsr()
    c.setdiag(0)
    c.eliminate_zeros()
    src, dst = [], []
    for i in range(c.shape[0]):
        row = c.indices[c.indptr[i]:c.indptr[i + 1]]
        val = c.data[c.indptr[i]:c.indptr[i + 1]]
        top = row[np.lexsort((row, -val))[:k]]
        src.append(top)
        dst.append(np.full(len(top), i))
    return torch.from_numpy(np.stack([np.concatenate(src), np.concatenate(dst)]).astype(np.int64))


class SemanticAttention(nn.Module):
    def __init__(self, d: int, hidden: int = 128):
        super().__init__()
        self.project = nn.Sequential(nn.Linear(d, hidden), nn.Tanh(), nn.Linear(hidden, 1, bias=False))

    def forward(self, z: torch.Tensor) -> torch.Tensor:     # z: [N, paths, d]
        beta = torch.softmax(self.project(z).mean(0), dim=0)
        return (beta[None] * z).sum(1)


class HAN(nn.Module):
    """One GAT per meta-path, semantic attention, linear output (HAN as in the FedHGNN code)."""

    def __init__(self, paths: int, dim: int, hidden: int, heads: int, out: int, dropout: float):
        from torch_geometric.nn import GATConv
        super().__init__()
        self.gats = nn.ModuleList(GATConv(dim, hidden, heads=heads, dropout=dropout, add_self_loops=True)
                                  for _ in range(paths))
        self.semantic = SemanticAttention(hidden * heads)
        self.out = nn.Linear(hidden * heads, out)

    def forward(self, x: torch.Tensor, graphs: list[torch.Tensor]) -> torch.Tensor:
        z = torch.stack([nn.functional.elu(g(x, e)) for g, e in zip(self.gats, graphs)], 1)
        return self.out(self.semantic(z))


class HGNNModel(nn.Module):
    """What a client trains: copies of the global user/item tables and the two HAN encoders, viewed
    through its own users' rows and its own items (``embed`` returns those, for BPR and ranking)."""

    def __init__(self, users: torch.Tensor, items: torch.Tensor, p: FedHGNNParams):
        super().__init__()
        dim = users.size(1)
        self.user_table = nn.Parameter(users.clone())
        self.item_table = nn.Parameter(items.clone())
        self.user_han = HAN(1, dim, p.hidden, p.heads, dim, p.dropout)
        self.item_han = HAN(1, dim, p.hidden, p.heads, dim, p.dropout)
        self.uu = torch.zeros(2, 0, dtype=torch.long)
        self.ii = torch.zeros(2, 0, dtype=torch.long)
        self.rows = torch.zeros(0, dtype=torch.long)        # this client's users' rows
        self.cols = torch.zeros(0, dtype=torch.long)        # this client's items' global ids

    def user_emb(self, u: torch.Tensor) -> torch.Tensor:     # bpr_epochs' L2 on layer-0 rows
        return self.user_table[self.rows[u]]

    def item_emb(self, i: torch.Tensor) -> torch.Tensor:
        return self.item_table[self.cols[i]]

    def embed(self) -> tuple[torch.Tensor, torch.Tensor]:
        hu = self.user_han(self.user_table, [self.uu])
        hi = self.item_han(self.item_table, [self.ii])
        return hu[self.rows], hi[self.cols]

    def scores(self) -> torch.Tensor:
        u, v = self.embed()
        return u @ v.T


class HGNNClient:
    def __init__(self, cid, inter):
        self.cid, self.inter = cid, inter
        self.known = known_matrix(inter.train, inter.num_users, inter.num_items)
        self.item_group = popularity_groups(inter.train[1], inter.num_items)
        self.model: HGNNModel | None = None
        self.optimizer = None
        self.update: dict | None = None


def shared_han(model: HGNNModel) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items() if k.startswith(("user_han.", "item_han."))}


def install(cl: HGNNClient, state: dict) -> None:
    cl.model.load_state_dict(state["han"], strict=False)
    with torch.no_grad():
        cl.model.user_table.copy_(state["users"])
        cl.model.item_table.copy_(state["items"])


def hgnn_train(cl: HGNNClient, p: FedHGNNParams, seed: int) -> float:
    m = cl.model
    start = {"han": shared_han(m), "users": m.user_table.detach().clone(), "items": m.item_table.detach().clone()}
    cl.optimizer = torch.optim.Adam(m.parameters(), lr=p.lr)     # fresh per round: the state is the server's
    g = torch.Generator().manual_seed(seed + cl.cid)
    loss = bpr_epochs(m, cl.inter.train, cl.known, cl.optimizer, p.local_epochs, p.batch_size, p.num_negatives,
                      p.l2, g, bpr_tau=p.bpr_tau)
    du = m.user_table.detach() - start["users"]
    di = m.item_table.detach() - start["items"]
    ru, ri = du.abs().sum(1).nonzero().view(-1), di.abs().sum(1).nonzero().view(-1)
    cl.update = {"model": {k: v - start["han"][k] for k, v in shared_han(m).items()},
                 "user_rows": ru, "user_delta": du[ru], "items": ri, "item_delta": di[ri]}
    return loss


# what the one message that leaves a client before training carries
PUBLISHING = ("FedHGNN's publishing: each user's items after the ε1 exponential mechanism over groups and ε2 "
              "randomised response inside them (local DP), under a random pseudonym")


@ALGORITHMS.register("fedhgnn", params=FedHGNNParams, tasks=("ranking",))
class FedHGNN(Algorithm):
    requires_model = ("mf", "FedHGNN's embedding tables; model.dim and model.emb_init_std size them")
    messages = {
        "perturbed_interactions": Message("up", reason=PUBLISHING),
        "metapath_graphs": Message("down"),        # U-I-U / I-U-I of the published graph, the client's rows
        "global_model": Message("down"),           # HAN encoders, user and item tables
        "model_update": Message("up"),             # changes of the encoders and of the changed rows
    }

    def setup(self) -> None:
        ctx, p, mp = self.ctx, self.params, self.ctx.model_params
        ch = ctx.channel
        n_items = ctx.global_data.num_items
        group_of = item_groups(n_items, p.shared_groups, ctx.seed)
        self.clients = [HGNNClient(c.cid, client_interactions(c, ctx.global_data.num_users)) for c in ctx.clients]
        pubs = [ch.send("perturbed_interactions", publish(cl.inter, group_of, p, ctx.seed, cl.cid), src=cl.cid,
                        dst="server", round=0) for cl in self.clients]
        # server: one table row per pseudonym, in publication order
        row_of, offset = {}, 0
        for pub in pubs:
            for s in pub["pseudonyms"].tolist():
                row_of[s] = offset
                offset += 1
        users = np.concatenate([[row_of[s] for s in pub["user"].tolist()] for pub in pubs]).astype(np.int64)
        items = np.concatenate([pub["item"].numpy() for pub in pubs])
        r = sp.csr_matrix((np.ones(len(users)), (users, items)), shape=(offset, n_items))
        r.data[:] = 1.0
        uu, ii = metapath_edges(r, p.metapath_neighbors), metapath_edges(r.T.tocsr(), p.metapath_neighbors)
        self.published = {"pairs": len(users), "users": offset}
        ctx.record("fedhgnn_published", {"published_pairs": len(users),
                                         "train_pairs": sum(int(cl.inter.train.size(1)) for cl in self.clients),
                                         "uu_edges": uu.size(1), "ii_edges": ii.size(1)})
        g = torch.Generator().manual_seed(int(np.random.SeedSequence([ctx.seed, 0x46A]).generate_state(1)[0]))
        self.users = torch.randn(offset, mp.dim, generator=g) * mp.emb_init_std
        self.items = torch.randn(n_items, mp.dim, generator=g) * mp.emb_init_std
        torch.manual_seed(ctx.seed)
        template = HGNNModel(self.users, self.items, p)
        self.han = shared_han(template)
        for cl, pub in zip(self.clients, pubs):
            rows = torch.tensor([row_of[s] for s in pub["pseudonyms"].tolist()], dtype=torch.long)
            got = ch.send("metapath_graphs", {"uu": uu, "ii": ii, "rows": rows}, src="server", dst=cl.cid, round=0)
            cl.model = HGNNModel(self.users, self.items, p)
            cl.model.uu, cl.model.ii, cl.model.rows = got["uu"], got["ii"], got["rows"]
            cl.model.cols = cl.inter.items_global.clone()
        self.send_global(0)

    def send_global(self, r: int) -> None:
        for cl in self.clients:
            install(cl, self.ctx.channel.send("global_model", {"han": self.han, "users": self.users, "items": self.items},
                                              src="server", dst=cl.cid, round=r))

    def round(self, r: int) -> dict[str, float]:
        ch = self.ctx.channel
        losses = self.ctx.executor.map(hgnn_train, self.clients, self.params, round_seed(self.ctx.seed, r))
        han = {k: torch.zeros_like(v) for k, v in self.han.items()}
        tu, cu = torch.zeros_like(self.users), torch.zeros(self.users.size(0))
        ti, ci = torch.zeros_like(self.items), torch.zeros(self.items.size(0))
        for cl in self.clients:
            up = ch.send("model_update", cl.update, src=cl.cid, dst="server", round=r)
            for k in han:
                han[k] += up["model"][k]
            tu.index_add_(0, up["user_rows"], up["user_delta"])
            cu.index_add_(0, up["user_rows"], torch.ones(up["user_rows"].numel()))
            ti.index_add_(0, up["items"], up["item_delta"])
            ci.index_add_(0, up["items"], torch.ones(up["items"].numel()))
        self.han = {k: self.han[k] + han[k] / len(self.clients) for k in self.han}
        self.users[cu > 0] += tu[cu > 0] / cu[cu > 0, None]
        self.items[ci > 0] += ti[ci > 0] / ci[ci > 0, None]
        self.send_global(r)
        return {"loss": float(np.mean(losses))}

    def client_metrics(self, client) -> dict[str, dict[str, float]]:
        return graph_client_metrics(self.clients[client.cid], self.params.top_k)

    def state_dict(self) -> dict:
        return {"han": self.han, "users": self.users, "items": self.items}

    def load_state_dict(self, state: dict) -> None:
        self.han, self.users, self.items = state["han"], state["users"], state["items"]
        for cl in self.clients:            # what the clients held after the checkpointed round
            install(cl, state)
