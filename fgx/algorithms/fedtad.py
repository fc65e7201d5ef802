"""FedTAD (Zhu et al., IJCAI 2024, "FedTAD: Topology-aware Data-free Knowledge Distillation for
Subgraph Federated Learning").

Clients run FedAvg (``local_steps`` full-batch epochs from the global model, send the update). Once,
before training, each client sends its class-wise knowledge reliability (CKR): for every training
node v a topology-aware score s_v = (1 + Σ_{u∈N(v)} cos(h_v, h_u)) / (|N(v)| + 1) with
h = [x | random-walk landing probabilities of steps 1..``walk_length``], summed per class (C numbers;
like a class histogram of the training labels, weighted by how much each node agrees with its
neighbourhood). The server normalises each class over the clients (Σ_j CKR[j, c] = 1).

After averaging the updates each round the server distils: for ``glb_epochs`` epochs, a conditional
generator (noise ``noise_dim`` + class embedding -> 64 -> 128 -> 256 -> feature dimension, tanh)
makes ``num_gen`` class-balanced pseudo-nodes, linked into a pseudo-graph by their ``topk`` most
cosine-similar pseudo-nodes. The generator takes ``it_g`` steps on
lam1 · Σ_j Σ_c CKR[j, c] · CE(f_j(G)_c, c)   (each local model f_j should recognise class c)
- Σ_j Σ_c CKR[j, c] · |f_glob(G)_c - f_j(G)_c|   (pseudo-graphs where global and local models disagree)
+ lam2 · Σ_j diversity(z, G.x)                  (distinct noise -> distinct nodes),
then the global model takes ``it_d`` steps on the class-wise distillation loss
Σ_j Σ_c CKR[j, c] · mean over class-c pseudo-nodes of |f_glob(G) - f_j(G)| (logit L1, local models
fixed): a client's knowledge of class c counts as much as its reliability for c. The local models
f_j are the global model plus each client's received update; the generator and pseudo-graphs never
leave the server.

Checked against the authors' code (github.com/zyl24/FedTAD ``train_fedtad.py``, ``model.py``,
``util/task_util.py``) and OpenFGL's port (``flcore/fedtad``): generator sizes, losses, the top-k
pseudo-graph, CKR normalised over clients per class (the authors'; OpenFGL normalises over classes),
the persistent server optimisers (Adam, lr 1e-3, weight decay 5e-4) and the defaults (3 local epochs,
5 distillation epochs of 1 generator + 5 global steps, 100 pseudo-nodes, top-5, noise 32,
lam1 = lam2 = 1, walk length 5). fgx decision: the topology part of h is the random-walk landing
probability of each node to itself (PyG's AddRandomWalkPE), since the authors' ``cal_topo_emb``
concatenates the ids of sampled walk nodes to the features (its transition matrix is element-wise
``A * pinv(D)``, i.e. diagonal, so the walks jump anywhere); the diversity term is summed over clients
as in that code (it is the same for every client)."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from fgx.algorithms.base import apply_delta, copy_model, flat_params
from fgx.algorithms.fedavg import FedAvg, FedAvgParams
from fgx.config import ConfigError, spec
from fgx.federation.channel import Message
from fgx.federation.client import round_seed
from fgx.models.base import NodeGNN
from fgx.registry import ALGORITHMS


@dataclass
class FedTADParams(FedAvgParams):
    glb_epochs: int = field(default=5, metadata=spec(min=0, help="server distillation epochs per round (0: FedAvg)"))
    it_g: int = field(default=1, metadata=spec(min=0, help="generator steps per distillation epoch"))
    it_d: int = field(default=5, metadata=spec(min=0, help="global-model steps per distillation epoch"))
    lr_g: float = field(default=1e-3, metadata=spec(gt=0.0))
    lr_d: float = field(default=1e-3, metadata=spec(gt=0.0))
    server_weight_decay: float = field(default=5e-4, metadata=spec(min=0.0, help="of both server optimisers"))
    num_gen: int = field(default=100, metadata=spec(min=1, help="pseudo-nodes per pseudo-graph (>= classes)"))
    noise_dim: int = field(default=32, metadata=spec(min=1))
    topk: int = field(default=5, metadata=spec(min=1, help="pseudo-graph: each node's most similar pseudo-nodes"))
    lam1: float = field(default=1.0, metadata=spec(min=0.0, help="weight of the generator's class (semantic) loss"))
    lam2: float = field(default=1.0, metadata=spec(min=0.0, help="weight of the generator's diversity loss"))
    walk_length: int = field(default=5, metadata=spec(min=1, help="random-walk steps of the topology embedding"))


# ---- client: class-wise knowledge reliability ----------------------------------------------------

def class_reliability(view, num_classes: int, walk_length: int) -> torch.Tensor:
    """CKR of one client: Σ over training nodes of class c of (1 + Σ_u cos(h_v, h_u)) / (deg(v) + 1)."""
    from torch_geometric.data import Data
    from torch_geometric.transforms import AddRandomWalkPE

    ei = view.edge_index[:, view.edge_index[0] != view.edge_index[1]]
    g = Data(edge_index=ei.cpu(), num_nodes=view.num_nodes)
    rw = AddRandomWalkPE(walk_length, attr_name="rw")(g).rw.to(view.x.device)
    h = torch.cat([view.x.float(), rw], 1)
    cos = nn.functional.cosine_similarity(h[ei[0]], h[ei[1]], dim=1)
    total = torch.zeros(view.num_nodes, device=h.device).index_add_(0, ei[0], cos)
    deg = torch.zeros(view.num_nodes, device=h.device).index_add_(0, ei[0], torch.ones_like(cos))
    score = (1 + total) / (deg + 1)
    train = view.train_mask
    return torch.zeros(num_classes, device=h.device).index_add_(0, view.y[train], score[train])


def normalise_over_clients(ckr: torch.Tensor) -> torch.Tensor:
    """[M, C] -> each class column sums to 1 over the clients (a class nobody has: all zero)."""
    total = ckr.sum(0, keepdim=True)
    return torch.where(total > 0, ckr / total.clamp(min=1e-12), torch.zeros_like(ckr))


# ---- server: generator, pseudo-graph, losses -----------------------------------------------------

class ConditionalGenerator(nn.Module):
    def __init__(self, noise_dim: int, num_classes: int, feat_dim: int):
        super().__init__()
        self.class_embedding = nn.Embedding(num_classes, num_classes)
        sizes = [noise_dim + num_classes, 64, 128, 256]
        self.hidden = nn.Sequential(*[m for a, b in zip(sizes[:-1], sizes[1:]) for m in (nn.Linear(a, b), nn.Tanh())])
        self.out = nn.Linear(256, feat_dim)

    def forward(self, z: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return self.out(self.hidden(torch.cat([self.class_embedding(c), z], 1)))


def balanced_classes(num_gen: int, num_classes: int) -> torch.Tensor:
    """num_gen // C pseudo-nodes per class, the remainder in the last class (the authors')."""
    counts = [num_gen // num_classes] * num_classes
    counts[-1] += num_gen - sum(counts)
    return torch.repeat_interleave(torch.arange(num_classes), torch.tensor(counts))


def pseudo_graph(x: torch.Tensor, k: int):
    """Each pseudo-node linked to its k most cosine-similar pseudo-nodes (itself included), symmetrised,
    with self-loops; the adjacency is not differentiated (only the features carry gradients)."""
    from torch_geometric.data import Data

    with torch.no_grad():
        z = nn.functional.normalize(x, dim=1)
        top = (z @ z.t()).topk(min(k, x.size(0)), dim=1).indices
        a = torch.zeros(x.size(0), x.size(0), dtype=torch.bool, device=x.device)
        a.scatter_(1, top, True)
        a = a | a.t()
        a.fill_diagonal_(True)
    return Data(x=x, edge_index=a.nonzero().t(), num_nodes=x.size(0))


def class_mean(values: torch.Tensor, classes: torch.Tensor, num_classes: int) -> torch.Tensor:
    """[C]: mean of ``values`` [n] over the pseudo-nodes of each class."""
    s = torch.zeros(num_classes, device=values.device).index_add_(0, classes, values)
    n = torch.zeros(num_classes, device=values.device).index_add_(0, classes, torch.ones_like(values))
    return s / n.clamp(min=1)


def class_kd_loss(global_logits: torch.Tensor, local_logits: list[torch.Tensor], ckr: torch.Tensor,
                  classes: torch.Tensor) -> torch.Tensor:
    """Σ_j Σ_c CKR[j, c] · mean_{v of class c} mean_o |g_vo - l^j_vo| (local logits fixed)."""
    c = ckr.size(1)
    return sum((ckr[j] * class_mean((global_logits - l.detach()).abs().mean(1), classes, c)).sum()
               for j, l in enumerate(local_logits))


def class_semantic_loss(local_logits: list[torch.Tensor], ckr: torch.Tensor, classes: torch.Tensor) -> torch.Tensor:
    """Σ_j Σ_c CKR[j, c] · CE of local model j on the class-c pseudo-nodes (mean over them)."""
    c = ckr.size(1)
    return sum((ckr[j] * class_mean(nn.functional.cross_entropy(l, classes, reduction="none"), classes, c)).sum()
               for j, l in enumerate(local_logits))


def diversity_loss(noise: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """exp(-mean over pairs of (mean squared noise difference) · (mean absolute feature difference))."""
    noise_d = torch.cdist(noise, noise).pow(2) / noise.size(1)
    feat_d = torch.cdist(x, x, p=1) / x.size(1)
    return torch.exp(-(noise_d * feat_d).mean())


@ALGORITHMS.register("fedtad", params=FedTADParams, tasks=("node",))
class FedTAD(FedAvg):
    needs_individual_updates = "FedTAD's server distils from each client's received update"
    messages = {"class_reliability": Message("up"), "global_weights": Message("down"),
                "update": Message("up", release=True)}

    def setup(self) -> None:
        super().setup()
        p, ctx = self.params, self.ctx
        if not isinstance(self.global_model, NodeGNN):
            raise ConfigError("model.name", ctx.config.names["model"],
                              "a message-passing model over (x, edge_index) such as gcn, sage or gin: FedTAD's "
                              "server runs every model on generated pseudo-graphs")
        c = ctx.out_dim
        if p.num_gen < c:
            raise ConfigError("algorithm.num_gen", p.num_gen, f">= the number of classes ({c})")
        ckr = torch.stack([ctx.channel.send("class_reliability", class_reliability(s.view, c, p.walk_length).cpu(),
                                            src=s.cid, dst="server", round=0) for s in self.states])
        self.ckr = ckr
        with torch.random.fork_rng(devices=[]):     # the clients' random stream stays FedAvg's
            torch.manual_seed(ctx.seed)
            self.generator = ConditionalGenerator(p.noise_dim, c, ctx.in_dim).to(ctx.device)
        self.opt_g = torch.optim.Adam(self.generator.parameters(), lr=p.lr_g, weight_decay=p.server_weight_decay)
        self.opt_d = torch.optim.Adam(self.global_model.parameters(), lr=p.lr_d, weight_decay=p.server_weight_decay)
        self.local_models: list[nn.Module] = []

    def server_update(self, mean, r: int) -> dict[str, float]:
        """FedAvg's step, then the server's data-free distillation into the global model."""
        start = flat_params(self.global_model)        # the weights the round started from
        stats = super().server_update(mean, r)
        chosen, deltas = self.received
        if self.params.glb_epochs > 0 and self.params.it_d > 0 and chosen:
            with torch.random.fork_rng(devices=[]):     # the clients' random stream stays FedAvg's
                stats.update(self.distill(r, [s.cid for s in chosen], start, deltas))
        return stats

    def _local_models(self, start: dict, deltas: list[dict]) -> list[nn.Module]:
        """The clients' models as the server knows them: the round's global weights plus each update."""
        while len(self.local_models) < len(deltas):
            m = copy_model(self.global_model)
            for q in m.parameters():
                q.requires_grad_(False)
            self.local_models.append(m)
        for m, d in zip(self.local_models, deltas):
            m.load_state_dict(apply_delta(start, d))
            m.eval()
        return self.local_models[:len(deltas)]

    def distill(self, r: int, cids: list[int], start: dict, deltas: list[dict]) -> dict[str, float]:
        """The server's data-free distillation into the global model (after FedAvg's average)."""
        p, dev = self.params, self.ctx.device
        locals_ = self._local_models(start, deltas)
        ckr = normalise_over_clients(self.ckr)[cids].to(dev)
        classes = balanced_classes(p.num_gen, self.ctx.out_dim).to(dev)
        g = torch.Generator().manual_seed(round_seed(self.ctx.seed, r) + 7)
        torch.manual_seed(round_seed(self.ctx.seed, r) + 11)        # the global model's dropout
        kd_first, kd_last, gen_loss = [], [], float("nan")
        for _ in range(p.glb_epochs):
            z = torch.randn(p.num_gen, p.noise_dim, generator=g).to(dev)
            self.generator.train()
            self.global_model.eval()
            for _ in range(p.it_g):
                self.opt_g.zero_grad()
                x = self.generator(z, classes)
                graph = pseudo_graph(x, p.topk)
                local_logits = [m(graph) for m in locals_]
                loss_g = (p.lam1 * class_semantic_loss(local_logits, ckr, classes)
                          - class_kd_loss(self.global_model(graph), local_logits, ckr, classes)
                          + p.lam2 * len(locals_) * diversity_loss(z, x))
                loss_g.backward()
                self.opt_g.step()
                gen_loss = float(loss_g.detach())
            self.generator.eval()
            with torch.no_grad():
                graph = pseudo_graph(self.generator(z, classes), p.topk)
                local_logits = [m(graph) for m in locals_]
            kd_first.append(self._kd_eval(graph, local_logits, ckr, classes))
            self.global_model.train()
            for _ in range(p.it_d):
                self.opt_d.zero_grad()
                loss_d = class_kd_loss(self.global_model(graph), local_logits, ckr, classes)
                loss_d.backward()
                self.opt_d.step()
            kd_last.append(self._kd_eval(graph, local_logits, ckr, classes))
        # mean over the epochs of the KD loss on each epoch's pseudo-graph before and after the global steps
        before, after = sum(kd_first) / len(kd_first), sum(kd_last) / len(kd_last)
        self.ctx.record("fedtad_distill", {"kd_loss_before": before, "kd_loss_after": after,
                                           "generator_loss": gen_loss})
        return {"kd_loss": after}

    def _kd_eval(self, graph, local_logits, ckr, classes) -> float:
        """The class-wise KD loss of the global model in eval mode (no dropout)."""
        self.global_model.eval()
        with torch.no_grad():
            return float(class_kd_loss(self.global_model(graph), local_logits, ckr, classes))

    def state_dict(self) -> dict:
        return {**super().state_dict(), "ckr": self.ckr, "generator": self.generator.state_dict(),
                "opt_g": self.opt_g.state_dict(), "opt_d": self.opt_d.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.ckr = state["ckr"]
        self.generator.load_state_dict(state["generator"])
        self.opt_g.load_state_dict(state["opt_g"])
        self.opt_d.load_state_dict(state["opt_d"])
