"""Local BPR training of a per-client ranking model (``mf``, ``lightgcn``) on (user, positive,
sampled negative) triples, shared by the item-sharing federated recommenders (FedMF, pFedRec)."""
from __future__ import annotations

from typing import Callable

import torch
from fgx.recsys.losses import bpr_loss


def dot_score(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return (u * v).sum(-1)


def sample_negatives(known: torch.Tensor, users: torch.Tensor, count: int, g: torch.Generator) -> torch.Tensor:
    """``count`` uniform items per user in ``users`` that the user has not interacted with in
    training (``known`` is the client's dense [M, N] train matrix; clashes are resampled up to ten
    times, what still clashes after that is kept, a negligible share)."""
    users = users[:, None].expand(-1, count)
    neg = torch.randint(known.size(1), users.shape, generator=g)
    for _ in range(10):
        clash = known[users, neg]
        if not clash.any():
            break
        neg[clash] = torch.randint(known.size(1), (int(clash.sum()),), generator=g)
    return neg


def known_matrix(train: torch.Tensor, num_users: int, num_items: int) -> torch.Tensor:
    known = torch.zeros(num_users, num_items, dtype=torch.bool)
    known[train[0], train[1]] = True
    return known


def bpr_epochs(model, train: torch.Tensor, known: torch.Tensor, optimizer: torch.optim.Optimizer,
               epochs: int, batch_size: int, num_negatives: int, l2: float, g: torch.Generator,
               score: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = dot_score,
               bpr_tau: float = 1.0, regulariser: Callable | None = None,
               grad_hook: Callable[[int], None] | None = None) -> float:
    """``epochs`` passes of mini-batch BPR on scores divided by ``bpr_tau`` (1.0 = standard BPR);
    ``l2`` penalises the batch's layer-0 embeddings (LightGCN's regulariser, per triple);
    ``regulariser(users, uh, vh)`` adds an algorithm's term; ``grad_hook(batch_len)`` runs between
    backward and the optimizer step (FedPerGNN's per-batch clip + LDP noise). Returns the mean batch loss."""
    model.train()
    total, steps = 0.0, 0
    for _ in range(epochs):
        perm = torch.randperm(train.size(1), generator=g)
        neg_all = sample_negatives(known, train[0], num_negatives, g)
        for b in torch.split(perm, batch_size):
            u, i, j = train[0, b], train[1, b], neg_all[b]
            uh, vh = model.embed()
            pos = score(uh[u], vh[i])
            neg = score(uh[u][:, None, :].expand(-1, j.size(1), -1), vh[j])
            loss = bpr_loss(pos[:, None] / bpr_tau, neg / bpr_tau)
            if regulariser is not None:
                loss = loss + regulariser(u, uh, vh)
            if l2 > 0:
                ego = model.user_emb(u).pow(2).sum() + model.item_emb(i).pow(2).sum() + model.item_emb(j).pow(2).sum()
                loss = loss + l2 * ego / (2 * len(b))
            optimizer.zero_grad()
            loss.backward()
            if grad_hook is not None:
                grad_hook(len(b))
            optimizer.step()
            total += float(loss.detach())
            steps += 1
    return total / max(steps, 1)


def mlp_score_head(dim: int, hidden: int) -> torch.nn.Module:
    """pFedRec's personal score function on the element-wise product of user and item vectors."""
    return torch.nn.Sequential(torch.nn.Linear(dim, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1))


def head_score(head: torch.nn.Module) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    return lambda u, v: head(u * v).squeeze(-1)
