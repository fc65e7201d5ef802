"""FedProto (Tan et al., AAAI 2022): clients exchange class prototypes instead of weights. Each client
keeps its own model (nothing of it leaves the client, so clients may run different models as long as
their representations have one width: ``client_layers`` gives them different depths). A client trains on cross-entropy plus λ·MSE(z, P[y]) between
each training item's representation z and the global prototype of its class, then sends its local
prototypes: the mean representation of its training items of each class (eval mode, after training).
The server's global prototype of a class is the unweighted mean of the local prototypes of the clients
that have the class. A client predicts the class whose global prototype is nearest (squared distance)
to the item's representation (``inference: prototypes``) or with its own classifier.

Checked against TsingZ0/PFLlib clientproto.py (the MSE term, nearest-prototype evaluation), TsingZ0/FedTGP
clienttgp.py and servertgp.py (prototypes collected in eval mode after training; classes without a global
prototype contribute no term; ``proto_cluster``: the unweighted mean over the clients that uploaded a class)
and OpenFGL flcore/fedproto (the representation under the classifier of a GNN; its server weights by
training size and averages zero rows for clients without the class, which fgx does not follow).

Privacy: a prototype is a per-class mean of embeddings of the client's raw features, selected by its
labels, and the presence mask says which classes a client holds. Both travel as ``prototypes``
(release=True); no mechanism's budget covers them (dp_fedavg covers model updates only), so a run
with a privacy budget is refused unless the config declares them public (privacy.public_messages),
and privacy.json then says that the ε does not cover them."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch
from torch import nn

from fgx.algorithms.base import (SPLITS, Algorithm, LocalTrainParams, client_models_state, eval_items,
                                 load_client_models, make_client_state, mean_loss, round_seed, steps_per_round)
from fgx.algorithms.representation import check_setting, class_prototypes, objective_steps, split_forward
from fgx.config import spec
from fgx.federation.channel import Message
from fgx.registry import ALGORITHMS
from fgx.tasks import targets


@dataclass
class FedProtoParams(LocalTrainParams):
    lamda: float = field(default=1.0, metadata=spec(min=0.0, help="weight λ of the prototype (MSE) term"))
    inference: str = field(default="prototypes", metadata=spec(
        choices=["prototypes", "classifier"],
        help="prototypes: the class of the nearest global prototype (the authors' evaluation); classifier: the "
             "client's own classifier"))
    client_layers: list[int] | None = field(default=None, metadata=spec(
        min=1, help="heterogeneous models: client i runs model.layers = client_layers[i % len] (PFLlib's "
                    "models[id % len]); the representation width (model.hidden) is shared; null: one model"))


def prototype_term(state, rep, logits, batch, y):
    """λ · MSE between each item's representation and its class's global prototype (items of classes
    without one: their own detached representation, i.e. no term, as in FedTGP's code)."""
    P, present = state.extra["global_protos"]
    z = rep[batch]
    have = present[y] > 0
    target = torch.where(have.unsqueeze(1), P[y], z.detach())
    return state.extra["lamda"] * nn.functional.mse_loss(z, target)


def local_prototypes(state, num_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The client's per-class mean representation of its training items (eval mode) and which classes it has."""
    state.model.eval()
    with torch.no_grad():
        rep, _ = split_forward(state.model, state.view)
    mask, y = targets(state.view, state.task, "train")
    return class_prototypes(rep[mask], y, num_classes)


def proto_client_update(state, global_protos, p: FedProtoParams, seed: int, num_classes: int):
    """Local training (with the prototype term once global prototypes exist), then local prototypes."""
    state.extra["global_protos"], state.extra["lamda"] = global_protos, p.lamda
    g = torch.Generator().manual_seed(seed + state.cid)
    term = prototype_term if global_protos is not None else None
    ce, reg = objective_steps(state, steps_per_round(state, p), p.batch_size, g, term)
    del state.extra["global_protos"]
    protos, present = local_prototypes(state, num_classes)
    return {"protos": protos, "present": present}, ce, reg


@ALGORITHMS.register("fedproto", params=FedProtoParams, tasks=("node", "graph"))
class FedProto(Algorithm):
    messages = {"prototypes": Message("up", release=True),        # per-class mean embeddings + presence mask
                "global_prototypes": Message("down")}
    has_local_models = True

    @classmethod
    def check_config(cls, params, validated) -> None:
        super().check_config(params, validated)
        check_setting(params, validated, validated.names["algorithm"])

    def setup(self) -> None:
        self.views = self.make_views(include_cross=False)
        self.states = [make_client_state(self.ctx, c, self.views[c.cid], self.client_model(c.cid))
                       for c in self.ctx.clients]
        self.global_protos: tuple[torch.Tensor, torch.Tensor] | None = None

    def client_model(self, cid: int) -> torch.nn.Module:
        """Client ``cid``'s own model: the run's model, with its own depth under ``client_layers``."""
        layers = self.params.client_layers
        if not layers:
            return self.ctx.build_model()
        torch.manual_seed(self.ctx.seed)
        p = dataclasses.replace(self.ctx.model_params, layers=layers[cid % len(layers)])
        return self.ctx.model_builder(p, self.ctx.in_dim, self.ctx.out_dim, self.ctx.info).to(self.ctx.device)

    def aggregate(self, uploads: list[dict], r: int) -> tuple[tuple[torch.Tensor, torch.Tensor], dict]:
        """FedProto's server: each class's global prototype is the mean of the clients' prototypes of it."""
        protos = torch.stack([u["protos"] for u in uploads])        # [M, C, d]
        present = torch.stack([u["present"] for u in uploads])      # [M, C]
        count = present.sum(0)
        P = (protos * present.unsqueeze(2)).sum(0) / count.clamp(min=1).unsqueeze(1)
        return (P, (count > 0).to(P.dtype)), {}

    def round(self, r: int) -> dict[str, float]:
        ch, C = self.ctx.channel, self.ctx.out_dim
        dsts = [s.cid for s in self.states]
        gp = ch.broadcast("global_prototypes", self.global_protos, dsts, r) if self.global_protos is not None else None
        results = self.ctx.executor.map(proto_client_update, self.states, gp, self.params,
                                        round_seed(self.ctx.seed, r), C)
        uploads = [ch.send("prototypes", u, src=s.cid, dst="server", round=r) for s, (u, _, _) in zip(self.states, results)]
        self.global_protos, stats = self.aggregate(uploads, r)
        loss = mean_loss(ce for _, ce, _ in results)
        stats["loss"] = loss
        if gp is not None and loss == loss:
            # the prototype term against the cross-entropy, mean over clients (0 with λ = 0: local training)
            stats["regulariser_share"] = mean_loss(reg for _, _, reg in results) / max(abs(loss), 1e-30)
        return stats

    def model_for(self, client):
        return self.states[client.cid].model

    local_model_for = model_for

    def predict(self, client, local: bool = False, splits=SPLITS, subset: int | None = None,
                batch_size: int | None = None) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        if self.params.inference == "classifier" or self.global_protos is None:
            return super().predict(client, local, splits, subset, batch_size)
        model, view = self.model_for(client), self.view_for(client)
        model.eval()
        with torch.no_grad():
            rep, _ = split_forward(model, view)
            P, present = self.global_protos
            # scores: minus the squared distance to each global prototype; classes without one never win
            scores = -torch.cdist(rep, P).pow(2)
            scores = scores.masked_fill(present.unsqueeze(0) == 0, torch.finfo(scores.dtype).min)
        items = eval_items(view, self.ctx.info.task, splits, subset, self.ctx.seed, client.cid)
        return {split: (scores[ids].cpu(), y.cpu()) for split, (ids, y) in items.items()}

    def state_dict(self) -> dict:
        return {**client_models_state(self.states), "global_protos": self.global_protos}

    def load_state_dict(self, state: dict) -> None:
        load_client_models(self.states, state)
        self.global_protos = state["global_protos"]
