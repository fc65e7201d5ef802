"""Ranking losses on (user, positive item, negative item) triples: BPR and LPSFed's popularity-aware
BC loss (Eq. 7-9 with the refined margin of Eq. 15; after BC-Loss, Zhang et al. 2022)."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

_EPS = 1e-7


def bpr_loss(pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
    """-log σ(s_ui - s_uj), mean over triples (scores: larger = more preferred)."""
    return F.softplus(neg - pos).mean()


def angle(cos: torch.Tensor) -> torch.Tensor:
    return torch.arccos(cos.clamp(-1 + _EPS, 1 - _EPS))


def softmax_pos_loss(pos_logit: torch.Tensor, neg_logit: torch.Tensor) -> torch.Tensor:
    """-log exp(pos) / (exp(pos) + Σ_j exp(neg_j)); ``neg_logit`` is [B] or [B, J]."""
    if neg_logit.dim() == 1:
        neg_logit = neg_logit[:, None]
    return (torch.logsumexp(torch.cat([pos_logit[:, None], neg_logit], 1), 1) - pos_logit).mean()


def bias_loss(cos_bias_pos: torch.Tensor, cos_bias_neg: torch.Tensor, tau: float) -> torch.Tensor:
    """Eq. 7: trains the popularity encoders on cosines of their embeddings."""
    return softmax_pos_loss(cos_bias_pos / tau, cos_bias_neg / tau)


def bc_margin(cos_bias_pos: torch.Tensor, pos_angle: torch.Tensor, gamma: float,
              grad: bool = True) -> torch.Tensor:
    """Eq. 8: M_ui = min(γ ξ̂_ui, π - R̂_ui). With ``grad`` (the paper has no stop-gradient, nor the
    authors' code) the popularity encoders also learn through the margin, and on the π - R̂ branch
    the positive angle keeps a gradient of ω instead of sitting on the clamp at π; ``grad=False``
    detaches both branches (the margin is a constant of the step)."""
    if not grad:
        cos_bias_pos, pos_angle = cos_bias_pos.detach(), pos_angle.detach()
    return torch.minimum(gamma * angle(cos_bias_pos), math.pi - pos_angle)


def bc_loss(cos_pos: torch.Tensor, cos_neg: torch.Tensor, margin: torch.Tensor, tau: float) -> torch.Tensor:
    """Eq. 9 with the (refined) margin on the positive angle, clamped to [0, π]."""
    pos_angle = angle(cos_pos)
    pos = torch.cos((pos_angle + margin).clamp(0.0, math.pi)) / tau
    return softmax_pos_loss(pos, cos_neg / tau)


def refined_margin(margin_ui: torch.Tensor, context: float, omega: float) -> torch.Tensor:
    """Eq. 15: M̃ = ω · M_updated + (1 - ω) · M_ui (M_updated is the server-mixed client margin)."""
    return omega * context + (1.0 - omega) * margin_ui
