"""LPSFed: Eq. 14 mixing, negatives, an end-to-end run on MovieLens-100K and its determinism."""
import json

import numpy as np
import pytest
import torch

from fgx.algorithms.lpsfed import personalized_mix
from fgx.recsys.training import sample_negatives

FAST = ["+experiment=lpsfed_table1_ml100k", "dataset.download=false", "rounds=3", "eval_every=3",
        "partitioner=random_users", "partitioner.num_clients=2", "algorithm.local_epochs=1",
        "algorithm.warmup_rounds=1", "model.frequency=16", "model.dim=16", "model.bias_dim=8"]


def test_eq14_mix_endpoints():
    own = {"w": torch.tensor([1.0, 2.0])}
    mean = {"w": torch.tensor([3.0, 4.0])}
    assert torch.equal(personalized_mix(own, mean, 1.0)["w"], mean["w"])
    assert torch.equal(personalized_mix(own, mean, 0.0)["w"], own["w"])
    assert torch.allclose(personalized_mix(own, mean, 0.25)["w"], torch.tensor([1.5, 2.5]))


def test_negatives_avoid_training_items():
    known = torch.zeros(3, 50, dtype=torch.bool)
    known[0, :40] = True
    neg = sample_negatives(known, torch.tensor([0, 0, 1]), 5, torch.Generator().manual_seed(0))
    assert neg.shape == (3, 5)
    assert (neg[:2] >= 40).all()


@pytest.fixture
def ml_root(data_root):
    if not (data_root / "ml-100k" / "u.data").exists():
        pytest.skip("ml-100k missing")
    return data_root


