"""Local training only (the papers' "SC" / "Local"): each client trains alone, nothing is sent."""
from __future__ import annotations

import torch

from fgx.algorithms.base import (Algorithm, LocalTrainParams, client_models_state, load_client_models,
                                 make_client_state, mean_loss, round_seed, steps_per_round, train_steps)
from fgx.registry import ALGORITHMS


def local_round(state, p: LocalTrainParams, round_seed: int) -> float:
    g = torch.Generator().manual_seed(round_seed + state.cid)
    return train_steps(state, steps_per_round(state, p), p.batch_size, g, fanouts=p.fanouts)


@ALGORITHMS.register("local", params=LocalTrainParams, tasks=("node", "edge", "graph", "link"))
class Local(Algorithm):
    messages = {}
    has_local_models = True

    def setup(self) -> None:
        self.views = self.make_views(include_cross=False)
        self.states = [make_client_state(self.ctx, c, self.views[c.cid], self.ctx.build_model())
                       for c in self.ctx.clients]

    def round(self, r: int) -> dict[str, float]:
        p = self.params
        return {"loss": mean_loss(self.ctx.executor.map(local_round, self.states, p, round_seed(self.ctx.seed, r)))}

    def model_for(self, client):
        return self.states[client.cid].model

    local_model_for = model_for   # no server model: the client's own is both

    def state_dict(self) -> dict:
        return client_models_state(self.states)

    def load_state_dict(self, state: dict) -> None:
        load_client_models(self.states, state)
