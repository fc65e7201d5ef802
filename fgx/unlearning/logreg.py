"""One-vs-rest L2-regularised logistic regression with objective perturbation, in closed form.

Per class c (labels y in {-1, +1}): L_b(w_c) = sum_i log(1 + exp(-y_ic z_i^T w_c)) + (lam n_t / 2)||w_c||^2
+ b_c^T w_c. The data terms are sums over training rows, so a federated server gets the exact full-batch
gradient, Hessian-vector product or Hessian by adding the clients' parts (``LocalData`` below).
Hand-written rather than autograd: the certificate needs the Hessian and its solves exactly, and
these few lines are cheaper than autograd's per-class Hessians."""
from __future__ import annotations

import numpy as np
from scipy.special import expit


def signed_labels(y: np.ndarray, num_classes: int) -> np.ndarray:
    """n x C matrix with +1 in the node's class column and -1 elsewhere (one-vs-rest targets)."""
    out = -np.ones((y.size, num_classes))
    out[np.arange(y.size), y] = 1.0
    return out


class LocalData:
    """The training rows one party holds: embeddings ``z`` (n_t x F) and one-vs-rest labels (n_t x C)."""

    def __init__(self, z: np.ndarray, ysign: np.ndarray):
        self.z, self.ysign = z, ysign

    def loss_grad(self, w: np.ndarray) -> tuple[float, np.ndarray]:
        """Sum over rows of the logistic losses of all classes and their gradient (F x C)."""
        margin = self.ysign * (self.z @ w)
        loss = float(np.logaddexp(0.0, -margin).sum())
        coef = (expit(margin) - 1.0) * self.ysign
        return loss, self.z.T @ coef

    def grad(self, w: np.ndarray) -> np.ndarray:
        return self.loss_grad(w)[1]

    def curvature(self, w: np.ndarray) -> np.ndarray:
        s = expit(self.z @ w)
        return s * (1.0 - s)

    def hvp(self, w: np.ndarray, v: np.ndarray, curv: np.ndarray | None = None) -> np.ndarray:
        """Per class c: (sum_i s_ic z_i z_i^T) v_c, for all classes at once (F x C)."""
        s = self.curvature(w) if curv is None else curv
        return self.z.T @ (s * (self.z @ v))

    def hessians(self, w: np.ndarray) -> np.ndarray:
        """C x F x F data Hessians (no regulariser)."""
        s = self.curvature(w)
        return np.stack([(self.z * s[:, c:c + 1]).T @ self.z for c in range(s.shape[1])])

    def gram(self) -> np.ndarray:
        return self.z.T @ self.z

    def gram_matvec(self, v: np.ndarray) -> np.ndarray:
        return self.z.T @ (self.z @ v)

    def prediction_change_sq(self, v: np.ndarray) -> np.ndarray:
        """Per class ||Z v_c||^2 (length C)."""
        return ((self.z @ v) ** 2).sum(0)


def batched_cg(matvec, rhs: np.ndarray, tol: float = 1e-12,
               max_iter: int = 1000, precond=None) -> tuple[np.ndarray, int, np.ndarray]:
    """Conjugate gradients on C independent SPD systems H_c x_c = rhs_c (columns), sharing one
    ``matvec`` call per iteration (one federated round each); ``precond``: r -> M^-1 r (columns), for
    preconditioned CG. Stops when every column has ||r_c|| <= tol ||rhs_c||. Returns x, the iterations
    and the recursive residual norms.
    (scipy's cg solves one system at a time; here the C systems share each federated product.)"""
    x = np.zeros_like(rhs)
    r = rhs.copy()
    z = r if precond is None else precond(r)
    p = z.copy()
    rz = (r * z).sum(0)
    rr = (r * r).sum(0)
    target = (tol ** 2) * np.maximum(rr, 1e-300)
    it = 0
    while it < max_iter and np.any(rr > target):
        hp = matvec(p)
        alpha = rz / np.maximum((p * hp).sum(0), 1e-300)
        x += alpha * p
        r -= alpha * hp
        z = r if precond is None else precond(r)
        new = (r * z).sum(0)
        p = z + (new / np.maximum(rz, 1e-300)) * p
        rz, rr = new, (r * r).sum(0)
        it += 1
    return x, it, np.sqrt(rr)
