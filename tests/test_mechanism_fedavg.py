"""FedAvg and client-level DP (privacy=dp_fedavg), checked from what a tiny run sent: the next global
model is the (train-weighted) average of the updates the server received; every released update is
within the clip norm; the noise on the average has the configured spread."""
from __future__ import annotations

import numpy as np
import torch
from scipy import stats

from mechanisms import by_round, flat, floats, train_counts

# unequal clients (label skew), so that train-item weighting and uniform weighting differ
UNEQUAL = ["dataset=csbm", "dataset.num_nodes=300", "dataset.num_features=8", "partitioner=label_dirichlet",
           "partitioner.alpha=0.3", "partitioner.num_clients=4", "model=gcn", "model.hidden=8",
           "eval_every=10", "output.checkpoint=false"]


def _globals(seen) -> dict[int, dict]:
    """round -> the global weights broadcast at its start (one copy per round)."""
    return {r: floats(msgs[0][2]) for r, msgs in by_round(seen, "global_weights").items()}


def _average(updates: list[dict], weights: list[float]) -> dict:
    tot = float(sum(weights))
    return {k: sum(u[k] * (w / tot) for u, w in zip(updates, weights)) for k in updates[0]}


def test_fedavg_new_global_is_the_train_weighted_average_of_received_updates(recorded, run_fgx):
    run_fgx(*UNEQUAL, "algorithm=fedavg", "algorithm.local_steps=2", "algorithm.client_fraction=0.5", "rounds=4")
    n_train = train_counts(recorded["clients"])
    assert len(set(n_train)) > 1, n_train
    glob, ups = _globals(recorded), by_round(recorded, "update")
    checked = 0
    for r in sorted(glob)[:-1]:
        received = ups[r]
        assert len(received) == 2                       # client_fraction 0.5 of 4 clients
        deltas = [floats(p) for _, _, p in received]
        weights = [n_train[src] for src, _, _ in received]
        want = {k: glob[r][k] + v for k, v in _average(deltas, weights).items()}
        uniform = {k: glob[r][k] + v for k, v in _average(deltas, [1.0] * len(deltas)).items()}
        got = glob[r + 1]
        err = (flat(got) - flat(want)).abs().max().item()
        gap = (flat(uniform) - flat(want)).abs().max().item()
        assert err < 1e-5, f"round {r}: new global differs from the train-weighted average by {err}"
        assert gap > 100 * max(err, 1e-7)               # the check tells the two weightings apart
        moved = (flat(got) - flat(glob[r])).abs().max().item()
        assert moved > 1e-4, f"round {r}: the global model did not move"
        checked += 1
    assert checked == 3


def test_fedavg_uniform_weighting_is_the_plain_mean(recorded, run_fgx):
    run_fgx(*UNEQUAL, "algorithm=fedavg", "algorithm.local_steps=2", "algorithm.weighting=uniform", "rounds=3")
    glob, ups = _globals(recorded), by_round(recorded, "update")
    for r in sorted(glob)[:-1]:
        deltas = [floats(p) for _, _, p in ups[r]]
        want = {k: glob[r][k] + v for k, v in _average(deltas, [1.0] * len(deltas)).items()}
        assert (flat(glob[r + 1]) - flat(want)).abs().max().item() < 1e-5


def test_dp_fedavg_releases_are_clipped_and_the_average_carries_noise_of_the_configured_std(recorded, run_fgx):
    clip, z = 0.05, 0.8
    run_fgx(*UNEQUAL, "algorithm=fedavg", "algorithm.weighting=uniform", "algorithm.local_steps=3", "rounds=4",
            "dataset.num_features=16", "model.hidden=64",
            "privacy=dp_fedavg", f"privacy.clip={clip}", f"privacy.noise_multiplier={z}")
    glob, ups = _globals(recorded), by_round(recorded, "update")
    norms = [flat(p).norm().item() for r in ups for _, _, p in ups[r]]
    assert max(norms) <= clip * (1 + 1e-5), f"a released update has norm {max(norms)} > clip {clip}"
    # the updates were larger than the clip (so clipping acted): their norm is the clip itself
    assert sum(abs(n - clip) < 1e-6 for n in norms) >= len(norms) // 2, norms
    residuals = []
    for r in sorted(glob)[:-1]:
        deltas = [floats(p) for _, _, p in ups[r]]
        mean = _average(deltas, [1.0] * len(deltas))
        residuals.append(flat(glob[r + 1]) - flat(glob[r]) - flat(mean))
        std = z * clip / len(deltas)
    noise = torch.cat(residuals).numpy()
    assert noise.size > 3000
    # the server noise is N(0, (z * clip / m)^2) per coordinate: its sample std is within 5% (the
    # std of that ratio is 1/sqrt(2n) ~ 1%), it is centred and Gaussian
    assert abs(float(np.std(noise)) / std - 1) < 0.05, (float(np.std(noise)), std)
    assert abs(float(np.mean(noise))) < 5 * std / np.sqrt(noise.size)
    assert stats.kstest(noise, "norm", args=(0, std)).pvalue > 1e-4


def test_fedper_new_base_is_the_train_weighted_average_of_received_base_updates(recorded, run_fgx):
    """FedPer averages only the base (the heads stay home), weighted like FedAvg by training items."""
    run_fgx(*UNEQUAL, "algorithm=fedper", "algorithm.local_steps=2", "rounds=3")
    n_train = train_counts(recorded["clients"])
    assert len(set(n_train)) > 1, n_train
    glob = {r: floats(msgs[0][2]) for r, msgs in by_round(recorded, "global_base").items()}
    ups = by_round(recorded, "base_update")
    for r in sorted(glob)[:-1]:
        deltas = [floats(p) for _, _, p in ups[r]]
        weights = [n_train[src] for src, _, _ in ups[r]]
        want = {k: glob[r][k] + v for k, v in _average(deltas, weights).items()}
        uniform = {k: glob[r][k] + v for k, v in _average(deltas, [1.0] * len(deltas)).items()}
        err = (flat(glob[r + 1]) - flat(want)).abs().max().item()
        assert err < 1e-5, f"round {r}: new base differs from the train-weighted average by {err}"
        assert (flat(uniform) - flat(want)).abs().max().item() > 100 * max(err, 1e-7)
