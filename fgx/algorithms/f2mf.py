"""F2MF — fgx's reconstruction of Fairness-aware Federated Matrix Factorization (Liu et al., RecSys
2022) from the paper's description; **not the authors' code** (none is public, and fgx's reading of it
is recorded below). FedMF (shared item table, local user embeddings, BPR) plus a global user-group
fairness regulariser whose group statistics are communicated with differential privacy.

What the paper states (abstract, as cited by LPSFed): the fairness objective needs all users' group
information, federated learning keeps it local; F2MF "communicates group statistics during federated
optimization" and applies differential privacy to them so that users' group membership is not exposed.

fgx's choices (all configurable):
- Groups: user-oriented group fairness by activity (the datasets here have no demographic features):
  each client marks its top ``advantaged_share`` of users by training interactions as advantaged (A),
  the rest disadvantaged (D). The threshold is client-local, so no statistic is needed to define it.
- Utility of a user: P_u = mean over the user's training pairs of log σ((s_ui − s_uj)/τ) with one sampled
  negative j (the BPR log-likelihood: differentiable, higher = better ranked), clipped to [−``utility_clip``, 0].
- Global objective: BPR + ``fair_lambda`` · (μ_A − μ_D)², μ_g = (Σ_{u∈g} P_u) / |g| over all clients.
- Communication: after local training each client sends its group sums (Σ_A P_u, |A|, Σ_D P_u, |D|) with
  Laplace noise of scale Δ/ε (Δ = ``utility_clip`` for sums, 1 for counts; ε = ``dp_epsilon`` per
  message, null = no noise); the server adds them up and broadcasts the global sums. Next round the
  client's fairness term is (μ̂_A − μ̂_D)² where its own part is recomputed from the batch with the
  current model (the batch mean utility of its A/D users times its own group sizes) and the other
  clients' part is the broadcast sums minus its own last contribution: the gradient of the global
  squared gap with respect to this client's users, as if the other clients stood still.
- ``f2mf_fairness.jsonl`` records per round the (noisy) global μ_A, μ_D and the gap.
The ε is per round and per client message; fgx does not compose it over rounds here."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from fgx.algorithms.fedmf import FedMF, FedMFParams, ItemClient
from fgx.config import spec
from fgx.federation.channel import Message
from fgx.recsys.metrics import ranking_metrics
from fgx.recsys.training import bpr_epochs, dot_score, sample_negatives
from fgx.registry import ALGORITHMS


@dataclass
class F2MFParams(FedMFParams):
    fair_lambda: float = field(default=1.0, metadata=spec(min=0.0, help="weight of the squared group gap (μ_A - μ_D)²"))
    advantaged_share: float = field(default=0.2, metadata=spec(
        gt=0.0, max=1.0, help="share of each client's most active users in the advantaged group"))
    utility_clip: float = field(default=5.0, metadata=spec(gt=0.0, help="P_u is clipped to [-clip, 0] (DP sensitivity)"))
    dp_epsilon: float | None = field(default=1.0, metadata=spec(
        gt=0.0, help="Laplace ε of each group-statistics message; null: no noise"))


class FairClient(ItemClient):
    def __init__(self, *a, advantaged: torch.Tensor, **kw):
        super().__init__(*a, **kw)
        self.advantaged = advantaged          # bool per local user (never sent)
        self.sent = torch.zeros(4)            # this client's last (S_A, n_A, S_D, n_D)
        self.global_sums = None               # the server's last global (S_A, n_A, S_D, n_D)


def advantaged_users(train: torch.Tensor, num_users: int, share: float) -> torch.Tensor:
    deg = torch.bincount(train[0], minlength=num_users)
    k = max(1, int(round(share * num_users)))
    adv = torch.zeros(num_users, dtype=torch.bool)
    adv[torch.argsort(deg, descending=True, stable=True)[:k]] = True
    return adv


def pair_utility(uh, vh, u, i, j, tau: float, clip: float) -> torch.Tensor:
    """log σ((s_ui - s_uj)/τ) per triple, clipped to [-clip, 0]."""
    return F.logsigmoid((dot_score(uh[u], vh[i]) - dot_score(uh[u], vh[j])) / tau).clamp(min=-clip)


def user_utilities(state: FairClient, p: F2MFParams, g: torch.Generator) -> torch.Tensor:
    """P_u of every local user under the current model (users without training pairs: 0)."""
    tr = state.inter.train
    j = sample_negatives(state.known, tr[0], 1, g)[:, 0]
    with torch.no_grad():
        uh, vh = state.model.embed()
        t = pair_utility(uh, vh, tr[0], tr[1], j, p.bpr_tau, p.utility_clip)
    n = state.inter.num_users
    s = torch.zeros(n).index_add_(0, tr[0], t)
    c = torch.bincount(tr[0], minlength=n).clamp(min=1)
    return s / c


def fairness_term(state: FairClient, p: F2MFParams):
    """The client's share of the global squared gap, as a function of the batch (None before the
    first global statistics arrive)."""
    if state.global_sums is None or p.fair_lambda == 0:
        return None
    others = state.global_sums - state.sent
    n_a_own, n_d_own = float(state.advantaged.sum()), float((~state.advantaged).sum())
    n_a, n_d = max(float(state.global_sums[1]), 1.0), max(float(state.global_sums[3]), 1.0)

    def term(users, uh, vh, i, j):
        t = pair_utility(uh, vh, users, i, j, p.bpr_tau, p.utility_clip)
        adv = state.advantaged[users]
        own_a = t[adv].mean() * n_a_own if adv.any() else t.new_zeros(())
        own_d = t[~adv].mean() * n_d_own if (~adv).any() else t.new_zeros(())
        gap = (others[0] + own_a) / n_a - (others[2] + own_d) / n_d
        return p.fair_lambda * gap ** 2
    return term


def f2mf_train(state: FairClient, p: F2MFParams, seed: int) -> float:
    start = state.model.item_emb.weight.detach().clone()
    g = torch.Generator().manual_seed(seed + state.cid)
    term = fairness_term(state, p)
    extra, fair = None, []
    if term is not None:
        tr = state.inter.train
        # the fairness term is evaluated on a fresh (user, positive, negative) sample of the batch's users
        def extra(u, uh, vh):
            b = torch.randint(tr.size(1), (len(u),), generator=g)
            j = sample_negatives(state.known, tr[0, b], 1, g)[:, 0]
            out = term(tr[0, b], uh, vh, tr[1, b], j)
            fair.append(float(out.detach()))
            return out
    loss = bpr_epochs(state.model, state.inter.train, state.known, state.optimizer, p.local_epochs, p.batch_size,
                      p.num_negatives, p.l2, g, bpr_tau=p.bpr_tau, regulariser=extra)
    state.delta = state.model.item_emb.weight.detach() - start
    # the fairness term's mean over the batches against the mean batch loss (which includes it)
    state.reg_share = (sum(fair) / len(fair)) / max(abs(loss), 1e-30) if fair else 0.0
    return loss


def noisy_group_sums(state: FairClient, p: F2MFParams, seed: int) -> torch.Tensor:
    """(Σ_A P_u, |A|, Σ_D P_u, |D|) with Laplace noise (scale clip/ε on sums, 1/ε on counts)."""
    g = torch.Generator().manual_seed(seed + 7 * state.cid + 1)
    util = user_utilities(state, p, g)
    adv = state.advantaged
    sums = torch.tensor([util[adv].sum(), adv.sum(), util[~adv].sum(), (~adv).sum()], dtype=torch.float64)
    if p.dp_epsilon is not None:
        scale = torch.tensor([p.utility_clip, 1.0, p.utility_clip, 1.0], dtype=torch.float64) / p.dp_epsilon
        rng = np.random.default_rng(seed * 31 + state.cid)
        sums = sums + torch.from_numpy(rng.laplace(0.0, 1.0, 4)) * scale
    return sums


@ALGORITHMS.register("f2mf", params=F2MFParams, tasks=("ranking",))
class F2MF(FedMF):
    messages = {**FedMF.messages,
                "group_stats": Message("up", reason=(
                    "F2MF's group statistics (sum of BPR utilities and size of the advantaged and disadvantaged "
                    "users), Laplace noise with ε = dp_epsilon per message (none when null)")),
                "global_group_stats": Message("down")}  # their sum over clients
    train_fn = staticmethod(f2mf_train)
    model_names = ("mf",)

    def build_client(self, c) -> FairClient:
        base = super().build_client(c)
        adv = advantaged_users(base.inter.train, base.inter.num_users, self.params.advantaged_share)
        return FairClient(base.cid, base.inter, base.model, base.optimizer, advantaged=adv)

    def after_round(self, r: int) -> None:
        ch, p = self.ctx.channel, self.params
        total = torch.zeros(4, dtype=torch.float64)
        for cl in self.clients:
            cl.sent = ch.send("group_stats", noisy_group_sums(cl, p, self.round_seed(r)), src=cl.cid,
                              dst="server", round=r).float()
            total += cl.sent.double()
        got = ch.broadcast("global_group_stats", total.float(), [cl.cid for cl in self.clients], r)
        for cl in self.clients:
            cl.global_sums = got.clone()
        mu_a = float(total[0] / max(float(total[1]), 1.0))
        mu_d = float(total[2] / max(float(total[3]), 1.0))
        self.ctx.record("f2mf_fairness", {"mu_advantaged": mu_a, "mu_disadvantaged": mu_d, "gap": mu_a - mu_d})
        self.gap = mu_a - mu_d

    def round_stats(self) -> dict[str, float]:
        return {"regulariser_share": float(sum(c.reg_share for c in self.clients) / len(self.clients)),
                "fairness_gap": self.gap}

    def client_metrics(self, client) -> dict[str, dict[str, float]]:
        """FedMF's metrics plus NDCG@K of the advantaged and disadvantaged users (the gap F2MF narrows)."""
        out = super().client_metrics(client)
        cl, k = self.clients[client.cid], self.params.top_k
        cl.model.eval()
        with torch.no_grad():
            scores = cl.model.scores()
        inter = cl.inter
        for split, seen, truth in (("val", inter.train, inter.val),
                                   ("test", torch.cat([inter.train, inter.val], 1), inter.test)):
            for name, members in (("advantaged", cl.advantaged), ("disadvantaged", ~cl.advantaged)):
                sel = members[truth[0]]
                out[split][f"ndcg@{k}_{name}"] = ranking_metrics(scores, seen, truth[:, sel], k)[f"ndcg@{k}"] \
                    if sel.any() else float("nan")
        return out

    def state_dict(self) -> dict:
        return {**super().state_dict(), "sent": [c.sent for c in self.clients],
                "global_sums": [c.global_sums for c in self.clients]}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        for c, s, gs in zip(self.clients, state["sent"], state["global_sums"]):
            c.sent, c.global_sums = s, gs
