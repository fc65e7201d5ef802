"""Vectorised node models for decentralised SGD: all n node models are one (n, d) tensor; per-sample
gradients with torch.func (vmap over nodes of vmap over samples of grad), per-sample clipping, and
streamed correlated noise n_t = Σ_{τ<=t} (C_local^{-1})_{tτ} z_τ."""
from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad, vmap


class FlatModel:
    """A module evaluated from a flat parameter vector (so node models stack into (n, d))."""

    def __init__(self, module: nn.Module):
        self.module = module
        self.names = [k for k, _ in module.named_parameters()]
        self.shapes = [v.shape for _, v in module.named_parameters()]
        self.sizes = [v.numel() for _, v in module.named_parameters()]

    def initial(self) -> torch.Tensor:
        return torch.cat([v.detach().reshape(-1) for v in self.module.parameters()])

    def unflatten(self, vec: torch.Tensor) -> dict:
        return {n: t.view(s) for n, t, s in zip(self.names, vec.split(self.sizes), self.shapes)}

    def predict(self, vec: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return functional_call(self.module, self.unflatten(vec), (x,)).squeeze(-1)

    def per_sample_grads(self, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """theta (n, d), x (n, B, F), y (n, B) -> squared-error gradients (n, B, d)."""
        def loss(vec, xi, yi):
            return (self.predict(vec, xi.unsqueeze(0)) - yi.unsqueeze(0)).pow(2).mean()
        return vmap(vmap(grad(loss), in_dims=(None, 0, 0)), in_dims=(0, 0, 0))(theta, x, y)


def clip_and_average(g: torch.Tensor, clip: float) -> torch.Tensor:
    """(n, B, d) per-sample gradients -> (n, d) mean of the gradients clipped to L2 norm ``clip``."""
    norms = g.norm(dim=-1, keepdim=True)
    return (g * (clip / norms.clamp(min=clip))).mean(1)


class CorrelatedNoise:
    """Per node and coordinate z_t ~ N(0, std²) i.i.d.; returns the step-t row of C^{-1} z. Keeps the
    z's drawn so far (T × n × d at most): exact same draws as a precomputed C^{-1}Z."""

    def __init__(self, mixer: np.ndarray, shape: tuple[int, int], std: float, seed: int):
        self.mixer = torch.tensor(mixer, dtype=torch.float32)
        self.std = std
        self.seed = seed
        self.gen = torch.Generator().manual_seed(seed)
        self.shape = shape
        self.z: list[torch.Tensor] = []

    def restart(self) -> None:
        """Forget the draws; the next step(t) redraws z_0..z_t from the seed (resume)."""
        self.z.clear()
        self.gen.manual_seed(self.seed)

    def step(self, t: int) -> torch.Tensor:
        while len(self.z) <= t:
            self.z.append(torch.randn(self.shape, generator=self.gen) * self.std)
        coeffs = self.mixer[t, : t + 1]
        nz = torch.nonzero(coeffs).view(-1)
        out = torch.zeros(self.shape)
        for i in nz.tolist():
            out += coeffs[i] * self.z[i]
        return out