def test_lpsfed_end_to_end_and_deterministic(run_fgx, ml_root, monkeypatch, tmp_path):
    monkeypatch.setenv("FGX_DATA_DIR", str(tmp_path / "cache"))   # eigenpair cache goes here
    runs = [run_fgx(*FAST, f"data_dir={ml_root}") for _ in range(2)]
    s = [json.loads((r / "summary.json").read_text()) for r in runs]
    assert s[0]["status"] == "completed", s[0].get("error")
    final = s[0]["final"]
    assert 0 < final["ndcg@20"] <= 1 and 0 < final["recall@20"] <= 1
    assert final == s[1]["final"]
    comm = json.loads((runs[0] / "comm.json").read_text())
    assert set(comm["totals"]) <= {"client_stats", "anchor_spectrum", "mlp_params", "scalar_margin",
                                   "scalar_similarity", "personalized_params"}
    assert comm["totals"]["personalized_params"] > 0
    assert list((tmp_path / "cache" / "cache" / "lgcn_eig").glob("*.npz"))
    rows = [json.loads(l) for l in (runs[0] / "lpsfed_clients.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(r["users"] > 0 and r["items"] > 0 and r["group"] in ("LD", "MB", "SS") for r in rows)


def test_node_algorithm_on_ranking_data_is_refused(run_fgx, ml_root):
    with pytest.raises(SystemExit, match="supports the 'ranking' task"):
        run_fgx("dataset=movielens100k", "dataset.download=false", f"data_dir={ml_root}",
                "partitioner=random_users", "model=lgcn", "algorithm=fedavg")


def test_lpsfed_requires_lgcn(run_fgx, ml_root):
    with pytest.raises(SystemExit, match="model"):
        run_fgx("+experiment=lpsfed_table1_ml100k", "dataset.download=false", f"data_dir={ml_root}", "model=gcn")


def test_bc_margin_gradient_switch():
    from fgx.recsys import losses
    bias = torch.tensor([0.3, -0.2], requires_grad=True)
    ang = torch.tensor([2.9, 0.5], requires_grad=True)      # first pair on the π - R̂ branch, second on γξ̂
    losses.bc_margin(bias, ang, 1.0).sum().backward()
    assert ang.grad[0] == -1 and ang.grad[1] == 0 and bias.grad[1] != 0 and bias.grad[0] == 0
    bias.grad = ang.grad = None
    m = losses.bc_margin(bias, ang, 1.0, grad=False)
    assert not m.requires_grad


def test_bpr_uses_its_own_temperature_not_the_bc_one(run_fgx, ml_root, monkeypatch, tmp_path):
    """LPSFed (BPR) is standard BPR (bpr_tau = 1 by default): the BC temperature `tau` must not change it."""
    monkeypatch.setenv("FGX_DATA_DIR", str(tmp_path / "cache"))
    base = [*FAST, f"data_dir={ml_root}", "algorithm=lpsfed_bpr"]
    finals = [json.loads((run_fgx(*base, *extra) / "summary.json").read_text())["final"]
              for extra in ([], ["algorithm.tau=0.05"], ["algorithm.bpr_tau=0.2"])]
    assert finals[0] == finals[1]
    assert finals[0] != finals[2]


def test_code_compat_rho_bar_is_one_minus_rho_over_max():
    """The authors' normalisation: min forced to 0, ρ̄ = 1 - ρ/max ρ, 0.5 when max ρ = 0."""
    from fgx.recsys.spectral import max_similarity, minmax_similarity
    assert np.allclose(max_similarity(np.array([0.5, 1.0, 2.0])), [0.75, 0.5, 0.0])
    assert (max_similarity(np.array([0.0, 0.0])) == 0.5).all()
    assert (max_similarity(np.array([0.3, 0.3])) == 0.0).all()          # equal but non-zero: ρ/max = 1
    assert np.allclose(minmax_similarity(np.array([0.5, 1.0, 2.0])), [1.0, 2 / 3, 0.0])   # Eq. 12 differs
    assert (minmax_similarity(np.array([0.3, 0.3]), tie=0.5) == 0.5).all()


def test_code_compat_single_bin_histogram_kl():
    from fgx.recsys.spectral import code_kl, single_bin_density
    p, q = single_bin_density(np.array([0.0, 0.5, 1.0, 2.0])), single_bin_density(np.array([0.25, 0.0]))
    assert p == pytest.approx(0.5) and q == pytest.approx(4.0)      # 1 / (max - min)
    assert single_bin_density(np.array([1.0, 1.0])) == 1.0             # numpy's range for equal values
    assert code_kl(p, q) == pytest.approx(0.5 * np.log(8))             # |0.5 log(0.5 / 4)|
    assert code_kl(q, p) == pytest.approx(4 * np.log(8))
    assert code_kl(p, p) == 0.0


def test_reference_anchor_sizes():
    from fgx.recsys.spectral import reference_anchor_sizes
    assert reference_anchor_sizes("gnmk", 943, 1682, 80_000, 4) == (236, 420, 5000)     # extra /C on the edges
    m, n, e = reference_anchor_sizes("er", 943, 1682, 80_000, 4)
    assert (m, n) == (236, 420) and e / (m * n) == pytest.approx(20_000 / (m + n) ** 2)


def _per_round(recorded, kind):
    out = {}
    for k, payload, src, dst, r in recorded["sent"]:
        if k == kind:
            out.setdefault(r, []).append(np.asarray(payload, dtype=np.float64))
    return [out[r] for r in sorted(out)]


@pytest.mark.parametrize("extra, anchor_fixed, rho_fixed", [
    ([], False, False),                                                           # paper: G_R every round
    (["algorithm.anchor_regen=once"], True, True),                                # K^R and K^c fixed
    (["algorithm.anchor_regen=once", "algorithm.signal=learned_kernel_x_eigvals"], True, False),
])
def test_anchor_regen_and_learned_kernel_signal(run_fgx, ml_root, monkeypatch, tmp_path, recorded,
                                                extra, anchor_fixed, rho_fixed):
    monkeypatch.setenv("FGX_DATA_DIR", str(tmp_path / "cache"))
    run_fgx(*FAST, f"data_dir={ml_root}", "algorithm.code_compat=false", *extra)   # the preset sets it true
    kr = _per_round(recorded, "anchor_spectrum")       # one copy per client and round
    rho = _per_round(recorded, "scalar_similarity")
    assert len(kr) == len(rho) == 3
    assert all(np.array_equal(a, b) for r in kr for a, b in zip(r, r[1:]))   # one K^R broadcast per round
    same_kr = [np.array_equal(kr[0][0], r[0]) for r in kr[1:]]
    same_rho = [np.array_equal(np.stack(rho[0]), np.stack(r)) for r in rho[1:]]
    assert same_kr == [anchor_fixed] * 2
    assert same_rho == [rho_fixed] * 2


def test_code_compat_run(run_fgx, ml_root, monkeypatch, tmp_path, recorded):
    """code_compat: one scalar K^R (single-bin density) generated once, ρ̄ = 1 - ρ/max ρ."""
    monkeypatch.setenv("FGX_DATA_DIR", str(tmp_path / "cache"))
    run = run_fgx(*FAST, f"data_dir={ml_root}", "algorithm=lpsfed_bpr", "algorithm.code_compat=true")
    kr = _per_round(recorded, "anchor_spectrum")
    assert all(a.shape == (1,) and np.array_equal(a, kr[0][0]) for r in kr for a in r)
    rows = [json.loads(l) for l in (run / "lpsfed_similarity.jsonl").read_text().splitlines()]
    assert rows
    for row in rows:
        rho = np.array(row["rho"])
        assert np.allclose(row["rho_bar"], 1 - rho / rho.max())


@pytest.mark.parametrize("override", ["algorithm.signal=kernel", "algorithm.anchor_regen=always",
                                      "algorithm.rho_tie=1.5", "algorithm.code_compat=maybe"])
def test_invalid_similarity_options_are_config_errors(run_fgx, ml_root, override):
    with pytest.raises(SystemExit, match=override.split("=")[0].split(".")[1]):
        run_fgx("+experiment=lpsfed_table1_ml100k", "dataset.download=false", f"data_dir={ml_root}", override)


def test_learned_kernel_signal_needs_a_kernel(run_fgx, ml_root):
    with pytest.raises(SystemExit, match="signal"):
        run_fgx("+experiment=lpsfed_table1_ml100k", "dataset.download=false", f"data_dir={ml_root}",
                "algorithm.signal=learned_kernel_x_eigvals", "model.layers=0")
