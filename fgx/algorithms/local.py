"""Local training only (the papers' "SC" / "Local"): each client trains alone, nothing is sent. The
round is the base's phases with nothing sent down or up: every client's ``local_update`` from its own
model under no objective."""
from __future__ import annotations

from fgx.algorithms.base import Algorithm, client_models_state, load_client_models
from fgx.federation.client import LocalTrainParams, Objective, make_client_state
from fgx.registry import ALGORITHMS


@ALGORITHMS.register("local", params=LocalTrainParams, tasks=("node", "edge", "graph", "link"))
class Local(Algorithm):
    messages = {}
    has_local_models = True
    objective = Objective          # plain local steps

    def setup(self) -> None:
        self.views = self.make_views(include_cross=False)
        self.states = [make_client_state(self.ctx, c, self.views[c.cid], self.ctx.build_model())
                       for c in self.ctx.clients]

    def model_for(self, client):
        return self.states[client.cid].model

    local_model_for = model_for   # no server model: the client's own is both

    def state_dict(self) -> dict:
        return client_models_state(self.states)

    def load_state_dict(self, state: dict) -> None:
        load_client_models(self.states, state)
