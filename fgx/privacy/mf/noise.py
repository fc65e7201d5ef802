"""The noise of matrix-factorisation decentralised SGD (Bellet et al. 2025, Algorithm 1 / §3.6 of the
spec): every node u draws z_t^(u) ~ N(0, std²) i.i.d. per step and coordinate and adds the step-t
row of C_local^{-1} z^(u) (lower-triangular, so streamable); no noise is shared between nodes.

Optional DECOR-style secrets (Allouah et al. 2024): for every edge e = (i, j), i < j, a secret
s_{e,t} ~ N(0, (ξ·std)²) per step, added by i and subtracted by j (the oriented incidence of
fgx.privacy.mf.trust.oriented_incidence), independent over steps."""
from __future__ import annotations

import numpy as np
import torch


class GossipNoise:
    """Noise of all n nodes at step t, (n, d), drawn on the CPU from one generator (the same draws on
    every device). Keeps z_0..z_t (T × n × d float32 at most) and computes the noise of ``block``
    steps at once as one product C^{-1}[block, :t] z[:t] (a dense MAFALDA C^{-1} row-by-row would
    read all past z at every step). After a resume the stream is replayed from the seed and the
    blocks are aligned to multiples of ``block``, so a resumed run adds the noise of an
    uninterrupted one."""

    def __init__(self, mixer: np.ndarray, n: int, dim: int, std: float, seed: int,
                 incidence: np.ndarray | None = None, secret_scale: float = 0.0, block: int = 32):
        self.mixer = torch.tensor(mixer, dtype=torch.float32)
        self.steps = len(mixer)
        self.n, self.dim, self.std, self.seed, self.block = n, dim, float(std), seed, block
        self.incidence = (torch.tensor(incidence, dtype=torch.float32)
                          if incidence is not None and secret_scale > 0 else None)
        self.secret_std = float(std * secret_scale)
        self.gen = torch.Generator().manual_seed(seed)
        self.z = torch.empty((self.steps, n, dim), dtype=torch.float32)
        self.secret_rows = torch.empty((self.steps, n, dim)) if self.incidence is not None else None
        self.drawn = 0
        self.cache: tuple[int, torch.Tensor] | None = None       # (first step, noise of the block)

    def restart(self) -> None:
        self.gen.manual_seed(self.seed)
        self.drawn = 0
        self.cache = None

    def _draw(self, t: int) -> None:
        while self.drawn <= t:
            self.z[self.drawn] = torch.randn((self.n, self.dim), generator=self.gen) * self.std
            if self.incidence is not None:
                # the secrets of a step, added to its local noise: +s at one end of an edge, -s at the other
                s = torch.randn((self.incidence.size(1), self.dim), generator=self.gen) * self.secret_std
                self.secret_rows[self.drawn] = self.incidence @ s
            self.drawn += 1

    def step(self, t: int) -> torch.Tensor:
        """n_t = Σ_{τ<=t} (C^{-1})_{tτ} z_τ (+ the secrets of step t), shape (n, d), float32."""
        if self.cache is None or not self.cache[0] <= t < self.cache[0] + len(self.cache[1]):
            start = t - t % self.block        # aligned blocks: a resumed run computes the same products
            end = min(self.steps, start + self.block)
            self._draw(end - 1)
            rows = self.mixer[start:end, :end]
            used = torch.nonzero(rows.abs().sum(0)).view(-1)      # identity: 1 step per row, AntiPGD: 2
            block = (rows[:, used] @ self.z[used].reshape(len(used), -1)).reshape(end - start, self.n, self.dim)
            if self.incidence is not None:
                block += self.secret_rows[start:end]
            self.cache = (start, block)
        return self.cache[1][t - self.cache[0]]
