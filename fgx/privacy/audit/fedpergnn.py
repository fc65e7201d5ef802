"""Audit of FedPerGNN's per-batch local DP (fgx/algorithms/fedpergnn.py).

The claim is per coordinate and client level: each noisy batch gradient a client releases is
(2·clip/scale)-DP for every coordinate, composed over the client's releases. The canaries are
Dirac gradient coordinates of client 0: m one-coordinate tensors whose gradient is +scale·clip
(included half) or -scale·clip, released with every batch gradient of that client through the
client's own ``BatchLDP`` (each canary clipped as its own group, a plain SGD step, the Laplace noise
for the batch's size on the weights after it, the client's random stream). The attacker sees the
noisy batch gradients (the LDP releases) and scores a canary by the sum of its noisy values over the
releases. The claim is client 0's composed ε."""
from __future__ import annotations

import torch

from fgx.privacy.audit.canaries import Canaries


class Audit(Canaries):
    attack = ("canary gradient coordinates of client 0 (+-scale*clip) released through its BatchLDP with every "
              "batch gradient; score = sum of the noisy releases")
    victim = 0
    score_name = "sum of noisy releases"

    def __init__(self, mech, algo, ctx, p):
        super().__init__(p, ctx.seed)
        self.algo = algo
        sign = torch.tensor(self.included, dtype=torch.float32).mul(2).sub(1)
        self.grads = sign * p.scale * algo.params.clip
        self.module = torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(1)) for _ in range(self.m)])
        algo.clients[self.victim].audit = self

    def wrap(self, ldp):
        """The client's per-batch hook, followed by the canaries' release through the same mechanism: each
        canary its own clipping group (the claim is per coordinate), a plain SGD step from zero, the
        Laplace noise on the weights after it; the release is the noisy gradient −Δw/lr."""
        from fgx.algorithms.fedpergnn import local_optimizer

        def hook(batch_len: int) -> None:
            ldp(batch_len)
            with torch.no_grad():
                for prm, g in zip(self.module, self.grads):
                    prm.zero_()
                    prm.grad = g.reshape(1).clone()
            canary = type(ldp)([[prm] for prm in self.module], ldp.p, ldp.rng)
            canary(batch_len)
            opt = local_optimizer(self.module.parameters(), ldp.p)
            opt.step()
            canary.after_step(opt)
            lr = opt.param_groups[0]["lr"]
            self.scores += torch.cat([-prm.detach() / lr for prm in self.module]).double().numpy()
        return hook

    def claim(self) -> dict:
        return {"epsilon": self.algo.ldp_epsilon[self.victim], "delta": 0.0,
                "releases": self.algo.ldp_releases[self.victim],
                "what": "FedPerGNN's per-coordinate, client-level pure ε of client 0, composed over its releases"}
