"""The robust aggregators (fgx/federation/robust.py, docs/threats.md): each equals ByzFL's rule on random
inputs (float64, with outliers), and inside a FedAvg run the global model moves by the rule applied to the
updates the server received (checked against an independent numpy reference)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from fgx.federation import robust
from mechanisms import by_round, floats
from mechanisms import byzfl as load_byzfl

N, D, F = 10, 40, 2


def _inputs(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N, D, generator=g, dtype=torch.float64)
    x[:F] = 5.0 + 3.0 * torch.randn(F, D, generator=g, dtype=torch.float64)     # two outliers
    return x


def _close(a, b) -> bool:
    """Equal to float32 precision (ByzFL returns float32 from some of its torch paths)."""
    return torch.allclose(torch.as_tensor(a).double(), torch.as_tensor(b).double(), rtol=1e-6, atol=1e-6)


def _ours(name: str, **kw):
    entry = {"krum": robust.Krum, "multi_krum": robust.MultiKrum, "median": robust.Median,
             "trimmed_mean": robust.TrimmedMean, "geometric_median": robust.GeometricMedian,
             "centered_clipping": robust.CenteredClipping}[name]
    params = {"geometric_median": robust.GeometricMedianParams, "centered_clipping": robust.CenteredClippingParams}.get(
        name, robust.RobustParams)(**kw)
    return entry(params)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name, byz", [
    ("krum", lambda b: b.Krum(f=F)), ("multi_krum", lambda b: b.MultiKrum(f=F)),
    ("trimmed_mean", lambda b: b.TrMean(f=F)), ("geometric_median", lambda b: b.GeometricMedian(nu=0.1, T=3))])
def test_each_rule_equals_byzfl_on_random_inputs(name, byz, seed):
    byzfl = load_byzfl()
    x = _inputs(seed)
    got = _ours(name).rule(x, torch.ones(N, dtype=torch.float64), F)
    want = byz(byzfl)(x.clone())
    assert _close(got, want)


@pytest.mark.parametrize("n", [9, 10])
def test_median_equals_byzfl_on_numpy_inputs(n):
    # ByzFL's torch path takes torch.median, the lower of the two middle values for an even count; its numpy
    # path (np.median) averages them, as the coordinate-wise median of Yin et al. does: compared there
    byzfl = load_byzfl()
    x = _inputs(n)[:n]
    got = _ours("median").rule(x, torch.ones(n, dtype=torch.float64), F)
    assert np.allclose(got.numpy(), byzfl.Median()(x.numpy()), atol=1e-12)


def test_centered_clipping_equals_byzfl_over_rounds():
    byzfl = load_byzfl()
    ours, theirs = _ours("centered_clipping", tau=2.0, iterations=2), byzfl.CenteredClipping(L=2, tau=2.0)
    for seed in range(3):           # the centre carries from one round to the next in both
        x = _inputs(seed)
        assert _close(ours.rule(x, torch.ones(N), F), theirs(x.clone()))


def test_pre_aggregations_equal_byzfl():
    byzfl = load_byzfl()
    x = _inputs(5)
    assert _close(robust.nearest_neighbour_mixing(x, F), byzfl.NNM(f=F)(x.clone()))
    assert _close(robust.clip_norms(x, 3.0), byzfl.Clipping(c=3.0)(x.clone()))


def test_a_rule_applies_to_state_dicts_and_keeps_integer_buffers():
    x = _inputs(0)
    states = [{"w": v[:30].view(5, 6).float(), "b": v[30:].float(), "steps": torch.tensor(7)} for v in x]
    out = _ours("median")(states, [1.0] * N)
    assert out["steps"] == 7 and out["w"].shape == (5, 6) and out["w"].dtype == torch.float32
    flat = torch.cat([out["w"].reshape(-1), out["b"]]).double()
    assert torch.allclose(flat, robust.coordinate_median(x.float().double()), atol=1e-6)


# -- inside a run ------------------------------------------------------------------------------------------
# 4 clients, f = floor(0.25 * 4) = 1: an even count (the median averages its two middle values) and a trim
RUN = ["dataset=csbm", "dataset.num_nodes=300", "dataset.num_features=8", "partitioner=random",
       "partitioner.num_clients=4", "model=gcn", "model.hidden=8", "algorithm=fedavg", "algorithm.local_steps=2",
       "rounds=3", "eval_every=10", "output.checkpoint=false", "aggregator.byzantine_fraction=0.25"]


def _np_reference(name: str, x: np.ndarray, f: int, prev: np.ndarray | None, pre: str = "none") -> np.ndarray:
    """An independent numpy reading of each rule (Blanchard et al., Yin et al., Pillutla et al., Karimireddy
    et al., Allouah et al.), loops where fgx vectorises."""
    n = len(x)
    if pre == "nnm":
        dist = np.linalg.norm(x[:, None] - x[None], axis=2)
        x = np.stack([x[np.argsort(dist[i])[:n - f]].mean(0) for i in range(n)])
    if pre == "clip":
        x = np.stack([v * min(1.0, 0.05 / np.linalg.norm(v)) for v in x])
    if name == "mean":
        return x.mean(0)
    if name == "median":
        return np.median(x, axis=0)
    if name == "trimmed_mean":
        return np.sort(x, axis=0)[f:n - f].mean(0)
    if name in ("krum", "multi_krum"):
        scores = [np.mean(sorted(np.sum((x[i] - x[j]) ** 2) for j in range(n) if j != i)[:n - f - 1]) for i in range(n)]
        order = np.argsort(scores)
        return x[order[0]] if name == "krum" else x[order[:n - f]].mean(0)
    if name == "geometric_median":
        z = np.zeros(x.shape[1])
        for _ in range(3):
            w = np.array([1.0 / max(0.1, np.linalg.norm(v - z)) for v in x])
            z = (w[:, None] * x).sum(0) / w.sum()
        return z
    if name == "centered_clipping":
        v = np.zeros(x.shape[1]) if prev is None else prev
        d = [(u - v) * min(1.0, 0.05 / np.linalg.norm(u - v)) for u in x]
        return v + np.mean(d, axis=0)
    raise KeyError(name)


@pytest.mark.parametrize("name, extra", [
    ("krum", []), ("multi_krum", []), ("median", []), ("trimmed_mean", []), ("geometric_median", []),
    ("centered_clipping", ["aggregator.tau=0.05"]), ("mean", ["aggregator.pre=nnm", "algorithm.weighting=uniform"]),
    ("mean", ["aggregator.pre=clip", "aggregator.clip_norm=0.05", "algorithm.weighting=uniform"])])
def test_the_global_model_moves_by_the_rule_over_the_received_updates(recorded, run_fgx, name, extra):
    run_fgx(*RUN, f"aggregator={name}", *extra)
    pre = next((e.split("=")[1] for e in extra if e.startswith("aggregator.pre=")), "none")
    glob = {r: floats(m[0][2]) for r, m in by_round(recorded, "global_weights").items()}
    ups = by_round(recorded, "update")
    keys = sorted(glob[1])
    vec = lambda d: np.concatenate([d[k].numpy().ravel() for k in keys])     # noqa: E731
    prev, moved = None, 0.0
    for r in sorted(glob)[:-1]:
        x = np.stack([vec(floats(p)) for _, _, p in ups[r]])
        assert len(x) == 4
        want = _np_reference(name, x, 1, prev, pre)
        got = vec(glob[r + 1]) - vec(glob[r])
        assert np.abs(got - want).max() < 1e-5, f"round {r}: {np.abs(got - want).max()}"
        if name != "mean":     # and the rule is not the plain average of what was received
            assert np.abs(got - x.mean(0)).max() > 1e-4
        prev, moved = got, max(moved, np.abs(got).max())
    assert moved > 1e-4
