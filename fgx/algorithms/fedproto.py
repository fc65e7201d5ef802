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

from fgx.algorithms.base import Algorithm, client_models_state, load_client_models, mean_loss
from fgx.algorithms.representation import RepresentationObjective, check_setting, class_prototypes, split_forward
from fgx.config import spec
from fgx.federation.channel import Message
from fgx.federation.client import LocalTrainParams, make_client_state
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


def local_prototypes(state, num_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The client's per-class mean representation of its training items (eval mode) [C, d] and which
    classes it has [C]."""
    state.model.eval()
    with torch.no_grad():
        rep, _ = split_forward(state.model, state.view)
    mask, y = targets(state.view, state.task, "train")
    return class_prototypes(rep[mask], y, num_classes)


@dataclass
class PrototypeTerm(RepresentationObjective):
    """λ · MSE between each item's representation and its class's global prototype (items of classes
    without one: their own detached representation, i.e. no term, as in FedTGP's code; no term at all
    before the first global prototypes). ``finish``: the client's local prototypes, which go up."""
    global_protos: tuple[torch.Tensor, torch.Tensor] | None     # ([C, d] prototypes, [C] presence)
    lamda: float
    num_classes: int

    def term(self, state, step):
        if self.global_protos is None:
            return None
        P, present = self.global_protos
        z = step.rep[step.items]
        have = present[step.y] > 0
        target = torch.where(have.unsqueeze(1), P[step.y], z.detach())
        return self.lamda * nn.functional.mse_loss(z, target)

    def finish(self, state, delta):
        protos, present = local_prototypes(state, self.num_classes)
        return {"protos": protos, "present": present}


@ALGORITHMS.register("fedproto", params=FedProtoParams, tasks=("node", "graph"))
class FedProto(Algorithm):
    """The base round's phases: every client trains its own model (nothing sent down but the global
    prototypes, ``client_objective``), uploads its local prototypes (``aggregate``) and the server
    averages them per class (``server_update``)."""
    messages = {"prototypes": Message("up", release=True),        # per-class mean embeddings + presence mask
                "global_prototypes": Message("down")}
    has_local_models = True
    objective = PrototypeTerm

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

    def client_objective(self, chosen, weights, r):
        gp = None if self.global_protos is None else \
            self.ctx.channel.broadcast("global_prototypes", self.global_protos, [s.cid for s in chosen], r)
        return PrototypeTerm(gp, self.params.lamda, self.ctx.out_dim)

    def aggregate(self, chosen, updates, r):
        """The clients' prototypes up the channel; the loss is the cross-entropy, and the diagnostic the
        prototype term against it (mean over clients; 0 with λ = 0: local training)."""
        uploads = [self.ctx.channel.send("prototypes", u.sent, src=s.cid, dst="server", round=r)
                   for s, u in zip(chosen, updates)]
        loss = mean_loss(u.loss.ce for u in updates)
        stats = {"loss": loss}
        if self.global_protos is not None and loss == loss:
            stats["regulariser_share"] = mean_loss(u.loss.term for u in updates) / max(abs(loss), 1e-30)
        return uploads, stats

    def server_update(self, uploads: list[dict], r: int) -> dict[str, float]:
        """FedProto's server: each class's global prototype is the mean of the clients' prototypes of it."""
        protos = torch.stack([u["protos"] for u in uploads])        # [M, C, d]
        present = torch.stack([u["present"] for u in uploads])      # [M, C]
        count = present.sum(0)
        P = (protos * present.unsqueeze(2)).sum(0) / count.clamp(min=1).unsqueeze(1)
        self.global_protos = (P, (count > 0).to(P.dtype))
        return {}

    def model_for(self, client):
        return self.states[client.cid].model

    local_model_for = model_for

    def score(self, client, model):
        """The authors' evaluation: minus the squared distance of each item's representation to every
        global prototype (classes without one never win); the classifier's logits with
        ``inference: classifier`` or before the first prototypes."""
        if self.params.inference == "classifier" or self.global_protos is None:
            return super().score(client, model)
        rep, _ = split_forward(model, self.view_for(client))
        P, present = self.global_protos
        scores = -torch.cdist(rep, P).pow(2)
        return scores.masked_fill(present.unsqueeze(0) == 0, torch.finfo(scores.dtype).min)

    def state_dict(self) -> dict:
        return {**client_models_state(self.states), "global_protos": self.global_protos}

    def load_state_dict(self, state: dict) -> None:
        load_client_models(self.states, state)
        self.global_protos = state["global_protos"]
