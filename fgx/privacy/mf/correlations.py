"""Local noise correlations C_local (T × T, lower-triangular) for the decentralised algorithms, with
their LDP sensitivity² under (k, b) participation and the surrogate objective they reach.

identity: DP-D-SGD (independent noise). antipgd: C_local = tril(1), i.e. noise z_t - z_{t-1}
(Koloskova et al. 2023). dmf: the optimal multi-epoch factorisation of the centralised prefix-sum
workload, applied by every node (Choquette-Choo et al. 2023). mafalda: optimised for the gossip
post-averaging workload through the closed-form Lemma-10 Gram (Bellet et al. 2025).
mafalda_message: the same for the message workload 𝐖_T."""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass

import numpy as np

from fgx.privacy.mf.sensitivity import local_sens2
from fgx.privacy.mf.solver import lower_factor, optimise_gram, surrogate_objective
from fgx.privacy.mf.workloads import gossip_gram, prefix_gram

CORRELATIONS = ("identity", "antipgd", "dmf", "mafalda", "mafalda_message")


@dataclass
class Correlation:
    name: str
    c_local: np.ndarray        # lower-triangular T × T
    sens2: float               # LDP sens² under (k, b)
    objective: float           # ℒ_opti on the post-averaging gossip workload
    solve_s: float = 0.0
    iterations: int = 0
    solver_status: str | None = None      # None: closed form (identity, antipgd)
    solver_grad_ratio: float | None = None

    def solver_report(self) -> dict:
        return {"iterations": self.iterations, "status": self.solver_status or "closed form",
                "projected_gradient_ratio": self.solver_grad_ratio, "seconds": self.solve_s}

    @property
    def noise_mixer(self) -> np.ndarray:
        """C_local^{-1} (lower-triangular): correlated noise = C^{-1} z."""
        return np.linalg.inv(self.c_local)


_CACHE: dict[str, Correlation] = {}


def build_correlation(name: str, w: np.ndarray, k: int, b: int, max_iter: int = 10_000,
                      tol: float = 1e-8) -> Correlation:
    steps = k * b
    key = hashlib.sha1(np.ascontiguousarray(w).tobytes() + f"{name}/{k}/{b}/{max_iter}/{tol}".encode()).hexdigest()
    if key in _CACHE:
        return _CACHE[key]
    t0 = time.perf_counter()
    h_util = gossip_gram(w, steps, "postavg")
    iters, status, ratio = 0, None, None
    if name == "identity":
        c = np.eye(steps)
    elif name == "antipgd":
        c = np.tril(np.ones((steps, steps)))
    elif name in ("dmf", "mafalda", "mafalda_message"):
        h = {"dmf": lambda: prefix_gram(steps), "mafalda": lambda: h_util,
             "mafalda_message": lambda: gossip_gram(w, steps, "message")}[name]()
        res = optimise_gram(h, k, b, max_iter=max_iter, tol=tol)
        c, iters, status, ratio = lower_factor(res.x), res.iterations, res.status, res.grad_ratio
    else:
        raise ValueError(f"unknown correlation {name!r}; known: {list(CORRELATIONS)}")
    s2 = local_sens2(c, b)
    corr = Correlation(name, c, s2, surrogate_objective(h_util, c, s2), time.perf_counter() - t0, iters, status, ratio)
    _CACHE[key] = corr
    return corr
