"""privacy=metric_dp (CE-FedGNN §3): Gaussian noise σ0 on every released embedding (sampled once per
release, at the sender), σ1/σ2 on the averaged model update and gradient estimator, embedding
normalisation or clipping, model-norm clipping; per-node release counts R' and, at the end, the
k-NN distance percentiles ρ_q of the released (normalised) embeddings with ε(ρ_q) from the RDP
accountant (fgx/privacy/metric_dp_accounting.py)."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import torch

from fgx.config import ConfigError, spec
from fgx.privacy.base import NoiseMeter, PrivacyMechanism, PrivacyParams
from fgx.privacy.clipping import clip_by_global_norm
from fgx.registry import PRIVACY


@dataclass
class MetricDPParams(PrivacyParams):
    sigma0: float = field(default=1.0, metadata=spec(gt=0.0, help="std of the noise on released embeddings"))
    sigma1: float = field(default=1e-3, metadata=spec(min=0.0, help="std of the noise on the averaged model"))
    sigma2: float = field(default=1e-3, metadata=spec(min=0.0, help="std of the noise on the averaged G"))
    embedding_norm: str = field(default="normalize", metadata=spec(choices=["normalize", "clip"]))
    clip_embedding: float = field(default=5.0, metadata=spec(gt=0.0))
    clip_model: float | None = field(default=15.0, metadata=spec(gt=0.0))
    clip_grad_estimator: float | None = field(default=None, metadata=spec(gt=0.0))
    delta: float = field(default=1e-4, metadata=spec(gt=0.0, max=0.5))
    k: int = field(default=50, metadata=spec(min=1))
    percentiles: list[int] = field(default_factory=lambda: [50, 90, 95, 99, 100], metadata=spec(min=0, max=100))
    headline_percentile: int = field(default=90, metadata=spec(min=0, max=100))
    table_sigmas: list[float] = field(default_factory=lambda: [0.3, 0.5, 0.7, 1.0, 2.0, 3.0, 5.0],
                                      metadata=spec(gt=0.0))
    orders: str = field(default="opacus_default", metadata=spec(choices=["opacus_default", "dp_accounting_default"]))
    steps: str = field(default="max_releases", metadata=spec(choices=["max_releases", "fixed"]))
    fixed_steps: int | None = field(default=None, metadata=spec(min=1))
    embedding_kind: str = "embeddings"
    rho_population: str = field(default="all_nodes", metadata=spec(
        choices=["all_nodes", "boundary_only"],
        help="whose embeddings ρ_q is measured over: every node's released layer under the final global model "
             "(the paper, spec §3.4) or the boundary nodes' last actual releases"))
    rho_queries: int | None = field(default=None, metadata=spec(
        min=2, help="measure the k-NN distance for this many nodes drawn at random (to all nodes); null: every node"))

    def validate(self, prefix: str) -> None:
        if self.steps == "fixed" and self.fixed_steps is None:
            raise ConfigError(f"{prefix}.fixed_steps", None, "an integer >= 1 when steps=fixed")
        if self.headline_percentile not in self.percentiles:
            raise ConfigError(f"{prefix}.headline_percentile", self.headline_percentile,
                              f"one of percentiles {self.percentiles}")


@PRIVACY.register("metric_dp", params=MetricDPParams)
class MetricDP(PrivacyMechanism):
    name = "metric_dp"

    @classmethod
    def covers(cls, params) -> set[str]:
        # σ1/σ2 noise on the averaged model update and G is applied but not accounted (paper §3.1):
        # those kinds need privacy.public_messages, which is how the CE-FedGNN presets run
        return {params.embedding_kind}

    @classmethod
    def check_config(cls, params, validated) -> None:
        msgs = validated.entries["algorithm"].obj.messages
        m = msgs.get(params.embedding_kind)
        if m is None or not m.release:
            raise ConfigError("privacy.name", "metric_dp",
                              f"a privacy mechanism for algorithm '{validated.names['algorithm']}', which releases "
                              f"no embeddings (metric_dp protects released embeddings: use it with ce_fedgnn)")

    def __init__(self, params):
        super().__init__(params)
        self.releases: Counter = Counter()
        self.last_released: dict[int, torch.Tensor] = {}
        self.final_embeddings: torch.Tensor | None = None
        self.gen = torch.Generator()
        self.meter = NoiseMeter()

    def bind(self, ctx) -> None:
        super().bind(ctx)
        self.gen.manual_seed(ctx.seed * 7 + 12345)

    def _noise(self, like: torch.Tensor, std: float) -> torch.Tensor:
        return torch.randn(like.shape, generator=self.gen, dtype=like.dtype).to(like.device) * std

    def release(self, kind, payload, src, round):
        p = self.params
        if kind == p.embedding_kind:
            vals = payload["values"].float()
            norms = vals.norm(dim=-1, keepdim=True).clamp(min=1e-12)
            if p.embedding_norm == "normalize":
                vals = vals / norms
            else:
                vals = vals * torch.clamp(p.clip_embedding / norms, max=1.0)
            for gid, v in zip(payload["ids"].tolist(), vals):
                self.releases[gid] += 1
                self.last_released[gid] = v.detach().cpu()
            noise = self._noise(vals, p.sigma0)
            self.meter.add(vals, noise)
            return {**payload, "values": vals + noise}
        if kind == "update" and p.clip_model is not None:
            return clip_by_global_norm(payload, p.clip_model)
        if kind == "grad_estimator" and p.clip_grad_estimator is not None:
            return clip_by_global_norm(payload, p.clip_grad_estimator)
        return payload

    def aggregate(self, kind, payload, num_contributors, round):
        std = {"update": self.params.sigma1, "grad_estimator": self.params.sigma2}.get(kind, 0.0)
        if std == 0.0:
            return payload
        out = {}
        for k, v in payload.items():
            noise = self._noise(v, std) if v.is_floating_point() else None
            if noise is not None:
                self.meter.add(v, noise)
            out[k] = v + noise if noise is not None else v
        return out

    def on_round_end(self, round: int) -> dict[str, float]:
        return self.meter.take()

    def finish(self, algo) -> None:
        """After the last round: the embeddings ρ_q is measured over (all nodes, final global model)."""
        if self.params.rho_population == "all_nodes":
            self.final_embeddings = algo.node_embeddings(seed=self.ctx.seed if self.ctx is not None else 0)

    def _rho_embeddings(self) -> tuple[np.ndarray | None, str]:
        if self.params.rho_population == "all_nodes" and self.final_embeddings is not None:
            return self.final_embeddings.float().numpy(), "all nodes' released layer under the final global model"
        if not self.last_released:
            return None, "boundary nodes' last releases (none)"
        return torch.stack(list(self.last_released.values())).numpy(), "boundary nodes' last releases"

    def _steps(self) -> int:
        if self.params.steps == "fixed":
            return int(self.params.fixed_steps)
        return max(self.releases.values()) if self.releases else 0

    def report(self) -> dict:
        from fgx.privacy.metric_dp_accounting import epsilon_table, knn_distance_percentiles, orders_for

        p = self.params
        counts = np.array(list(self.releases.values())) if self.releases else np.zeros(0)
        out = {
            "mechanism": "metric_dp",
            "params": {"sigma0": p.sigma0, "sigma1": p.sigma1, "sigma2": p.sigma2,
                       "embedding_norm": p.embedding_norm, "clip_embedding": p.clip_embedding,
                       "clip_model": p.clip_model, "delta": p.delta, "k": p.k, "orders": p.orders},
            "releases_per_node": {"nodes": int(counts.size), "min": int(counts.min()) if counts.size else 0,
                                  "median": float(np.median(counts)) if counts.size else 0.0,
                                  "max": int(counts.max()) if counts.size else 0},
            "steps_used": self._steps(),
            "model_noise": "sigma1/sigma2 applied to the averaged update / G; not accounted (paper §3.1)",
        }
        if p.embedding_norm == "clip":
            out["note"] = ("embeddings were clipped, not normalised: the ε below assumes L2-normalised "
                           "embeddings (Theorem 3.6) and is an interpretation, not a guarantee")
        emb, population = self._rho_embeddings()
        if emb is None or len(emb) < 2 or self._steps() == 0:
            out["epsilon"] = None
            out["note_epsilon"] = "fewer than 2 nodes released an embedding: no k-NN distance, no ε"
            return out
        rho = knn_distance_percentiles(emb, k=p.k, percentiles=p.percentiles, queries=p.rho_queries,
                                       seed=self.ctx.seed if self.ctx is not None else 0)
        out["rho_population"] = {"what": population, "nodes": rho["nodes"], "queries": rho["queries"]}
        sigmas = sorted(set([p.sigma0] + list(p.table_sigmas)))
        rows = epsilon_table(rho["rho"], sigmas, self._steps(), p.delta, orders=orders_for(p.orders))
        out.update({"k_effective": rho["k"], "rho": rho["rho"], "table": rows})
        head = next(r for r in rows if r["percentile"] == p.headline_percentile)
        out["epsilon"] = {"percentile": p.headline_percentile, "rho": head["rho"], "sigma0": p.sigma0,
                          "value": head["eps"][float(p.sigma0)], "delta": p.delta, "releases": self._steps()}
        self._headline = out["epsilon"]
        return out

    def headline(self) -> dict:
        h = getattr(self, "_headline", None) or {}
        return {"mechanism": "metric_dp", "sigma0": self.params.sigma0,
                f"epsilon_p{self.params.headline_percentile}": h.get("value"),
                "rho": h.get("rho"), "delta": self.params.delta, "releases": self._steps()}

    def state_dict(self) -> dict:
        ids = list(self.last_released)
        return {"releases": {str(k): v for k, v in self.releases.items()},
                "ids": torch.tensor(ids, dtype=torch.long),
                "values": torch.stack([self.last_released[i] for i in ids]) if ids else torch.zeros(0),
                "gen": self.gen.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.releases = Counter({int(k): v for k, v in state["releases"].items()})
        self.last_released = {int(i): v for i, v in zip(state["ids"].tolist(), state["values"])}
        self.gen.set_state(state["gen"])
