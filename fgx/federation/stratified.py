"""Class-stratified training batches for a rare class (AML: 1 laundering transaction in ~1,000).

A uniform batch of 512 HI-Small transactions holds 0.5 laundering ones on average; six batches in ten hold
none. With ``positive_share`` q every batch holds k = round(q·b) items of the client's rarest training class
(drawn without replacement within the batch) and b − k of the others, and the loss weights are multiplied
by rate/share per class (p/q for the rare class, (1 − p)/(1 − q) for the rest, p its training rate): each
batch's weighted loss is then the uniform batch's in expectation — the same objective, with the rare class's
part of the gradient averaged over k items instead of over a Poisson(p·b) count. Binary tasks only.

Not torch.utils.data.WeightedRandomSampler: it draws items independently (the rare count per batch stays
random) and with replacement across the whole batch.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class StratifiedBatches:
    rare: torch.Tensor          # positions (into the client's training ids) of the rare class's items
    common: torch.Tensor        # positions of every other item
    k: int                      # rare items per batch
    batch_size: int
    correction: torch.Tensor    # [C] float64 loss-weight factors: rate / share per class

    def draw(self, generator: torch.Generator) -> torch.Tensor:
        """[batch_size] positions: k rare items, then batch_size − k others, each part without replacement."""
        r = self.rare[torch.randperm(self.rare.numel(), generator=generator)[: self.k]]
        c = self.common[torch.randperm(self.common.numel(), generator=generator)[: self.batch_size - self.k]]
        return torch.cat([r, c])


def stratified_batches(labels: torch.Tensor, batch_size: int | None, share: float | None) -> StratifiedBatches | None:
    """The plan for a client's training labels, or None where batches stay uniform: no share set, full
    batches, labels that are not binary classes, or a client without items of both classes."""
    if share is None or batch_size is None or batch_size >= labels.numel():
        return None
    if labels.is_floating_point() or int(labels.min()) < 0 or int(labels.max()) > 1:
        return None
    counts = torch.bincount(labels.cpu(), minlength=2)
    rare_class = int(torch.argmin(counts))
    n_rare, n = int(counts[rare_class]), labels.numel()
    if n_rare == 0 or n_rare == n:
        return None
    k = min(max(1, round(share * batch_size)), n_rare, batch_size - 1)
    k = max(k, batch_size - (n - n_rare))            # too few common items: more rare ones fill the batch
    q, p = k / batch_size, n_rare / n
    correction = torch.ones(2, dtype=torch.float64)
    correction[rare_class] = p / q
    correction[1 - rare_class] = (1 - p) / (1 - q)
    is_rare = labels.cpu() == rare_class
    return StratifiedBatches(is_rare.nonzero().view(-1), (~is_rare).nonzero().view(-1), k, batch_size, correction)
