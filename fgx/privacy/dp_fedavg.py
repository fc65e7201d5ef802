"""privacy=dp_fedavg: client-level DP (McMahan et al., 2018). Each client's model update is clipped
to L2 norm ``clip`` before it leaves the client. Clients join a round by Poisson sampling with rate
q = ``algorithm.client_fraction`` (``algorithm.client_sampling=poisson``; q = 1: every client); the
server forms the fixed-denominator average sum / (qN) (McMahan et al.'s estimator, sensitivity
clip / (qN)) and adds Gaussian noise of std ``noise_multiplier * clip / (qN)``. One accountant for the
whole run (fgx/privacy/accountant.py, Opacus's RDPAccountant shape) takes a step per round with that
round's noise multiplier and sampling rate: a Poisson-subsampled Gaussian, which is exactly this
mechanism, composed by dp-accounting's RDP accountant."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fgx.config import ConfigError, spec
from fgx.privacy.accountant import RDPAccountant
from fgx.privacy.base import NoiseMeter, PrivacyMechanism, PrivacyParams
from fgx.privacy.clipping import clip_by_global_norm
from fgx.registry import PRIVACY


@dataclass
class DPFedAvgParams(PrivacyParams):
    noise_multiplier: float = field(default=1.0, metadata=spec(min=0.0))
    clip: float = field(default=1.0, metadata=spec(gt=0.0, help="L2 bound of each client's update"))
    delta: float = field(default=1e-5, metadata=spec(gt=0.0, max=0.5))
    update_kind: str = "update"


@PRIVACY.register("dp_fedavg", params=DPFedAvgParams)
class DPFedAvg(PrivacyMechanism):
    name = "dp_fedavg"

    @classmethod
    def covers(cls, params) -> set[str]:
        return {params.update_kind}      # the ε is the clipped, noised model updates' and nothing else's

    @classmethod
    def check_config(cls, params, validated) -> None:
        algo = validated.names["algorithm"]
        m = validated.entries["algorithm"].obj.messages.get(params.update_kind)
        if m is None or not m.release:
            raise ConfigError("privacy.name", "dp_fedavg", f"a mechanism for an algorithm that uploads model "
                              f"updates (message '{params.update_kind}'); '{algo}' does not")
        # other kinds the algorithm releases: the coverage rule (fgx/privacy/base.py) refuses or marks them public
        ap = validated.params["algorithm"]
        q = float(getattr(ap, "client_fraction", 1.0))
        if q < 1.0 and getattr(ap, "client_sampling", "fixed") != "poisson":
            raise ConfigError("algorithm.client_sampling", getattr(ap, "client_sampling", None),
                              "poisson with privacy=dp_fedavg and client_fraction < 1 (the accountant composes "
                              "Poisson-subsampled Gaussians: each client must join a round independently with "
                              "probability client_fraction, not as part of a fixed-size draw)")
        if getattr(ap, "weighting", "uniform") != "uniform":
            raise ConfigError("algorithm.weighting", ap.weighting,
                              "uniform (dp_fedavg's noise calibration assumes equally weighted client updates)")

    def __init__(self, params):
        super().__init__(params)
        self.gen = torch.Generator()
        self.accountant = RDPAccountant()              # one for the run: a step per round
        self.eps = 0.0
        self.meter = NoiseMeter()

    def bind(self, ctx) -> None:
        super().bind(ctx)
        self.gen.manual_seed(ctx.seed * 7 + 54321)
        self.q = float(getattr(ctx.params, "client_fraction", 1.0))     # the params of any algorithm with updates

    def release(self, kind, payload, src, round):
        if kind == self.params.update_kind:
            return clip_by_global_norm(payload, self.params.clip)
        return payload

    def aggregate(self, kind, payload, num_contributors, round):
        """``payload`` is the uniform mean of the m sampled clients' clipped updates."""
        if kind != self.params.update_kind:
            return payload
        denom = self.q * len(self.ctx.clients)          # expected number of clients per round
        scale = num_contributors / denom                # mean over m -> sum / (qN)
        std = self.params.noise_multiplier * self.params.clip / denom
        out = {}
        for k, v in payload.items():
            if not v.is_floating_point():
                out[k] = v
                continue
            noise = torch.randn(v.shape, generator=self.gen, dtype=v.dtype).to(v.device) * std
            self.meter.add(v * scale, noise)
            out[k] = v * scale + noise
        return out

    def epsilon(self, rounds: int) -> float:
        """ε of ``rounds`` rounds at this run's noise and sampling rate (what the accountant holds after them)."""
        acc = RDPAccountant()
        for _ in range(rounds):
            acc.step(noise_multiplier=self.params.noise_multiplier, sample_rate=self.q)
        return acc.get_epsilon(self.params.delta)

    def on_round_end(self, round: int) -> dict:
        # one step per round; a run resumed from a checkpoint written before the accountant was kept
        # catches up on the rounds it ran (every one at the run's rate)
        while len(self.accountant) < round:
            self.accountant.step(noise_multiplier=self.params.noise_multiplier, sample_rate=self.q)
        self.eps = self.accountant.get_epsilon(self.params.delta)
        self.last_round = round
        return {"epsilon": self.eps, **self.meter.take()}

    def report(self) -> dict:
        return {"mechanism": "dp_fedavg", "params": {"noise_multiplier": self.params.noise_multiplier,
                                                     "clip": self.params.clip, "delta": self.params.delta,
                                                     "sampling_rate": self.q},
                "accountant": "fgx.privacy.accountant.RDPAccountant (a Poisson-subsampled Gaussian step per round; "
                              "dp_accounting's RDP)",
                "estimator": "fixed denominator: sum of clipped updates / (client_fraction * clients)",
                "rounds": getattr(self, "last_round", 0), "epsilon": self.eps, "delta": self.params.delta}

    def headline(self) -> dict:
        return {"mechanism": "dp_fedavg", "epsilon": self.eps, "delta": self.params.delta,
                "noise_multiplier": self.params.noise_multiplier}

    def state_dict(self) -> dict:
        return {"gen": self.gen.get_state(), "eps": self.eps, "accountant": self.accountant.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.gen.set_state(state["gen"])
        self.eps = state["eps"]
        if "accountant" in state:
            self.accountant.load_state_dict(state["accountant"])
