"""The audited runs of tests/test_dp_audit.py and scripts/audit_table.py: one small offline config per
mechanism (CASES) and the deliberately broken variants (BREAKS: case, label, a function that patches
fgx through a pytest MonkeyPatch, or extra overrides)."""
from __future__ import annotations

import numpy as np

GOSSIP = ["privacy=mf_gdp", "privacy.mu=1.0", "dataset=diabetes", "partitioner=topology", "model=mlp_tabular",
          "model.hidden=32", "algorithm.k=2", "algorithm.b=2", "rounds=4", "eval_every=4",
          "privacy.audit.canaries=2000", "output.progress=off"]
CASES = {
    "dp_fedavg": ["algorithm=fedavg", "dataset=csbm", "dataset.num_nodes=200", "dataset.num_features=128",
                  "partitioner=random", "partitioner.num_clients=4", "rounds=3", "eval_every=3", "model.hidden=32",
                  "privacy=dp_fedavg", "algorithm.weighting=uniform", "privacy.noise_multiplier=2",
                  "privacy.audit.canaries=400", "output.progress=off"],
    "metric_dp": ["algorithm=ce_fedgnn", "dataset=csbm", "dataset.num_nodes=200", "dataset.num_features=16",
                  "partitioner=random", "partitioner.num_clients=3", "rounds=3", "eval_every=3", "model.hidden=16",
                  "algorithm.local_steps=2", "privacy=metric_dp", "privacy.public_messages=[update,grad_estimator]",
                  "privacy.k=5", "privacy.delta=1e-5", "privacy.audit.canaries=1000", "output.progress=off"],
    "mf_gdp_ldp": ["algorithm=dp_dsgd", "partitioner.graph=florentine", *GOSSIP],
    "mf_gdp_pndp": ["algorithm=antipgd", "partitioner.graph=star", "privacy.trust_model=pndp", "privacy.attackers=[0]",
                    *GOSSIP],
    "fedpergnn": ["algorithm=fedpergnn", "dataset=synthetic_bipartite", "dataset.num_users=90", "dataset.num_items=120",
                  "dataset.mean_degree=12", "partitioner=random_users", "partitioner.num_clients=3", "rounds=2",
                  "eval_every=2", "output.checkpoint=false", "model.dim=16", "algorithm.local_epochs=1",
                  # the code's step size: at ε 0.05 the default lr 5 puts noise of ~1 per weight per step
                  "algorithm.neighbors=0", "algorithm.ldp_epsilon=0.05", "algorithm.lr=0.01", "privacy.audit.canaries=2000",
                  "output.progress=off"],
}


def dp_fedavg_noise_off(mp):
    from fgx.privacy.dp_fedavg import DPFedAvg

    def no_noise(self, kind, payload, num_contributors, round):
        scale = num_contributors / (self.q * len(self.ctx.clients))
        return {k: v * scale if v.is_floating_point() else v for k, v in payload.items()}
    mp.setattr(DPFedAvg, "aggregate", no_noise)


def dp_fedavg_noise_halved(mp):
    """Noise of std noise_multiplier/2 * clip / (qN) while the accountant keeps noise_multiplier."""
    from fgx.privacy.dp_fedavg import DPFedAvg

    real = DPFedAvg.aggregate

    def halved(self, kind, payload, num_contributors, round):
        nm = self.params.noise_multiplier
        self.params.noise_multiplier = nm / 2
        try:
            return real(self, kind, payload, num_contributors, round)
        finally:
            self.params.noise_multiplier = nm
    mp.setattr(DPFedAvg, "aggregate", halved)


def dp_fedavg_clipping_doubled(mp):
    """Client updates clipped at twice the norm the accountant assumes."""
    import fgx.privacy.dp_fedavg as mod

    real = mod.clip_by_global_norm
    mp.setattr(mod, "clip_by_global_norm", lambda tensors, max_norm: real(tensors, 2 * max_norm))


def round_noise_reused(mp, cls, method: str):
    """Round 2 draws the same noise as round 1: the mechanism's generator is put back to where round 1 began
    (a generator re-seeded with the same seed every round)."""
    real = getattr(cls, method)

    def reusing(self, kind, payload, *args, round, **kw):
        marks = self.__dict__.setdefault("_reuse_marks", {})
        if round not in marks:
            marks[round] = self.gen.get_state()
        if round == 2:
            if not self.__dict__.get("_reused"):
                self.gen.set_state(marks[1])
                self._reused = True
        return real(self, kind, payload, *args, round=round, **kw)
    mp.setattr(cls, method, reusing)


def dp_fedavg_round_noise_reused(mp):
    from fgx.privacy.dp_fedavg import DPFedAvg

    round_noise_reused(mp, DPFedAvg, "aggregate")


