"""Vectorised node models for decentralised SGD: all n node models are one (n, d) tensor; per-sample
gradients with torch.func (vmap over nodes of vmap over samples of grad) and per-sample clipping. The
noise is privacy=mf_gdp's (fgx/privacy/mf/noise.py)."""
from __future__ import annotations

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
