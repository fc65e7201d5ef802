"""AdaFGL (Li et al., ICDE 2024, "AdaFGL: A New Paradigm for Federated Node Classification with
Topology Heterogeneity"): a decoupled two-step method.

Step 1 (rounds 1..``extractor_rounds``): FedAvg of the ``model`` (the 2-layer GCN by default).
Step 2 (the remaining rounds): the server sends the last aggregated model once, the *federated
knowledge extractor*; from then on nothing is communicated and every client trains a personalised
model on its own subgraph, ``personal_steps`` full-batch epochs per round:
- P = softmax(extractor(subgraph)): the extractor's soft labels;
- homophily confidence score (HCS): label propagation (``lp_steps``, α ``lp_alpha``) from a random half
  of the client's training labels, scored by its accuracy on the other half;
- knowledge-guided topology: A_k links nodes whose soft labels have cosine similarity > ``knowledge_threshold``;
  features are smoothed over α·A + (1 - α)·A_k (α = ``alpha``, normalised with self-loops):
  S = [X | ÂX | ... | Â^K X] (K = ``prop_steps``);
- homophilous branch: an MLP on S, trained with cross-entropy plus MSE towards P; it predicts
  (softmax(MLP(S)) + P) / 2;
- heterophilous branch: MLPs on X and on S, and a learnable propagation: an MLP on S gives logits E,
  a node-similarity matrix R = β A_k + (1 - β) cos-sim(softmax E) is centred and rescaled into positive
  and negative parts, and (softmax(PReLU(R) E) - softmax(PReLU(-R) E) + E) / 2 is the third head; it
  predicts the mean of the three heads' softmax, each trained with cross-entropy;
- ``fusion: hcs`` (default, the paper's adaptive fusion; OpenFGL): both branches trained, the
  prediction is HCS · homophilous + (1 - HCS) · heterophilous; ``fusion: threshold`` (the authors'
  code): only the homophilous branch if HCS >= ``hcs_threshold`` (0.9), else only the heterophilous one.
Step 1 sends what FedAvg sends; step 2 sends the extractor once (``knowledge_extractor``) and nothing
else: labels, soft labels and the personalised models stay on the clients.

Checked against the authors' code (github.com/xkLi-Allen/AdaFGL: ``main.py``, ``models/my_model.py``,
``models/label_propagation_models.py``, ``config.py``) and OpenFGL's port (``flcore/adafgl``): the
branch architectures (2-layer homophilous MLP, 3-layer heterophilous MLPs, hidden 64, dropout 0.5,
PReLU, Xavier init), the similarity threshold 0.999, α = 0.05, β = 0.2, 3 propagation steps, LP with
10 steps, α 0.5 and half of the training nodes held out, the losses, Adam lr 1e-2 / weight decay 5e-4,
the authors' 200 personalised epochs (here 50 step-2 rounds × 4 at rounds=100) and OpenFGL's split of
the rounds (half extractor, half personalisation). fgx decisions: nodes outside the LP seeds start
from the uniform distribution (the code leaves nodes outside train/val/test at their true labels);
the homophilous prediction averages with P itself (the code applies a second softmax to P); predictions
are returned as log-probabilities so that every metric ranks like the probabilities."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from fgx.algorithms.base import check_client_size, flat_params, mean_loss
from fgx.algorithms.fedavg import FedAvg, FedAvgParams
from fgx.algorithms.fedgta import label_propagation
from fgx.config import ConfigError, spec
from fgx.federation.channel import Message
from fgx.federation.client import ClientState, round_seed
from fgx.models.gamlp import normalized_adjacency, propagate
from fgx.registry import ALGORITHMS


@dataclass
class AdaFGLParams(FedAvgParams):
    extractor_rounds: int | None = field(default=None, metadata=spec(
        min=0, help="step-1 (FedAvg) rounds; null: half the run's rounds, rounded down (0: the extractor "
                    "is the untrained initial model)"))
    personal_steps: int = field(default=4, metadata=spec(min=1, help="step-2 full-batch epochs per round"))
    prop_steps: int = field(default=3, metadata=spec(min=1, help="K: smoothed features [X, ÂX, ..., Â^K X]"))
    alpha: float = field(default=0.05, metadata=spec(
        min=0.0, max=1.0, help="weight of the subgraph's own edges against the knowledge edges"))
    beta: float = field(default=0.2, metadata=spec(
        min=0.0, max=1.0, help="weight of the knowledge edges in the learnable propagation"))
    knowledge_threshold: float = field(default=0.999, metadata=spec(
        min=-1.0, max=1.0, help="soft-label cosine similarity above which two nodes get a knowledge edge"))
    lp_steps: int = field(default=10, metadata=spec(min=1, help="label-propagation steps of the HCS"))
    lp_alpha: float = field(default=0.5, metadata=spec(min=0.0, max=1.0))
    fusion: str = field(default="hcs", metadata=spec(
        choices=["hcs", "threshold"], help="hcs: HCS-weighted mix of both branches (paper); threshold: one "
                                           "branch, chosen by HCS >= hcs_threshold (authors' code)"))
    hcs_threshold: float = field(default=0.9, metadata=spec(min=0.0, max=1.0))
    hidden: int = field(default=64, metadata=spec(min=1, help="hidden units of the personalised MLPs"))
    dropout: float = field(default=0.5, metadata=spec(min=0.0, max=1.0))
    max_client_nodes: int = field(default=10_000, metadata=spec(
        min=1, help="refuse larger clients: step 2 builds dense n x n node-similarity matrices"))


# ---- step 2: the personalised model ---------------------------------------------------------------

def mlp(sizes: list[int]) -> nn.ModuleList:
    layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))
    gain = nn.init.calculate_gain("relu")
    for lin in layers:
        nn.init.xavier_uniform_(lin.weight, gain=gain)
        nn.init.zeros_(lin.bias)
    return layers


def run_mlp(layers: nn.ModuleList, x: torch.Tensor, act: nn.Module, dropout: float, training: bool) -> torch.Tensor:
    for lin in layers[:-1]:
        x = nn.functional.dropout(act(lin(x)), dropout, training)
    return layers[-1](x)


def similarity_matrix(logits_or_probs: torch.Tensor, probs: bool = False) -> torch.Tensor:
    """Cosine similarity of the softmax rows, zero diagonal (the authors' ``getre_scale``)."""
    s = logits_or_probs if probs else torch.softmax(logits_or_probs, 1)
    s = nn.functional.normalize(s, dim=1, eps=1e-9)
    re = s @ s.t()
    return re - torch.diag(torch.diag(re))


def signed_rescale(re: torch.Tensor) -> torch.Tensor:
    """The authors' centring of a similarity matrix: above the mean scaled by (max - mean) into (0, 1],
    below it mapped to -(re / mean) in [-1, 0); then the identity is added."""
    mean, top = re.mean(), re.max()
    centred = re - mean
    pos = centred / (top - mean).clamp(min=1e-12)
    neg = -(centred + mean) / mean.clamp(min=1e-12)
    return torch.where(centred > 0, pos, neg) + torch.eye(re.size(0), device=re.device)


class PersonalModel(nn.Module):
    """Step-2 model of one client: the homophilous and/or heterophilous branch."""

    def __init__(self, in_dim: int, num_classes: int, p: AdaFGLParams, homo: bool, hete: bool):
        super().__init__()
        smooth_dim = (p.prop_steps + 1) * in_dim
        self.p, self.homo, self.hete = p, homo, hete
        if homo:
            self.homo_smooth = mlp([smooth_dim, p.hidden, num_classes])
            self.homo_act = nn.PReLU()
        if hete:
            self.hete_local = mlp([in_dim, p.hidden, p.hidden, num_classes])
            self.hete_smooth = mlp([smooth_dim, p.hidden, p.hidden, num_classes])
            self.hete_prop = mlp([smooth_dim, p.hidden, p.hidden, num_classes])
            self.hete_act = nn.PReLU()
            self.prop_act = nn.PReLU()
            self.sign_act = nn.PReLU()

    def forward(self, x: torch.Tensor, smoothed: torch.Tensor, knowledge: torch.Tensor) -> dict[str, torch.Tensor]:
        p, out = self.p, {}
        if self.homo:
            out["homo_smooth"] = run_mlp(self.homo_smooth, smoothed, self.homo_act, p.dropout, self.training)
        if self.hete:
            out["hete_local"] = run_mlp(self.hete_local, x, self.hete_act, p.dropout, self.training)
            out["hete_smooth"] = run_mlp(self.hete_smooth, smoothed, self.hete_act, p.dropout, self.training)
            emb = run_mlp(self.hete_prop, smoothed, self.prop_act, p.dropout, self.training)
            re = signed_rescale(p.beta * knowledge + (1 - p.beta) * similarity_matrix(emb))
            pos = torch.softmax(self.sign_act(re) @ emb, 1)
            neg = torch.softmax(self.sign_act(-re) @ emb, 1)
            out["hete_prop"] = (pos - neg + emb) / 2
        return out


def homophily_confidence(view, adj: torch.Tensor, num_classes: int, p: AdaFGLParams, g: torch.Generator) -> float:
    """HCS: accuracy, on a random half of the training nodes, of label propagation from the other half."""
    train = view.train_mask.nonzero().view(-1).cpu()
    if train.numel() < 2:
        return 0.5
    train = train[torch.randperm(train.numel(), generator=g)]
    seeds, held = train[: train.numel() // 2].to(view.x.device), train[train.numel() // 2:].to(view.x.device)
    seed_mask = torch.zeros(view.num_nodes, dtype=torch.bool, device=view.x.device)
    seed_mask[seeds] = True
    onehot = nn.functional.one_hot(view.y.clamp(min=0), num_classes).float()
    y0 = torch.where(seed_mask[:, None], onehot, torch.full_like(onehot, 1.0 / num_classes))
    out = label_propagation(adj, y0, seed_mask, p.lp_steps, p.lp_alpha)
    return float((out[held].argmax(1) == view.y[held]).float().mean())


@dataclass
class Personal:
    """A client's step-2 state: the extractor's soft labels P [n, C], its HCS, the knowledge graph [n, n],
    the smoothed features, and the personalised model with its optimiser."""
    soft: torch.Tensor
    hcs: float
    knowledge: torch.Tensor
    smoothed: torch.Tensor
    model: nn.Module
    optimizer: torch.optim.Optimizer


@dataclass
class AdaFGLClient(ClientState):
    num_classes: int = 0
    personal: Personal | None = None       # step 2 (None before it starts)


def adafgl_init_client(state, extractor: dict, p: AdaFGLParams, round_seed: int):
    """Step 2 starts: soft labels of the extractor, HCS, knowledge-guided smoothing, a fresh
    personalised model. Returns what the run records about the client."""
    view, c = state.view, state.num_classes
    state.model.load_state_dict(extractor)
    state.model.eval()
    with torch.no_grad():
        soft = torch.softmax(state.model(view), 1)
    g = torch.Generator().manual_seed(round_seed + state.cid)
    adj = normalized_adjacency(view.edge_index.cpu(), view.num_nodes, 0.5).to(view.x.device)
    hcs = homophily_confidence(view, adj, c, p, g)
    knowledge = (similarity_matrix(soft, probs=True) > p.knowledge_threshold).float()
    own = view.edge_index.cpu()
    kn = knowledge.nonzero().t().cpu()
    mixed = normalized_adjacency(torch.cat([own, kn], 1), view.num_nodes, 0.5, weight=torch.cat(
        [torch.full((own.size(1),), p.alpha), torch.full((kn.size(1),), 1.0 - p.alpha)])).to(view.x.device)
    smoothed = torch.cat(propagate(mixed, view.x.float(), p.prop_steps), 1)
    if p.fusion == "hcs":
        homo = hete = True
    else:
        homo = hcs >= p.hcs_threshold
        hete = not homo
    torch.manual_seed(round_seed + state.cid)
    model = PersonalModel(view.x.size(1), c, p, homo, hete).to(view.x.device)
    state.personal = Personal(soft, hcs, knowledge, smoothed, model,
                              torch.optim.Adam(model.parameters(), lr=p.lr, weight_decay=p.weight_decay))
    return {"hcs": hcs, "knowledge_edges": int(kn.size(1)), "branches": "both" if homo and hete else
            ("homophilous" if homo else "heterophilous")}


def personal_loss(out: dict[str, torch.Tensor], soft: torch.Tensor, train: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Homophilous: CE + MSE(logits, P); heterophilous: the three heads' CE; summed over the branches."""
    ce = nn.functional.cross_entropy
    loss = 0.0
    if "homo_smooth" in out:
        loss = loss + ce(out["homo_smooth"][train], y) + nn.functional.mse_loss(out["homo_smooth"], soft)
    for head in ("hete_local", "hete_smooth", "hete_prop"):
        if head in out:
            loss = loss + ce(out[head][train], y)
    return loss


def fused_prediction(out: dict[str, torch.Tensor], soft: torch.Tensor, hcs: float) -> torch.Tensor:
    """Probabilities: (softmax(homo) + P)/2 and/or the mean of the heterophilous heads' softmax,
    mixed as HCS · homophilous + (1 - HCS) · heterophilous when both exist."""
    homo = hete = None
    if "homo_smooth" in out:
        homo = (torch.softmax(out["homo_smooth"], 1) + soft) / 2
    if "hete_local" in out:
        hete = sum(torch.softmax(out[h], 1) for h in ("hete_local", "hete_smooth", "hete_prop")) / 3
    if homo is None:
        return hete
    if hete is None:
        return homo
    return hcs * homo + (1 - hcs) * hete


def adafgl_personal_round(state, p: AdaFGLParams, round_seed: int) -> float:
    a = state.personal
    view, model, opt = state.view, a.model, a.optimizer
    train = view.train_mask
    y = view.y[train]
    if y.numel() == 0:                               # no labels to learn from: the model stays as it is
        return float("nan")
    torch.manual_seed(round_seed + state.cid)       # dropout
    model.train()
    total = 0.0
    for _ in range(p.personal_steps):
        opt.zero_grad()
        loss = personal_loss(model(view.x.float(), a.smoothed, a.knowledge), a.soft, train, y)
        loss.backward()
        opt.step()
        total += float(loss.detach())
    return total / p.personal_steps


@ALGORITHMS.register("adafgl", params=AdaFGLParams, tasks=("node",))
class AdaFGL(FedAvg):
    """FedAvg's round in step 1; step 2 changes the round itself (personalised training, nothing sent)."""
    client_state = AdaFGLClient
    objective = None               # step 2's personalised training is client work of its own
    messages = {"global_weights": Message("down"), "update": Message("up", release=True),
                "knowledge_extractor": Message("down")}

    @classmethod
    def check_config(cls, params, validated) -> None:
        rounds = validated.top.rounds
        if params.extractor_rounds is not None and params.extractor_rounds >= rounds:
            raise ConfigError("algorithm.extractor_rounds", params.extractor_rounds,
                              f"< rounds ({rounds}): step 2 (personalised training) needs at least one round")
        if params.batch_size is not None:
            raise ConfigError("algorithm.batch_size", params.batch_size, "null: AdaFGL's step 2 is full batch")
        if params.extractor_rounds is None:
            params.extractor_rounds = rounds // 2

    def setup(self) -> None:
        check_client_size(self.ctx, self.params.max_client_nodes,
                          "AdaFGL's step 2 builds dense n x n node similarity matrices on each client")
        super().setup()
        for s in self.states:
            s.num_classes = self.ctx.out_dim
        self.extractor_rounds = self.params.extractor_rounds      # null resolved in check_config
        self.ctx.log.info("adafgl: step 1 (FedAvg, knowledge extractor) in rounds 1..%d, step 2 (personalised, "
                          "no communication) in rounds %d..%d", self.extractor_rounds, self.extractor_rounds + 1,
                          self.ctx.rounds)
        self.personalised = False

    def round(self, r: int) -> dict[str, float]:
        if r <= self.extractor_rounds:
            return super().round(r)
        if not self.personalised:
            self.start_personalisation(r)
        return {"loss": mean_loss(self.ctx.executor.map(adafgl_personal_round, self.states, self.params,
                                                        round_seed(self.ctx.seed, r)))}

    def start_personalisation(self, r: int) -> None:
        extractor = self.ctx.channel.broadcast("knowledge_extractor", flat_params(self.global_model),
                                               [s.cid for s in self.states], r)
        info = self.ctx.executor.map(adafgl_init_client, self.states, extractor, self.params,
                                     round_seed(self.ctx.seed, r))
        self.ctx.record("adafgl_clients", {"clients": info})
        self.personalised, self.switched_at = True, r

    def score(self, client, model):
        """Step 1: FedAvg's model; step 2: the personalised model (global and local are the same thing then)."""
        if not self.personalised:
            return super().score(client, model)
        s = self.states[client.cid]
        a = s.personal
        a.model.eval()
        probs = fused_prediction(a.model(s.view.x.float(), a.smoothed, a.knowledge), a.soft, a.hcs)
        return torch.log(probs.clamp(min=1e-12))

    def state_dict(self) -> dict:
        out = super().state_dict()
        if self.personalised:
            out["personal"] = {"switched_at": self.switched_at, "extractor": flat_params(self.global_model),
                               "models": [s.personal.model.state_dict() for s in self.states],
                               "optimizers": [s.personal.optimizer.state_dict() for s in self.states]}
        return out

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        personal = state.get("personal")
        if personal is None:
            return
        self.ctx.executor.map(adafgl_init_client, self.states, personal["extractor"], self.params,
                              round_seed(self.ctx.seed, personal["switched_at"]))
        for s, m, o in zip(self.states, personal["models"], personal["optimizers"]):
            s.personal.model.load_state_dict(m)
            s.personal.optimizer.load_state_dict(o)
        self.personalised, self.switched_at = True, personal["switched_at"]