def metric_dp_noise_halved(mp):
    from fgx.privacy.metric_dp import MetricDP

    real = MetricDP._noise
    mp.setattr(MetricDP, "_noise", lambda self, like, std: real(self, like, std / 2))


def metric_dp_norm_doubled(mp):
    """Embeddings normalised to norm 2 instead of 1 before the noise (the accountant assumes unit rows)."""
    from fgx.privacy.metric_dp import MetricDP

    real = MetricDP.release

    def doubled(self, kind, payload, src, round):
        if kind != self.params.embedding_kind:
            return real(self, kind, payload, src, round)
        vals = payload["values"].float()
        vals = 2 * vals / vals.norm(dim=-1, keepdim=True).clamp(min=1e-12)
        for gid, v in zip(payload["ids"].tolist(), vals):
            self.releases[gid] += 1
            self.last_released[gid] = v.detach().cpu()
        return {**payload, "values": vals + self._noise(vals, self.params.sigma0)}
    mp.setattr(MetricDP, "release", doubled)


def metric_dp_round_noise_reused(mp):
    from fgx.privacy.metric_dp import MetricDP

    round_noise_reused(mp, MetricDP, "release")


def dp_fedavg_clipping_off(mp):
    import fgx.privacy.dp_fedavg as mod

    mp.setattr(mod, "clip_by_global_norm", lambda tensors, max_norm: tensors)


def metric_dp_noise_off(mp):
    import torch

    from fgx.privacy.metric_dp import MetricDP

    mp.setattr(MetricDP, "_noise", lambda self, like, std: torch.zeros_like(like))


def gossip_noise_off(mp):
    import torch

    from fgx.privacy.mf.noise import GossipNoise

    mp.setattr(GossipNoise, "step", lambda self, t: torch.zeros(self.n, self.dim))


def gossip_noise_reused(mp):
    """One draw z reused at every step: AntiPGD's noise z_t - z_{t-1} then cancels after the first step,
    DP-D-SGD's stays the same vector."""
    import torch

    from fgx.privacy.mf.noise import GossipNoise

    def reused(self, t):
        while self.drawn <= t:
            self.z[self.drawn] = self.z[0] if self.drawn else torch.randn((self.n, self.dim), generator=self.gen) * self.std
            self.drawn += 1
    mp.setattr(GossipNoise, "_draw", reused)


def fedpergnn_noise_off(mp):
    from fgx.algorithms import fedpergnn

    real = np.random.default_rng

    class Quiet:                       # the client's random stream, with Laplace draws of zero
        def __init__(self, rng):
            self.rng = rng

        def laplace(self, loc, scale, size):
            return np.zeros(size)

        def __getattr__(self, name):
            return getattr(self.rng, name)

    mp.setattr(fedpergnn.np.random, "default_rng", lambda *a, **k: Quiet(real(*a, **k)))


def fedpergnn_clipping_off(mp):
    import torch

    mp.setattr(torch.nn.utils, "clip_grad_norm_", lambda params, max_norm, *a, **k: None)


# (case, label, patch or None, extra overrides)
BREAKS = [
    ("dp_fedavg", "noise off", dp_fedavg_noise_off, []),
    ("dp_fedavg", "clipping off", dp_fedavg_clipping_off, []),
    ("dp_fedavg", "noise halved", dp_fedavg_noise_halved, []),
    ("dp_fedavg", "clipping at twice the norm", dp_fedavg_clipping_doubled, []),
    ("dp_fedavg", "one round's noise reused", dp_fedavg_round_noise_reused, []),
    ("metric_dp", "noise off", metric_dp_noise_off, []),
    ("metric_dp", "noise halved", metric_dp_noise_halved, []),
    ("metric_dp", "normalised to twice the norm", metric_dp_norm_doubled, []),
    ("metric_dp", "one round's noise reused", metric_dp_round_noise_reused, []),
    # embedding_norm=clip with a bound far above 1 leaves the canaries (norm 10) unnormalised, while the
    # accountant's ε assumes unit embeddings
    ("metric_dp", "normalisation off", None, ["privacy.embedding_norm=clip", "privacy.clip_embedding=100"]),
    ("mf_gdp_ldp", "noise off", gossip_noise_off, []),
    ("mf_gdp_pndp", "noise off", gossip_noise_off, []),
    ("mf_gdp_ldp", "one noise draw reused", gossip_noise_reused, []),
    ("mf_gdp_pndp", "one noise draw reused", gossip_noise_reused, []),
    ("fedpergnn", "noise off", fedpergnn_noise_off, []),
    ("fedpergnn", "clipping off", fedpergnn_clipping_off, []),
]
