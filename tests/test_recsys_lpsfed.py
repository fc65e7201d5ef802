"""LPSFed: Eq. 14 mixing, negatives, an end-to-end run on MovieLens-100K and its determinism."""
import json

import pytest
import torch

from fgx.algorithms.lpsfed import personalized_mix, sample_negatives

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
