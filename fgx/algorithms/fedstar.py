"""FedStar (Tan et al., AAAI 2023, "Federated learning on non-IID graphs via structural knowledge
sharing"; yuetan031/FedStar): clients share structural knowledge only. Each node gets a structural
encoding computed from its own graph, the random-walk landing probabilities of 1..n_rw steps (the
diagonal of (D^-1 A)^k, PyG's ``AddRandomWalkPE``) beside its degree one-hot encoded up to n_dg; the
model (``model=gin_dc``) runs a structure channel on it and a feature channel on the node features.
The server averages the structure channel (``embedding_s``, ``convs_s``: the authors' keys holding
``_s``) weighted by training graphs; the feature channel, the joining layer and the head never leave
a client. A client scores with its own feature channel and the averaged structure channel."""
from __future__ import annotations

import torch

from fgx.algorithms.fedavg import FedAvg, FedAvgParams
from fgx.federation.channel import Message
from fgx.registry import ALGORITHMS


def structural_encoding(view, n_rw: int, n_dg: int) -> torch.Tensor:
    """[nodes, n_rw + n_dg]: per graph of the view, random-walk landing probabilities (PyG's
    AddRandomWalkPE on that graph alone) and the one-hot degree, clipped to 1..n_dg as the authors'."""
    from torch_geometric.data import Data
    from torch_geometric.transforms import AddRandomWalkPE
    from torch_geometric.utils import degree

    rw = AddRandomWalkPE(walk_length=n_rw, attr_name="pe")
    counts = torch.bincount(view.graph, minlength=int(view.graph_y.numel()))
    ptr = torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)])
    edge_graph = view.graph[view.edge_index[0]]
    order = torch.argsort(edge_graph, stable=True)
    ei = view.edge_index[:, order]
    eptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(edge_graph, minlength=counts.numel()).cumsum(0)])
    out = []
    for g in range(counts.numel()):
        lo, hi = int(ptr[g]), int(ptr[g + 1])
        sub = ei[:, int(eptr[g]):int(eptr[g + 1])] - lo
        out.append(rw(Data(edge_index=sub, num_nodes=hi - lo)).pe)
    deg = degree(view.edge_index[0], num_nodes=view.num_nodes, dtype=torch.long).clamp(1, n_dg) - 1
    return torch.cat([torch.cat(out), torch.nn.functional.one_hot(deg, n_dg).float()], 1)


@ALGORITHMS.register("fedstar", params=FedAvgParams, tasks=("graph",))
class FedStar(FedAvg):
    requires_model = ("gin_dc", "FedStar's two-channel model")
    messages = {"global_weights": Message("down"), "update": Message("up", release=True)}

    def setup(self) -> None:
        super().setup()
        mp = self.ctx.model_params
        for v in self.views.values():      # each client encodes its own graphs' structure
            v.stc_enc = structural_encoding(v.cpu(), mp.n_rw, mp.n_dg).to(v.x.device)
        prefixes = tuple(self.global_model.structure_prefixes())
        self.shared = [k for k in self.global_model.state_dict() if k.startswith(prefixes)]

    def shared_weights(self) -> dict[str, torch.Tensor]:
        sd = self.global_model.state_dict()
        return {k: sd[k].detach().clone() for k in self.shared}

    def state_dict(self) -> dict:
        # the feature channel and the head never leave a client: its own model is its state, whatever is scored
        return {**super().state_dict(), "client_models": [s.model.state_dict() for s in self.states]}

    def model_for(self, client):
        own = self.states[client.cid].model
        own.load_state_dict(self.shared_weights(), strict=False)   # what the next round's download sets
        return own
