import json

import pytest
import torch

from fgx.privacy.clipping import clip_by_global_norm, global_norm


def test_clipping_bounds_the_joint_norm():
    upd = {"a": torch.randn(10, 10) * 5, "b": torch.randn(3) * 5, "n": torch.tensor(3)}
    c = clip_by_global_norm(upd, 2.0)
    assert global_norm(c) == pytest.approx(2.0, rel=1e-5) and torch.equal(c["n"], upd["n"])
    small = {"a": torch.full((2,), 0.1)}
    assert torch.equal(clip_by_global_norm(small, 2.0)["a"], small["a"])


def test_dp_fedavg_epsilon_per_round_matches_opacus(run_fgx, tiny_cfg):
    d = run_fgx(*tiny_cfg, "privacy=dp_fedavg", "algorithm.weighting=uniform", "algorithm.client_fraction=0.67",
                "algorithm.client_sampling=poisson", "privacy.noise_multiplier=1.2", "rounds=3", "eval_every=1")
    rows = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
    eps = [r["epsilon"] for r in rows if r["split"] == "test"]
    assert eps == sorted(eps) and eps[0] > 0
    # an independent accountant (Opacus' RDP analysis) gives the same ε at the same orders
    from dp_accounting.rdp.rdp_privacy_accountant import DEFAULT_RDP_ORDERS
    from opacus.accountants.analysis.rdp import compute_rdp, get_privacy_spent
    rdp = compute_rdp(q=0.67, noise_multiplier=1.2, steps=3, orders=DEFAULT_RDP_ORDERS)
    eps_opacus = get_privacy_spent(orders=DEFAULT_RDP_ORDERS, rdp=rdp, delta=1e-5)[0]
    assert eps[-1] == pytest.approx(eps_opacus, rel=0.02)
    s = json.loads((d / "summary.json").read_text())
    assert s["privacy"]["epsilon"] == pytest.approx(eps[-1])
    assert (s["privacy"]["mechanism"], s["privacy"]["noise_multiplier"]) == ("dp_fedavg", 1.2)
    report = json.loads((d / "privacy.json").read_text())
    assert report["epsilon"] == pytest.approx(eps[-1])
    assert report["params"] == {"noise_multiplier": 1.2, "clip": 1.0, "delta": 1e-5, "sampling_rate": 0.67}
    assert report["accountant"].startswith("fgx.privacy.accountant.RDPAccountant") and report["rounds"] == 3


def test_dp_fedavg_noise_std_on_the_aggregate():
    from types import SimpleNamespace

    from fgx.privacy.dp_fedavg import DPFedAvg, DPFedAvgParams
    m = DPFedAvg(DPFedAvgParams(noise_multiplier=2.0, clip=0.5))
    m.bind(SimpleNamespace(seed=0, params=SimpleNamespace(client_fraction=1.0), clients=[0] * 4))
    out = m.aggregate("update", {"w": torch.zeros(20000)}, num_contributors=4, round=1)
    assert out["w"].std().item() == pytest.approx(2.0 * 0.5 / 4, rel=0.03)


def test_dp_fedavg_refuses_weighted_averaging(tmp_path, monkeypatch, tiny_cfg):
    from fgx.cli import main
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match="algorithm.weighting.*uniform"):
        main(["run", *tiny_cfg, "privacy=dp_fedavg"])


def test_dp_fedavg_accepts_an_algorithm_without_sampling_or_weighting_options():
    """An algorithm that uploads updates but has no client_fraction, client_sampling or weighting
    fields (every client, equally weighted) needs none of dp_fedavg's refusals."""
    from types import SimpleNamespace

    from fgx.config import ConfigError
    from fgx.privacy.dp_fedavg import DPFedAvg, DPFedAvgParams
    params = DPFedAvgParams(noise_multiplier=1.0, clip=1.0)

    def validated(**algorithm_params):
        algo = SimpleNamespace(messages={"update": SimpleNamespace(release=True)})
        return SimpleNamespace(names={"algorithm": "plain"}, entries={"algorithm": SimpleNamespace(obj=algo)},
                               params={"algorithm": SimpleNamespace(**algorithm_params)})
    DPFedAvg.check_config(params, validated())
    with pytest.raises(ConfigError, match="client_sampling"):
        DPFedAvg.check_config(params, validated(client_fraction=0.5))
    with pytest.raises(ConfigError, match="weighting"):
        DPFedAvg.check_config(params, validated(weighting="train_items"))


def test_dp_fedavg_refuses_a_fixed_size_client_draw(tmp_path, monkeypatch, tiny_cfg):
    """The accountant composes Poisson-subsampled Gaussians: a fixed-size draw of clients is not that."""
    from fgx.cli import main
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match="client_sampling"):
        main(["run", *tiny_cfg, "privacy=dp_fedavg", "algorithm.weighting=uniform", "algorithm.client_fraction=0.5"])
    assert not (tmp_path / "outputs").exists()


def test_poisson_client_sampling_is_what_the_accountant_assumes():
    """Each client joins a round independently with probability q (sizes Binomial(N, q), empty rounds
    included), and the server's average is the fixed-denominator sum / (qN) plus noise z*clip/(qN)."""
    from types import SimpleNamespace

    from scipy import stats

    from fgx.algorithms.fedavg import FedAvg
    from fgx.privacy.dp_fedavg import DPFedAvg, DPFedAvgParams
    n, q, rounds = 5, 0.3, 4000
    fake = SimpleNamespace(states=[None] * n, ctx=SimpleNamespace(seed=0),
                           params=SimpleNamespace(client_fraction=q, client_sampling="poisson"))
    draws = [FedAvg.sample_clients(fake, r) for r in range(1, rounds + 1)]
    sizes = torch.bincount(torch.tensor([len(d) for d in draws]), minlength=n + 1).numpy()
    expected = stats.binom.pmf(range(n + 1), n, q) * rounds
    assert stats.chisquare(sizes, expected).pvalue > 1e-3
    assert sizes[0] > 0                                             # empty rounds happen
    fixed = SimpleNamespace(**{**vars(fake), "params": SimpleNamespace(client_fraction=q, client_sampling="fixed")})
    assert {len(FedAvg.sample_clients(fixed, r)) for r in range(1, 50)} == {2}   # not Binomial: refused with dp_fedavg
    m = DPFedAvg(DPFedAvgParams(noise_multiplier=0.0, clip=1.0))
    m.bind(SimpleNamespace(seed=0, params=SimpleNamespace(client_fraction=q), clients=[None] * n))
    out = m.aggregate("update", {"w": torch.full((3,), 2.0)}, num_contributors=3, round=1)   # mean of 3 updates
    assert torch.allclose(out["w"], torch.full((3,), 2.0 * 3 / (q * n)))
    m = DPFedAvg(DPFedAvgParams(noise_multiplier=2.0, clip=0.5))
    m.bind(SimpleNamespace(seed=0, params=SimpleNamespace(client_fraction=q), clients=[None] * n))
    out = m.aggregate("update", {"w": torch.zeros(20000)}, num_contributors=0, round=1)
    assert out["w"].std().item() == pytest.approx(2.0 * 0.5 / (q * n), rel=0.03)


def test_dp_fedavg_state_survives_a_checkpoint():
    """A resumed run goes on with the same noise stream and reports the ε reached before the stop
    (the state goes through torch.save/load(weights_only=True) as a checkpoint does)."""
    import io
    from types import SimpleNamespace

    from fgx.privacy.dp_fedavg import DPFedAvg, DPFedAvgParams
    ctx = SimpleNamespace(seed=3, params=SimpleNamespace(client_fraction=1.0), clients=[0] * 4)

    def fresh():
        m = DPFedAvg(DPFedAvgParams(noise_multiplier=1.0, clip=1.0))
        m.bind(ctx)
        return m

    def noise(m):
        return m.aggregate("update", {"w": torch.zeros(6)}, num_contributors=4, round=2)["w"]

    before = fresh()
    assert before.headline()["epsilon"] == 0.0 and before.report()["epsilon"] == 0.0   # nothing released yet
    noise(before)
    before.on_round_end(1)
    buf = io.BytesIO()
    torch.save(before.state_dict(), buf)
    buf.seek(0)
    after = fresh()
    after.load_state_dict(torch.load(buf, weights_only=True))
    assert after.eps == before.eps > 0
    assert after.accountant.history == before.accountant.history == [(1.0, 1.0, 1)]
    after.on_round_end(2)
    before.on_round_end(2)
    assert after.eps == before.eps == fresh().epsilon(2)       # the resumed accountant goes on from round 1
    expected = noise(before)
    assert not torch.equal(noise(fresh()), expected)      # the stream's position is part of the state
    assert torch.equal(noise(after), expected)


def test_dp_fedavg_refusals_name_the_key_and_why():
    from types import SimpleNamespace

    from fgx.config import ConfigError
    from fgx.privacy.dp_fedavg import DPFedAvg, DPFedAvgParams
    params = DPFedAvgParams(noise_multiplier=1.0, clip=1.0)

    def validated(messages, **algorithm_params):
        algo = SimpleNamespace(messages=messages)
        return SimpleNamespace(names={"algorithm": "gossipy"}, entries={"algorithm": SimpleNamespace(obj=algo)},
                               params={"algorithm": SimpleNamespace(**algorithm_params)})
    with pytest.raises(ConfigError) as err:
        DPFedAvg.check_config(params, validated({"model": SimpleNamespace(release=True)}))
    assert (err.value.key, err.value.value) == ("privacy.name", "dp_fedavg")
    assert "uploads model updates (message 'update'); 'gossipy' does not" in err.value.allowed
    with pytest.raises(ConfigError) as err:
        DPFedAvg.check_config(params, validated({"update": SimpleNamespace(release=True)}, client_fraction=0.5,
                                                client_sampling="fixed"))
    assert (err.value.key, err.value.value) == ("algorithm.client_sampling", "fixed")


def test_dp_fedavg_without_noise_claims_no_finite_epsilon():
    from types import SimpleNamespace

    from fgx.privacy.dp_fedavg import DPFedAvg, DPFedAvgParams
    m = DPFedAvg(DPFedAvgParams(noise_multiplier=0.0, clip=1.0))
    m.bind(SimpleNamespace(seed=0, params=SimpleNamespace(client_fraction=1.0), clients=[None] * 3))
    assert m.epsilon(5) == float("inf")


def test_the_accountant_has_opacus_shape_and_dp_accountings_numbers():
    """fgx.privacy.accountant.RDPAccountant keeps Opacus's history (equal consecutive steps merged) and
    gives dp-accounting's ε for it: one step per round composes as the whole run at once."""
    import dp_accounting
    from dp_accounting import rdp
    from opacus.accountants import RDPAccountant as Opacus

    from fgx.privacy.accountant import RDPAccountant

    ours, theirs = RDPAccountant(), Opacus()
    steps = [(1.1, 0.5)] * 3 + [(0.9, 0.5)] * 2 + [(1.1, 0.5)]
    for nm, q in steps:
        ours.step(noise_multiplier=nm, sample_rate=q)
        theirs.step(noise_multiplier=nm, sample_rate=q)
    assert ours.history == theirs.history == [(1.1, 0.5, 3), (0.9, 0.5, 2), (1.1, 0.5, 1)] and len(ours) == 6
    acc = rdp.RdpAccountant()
    for nm, n in ((1.1, 4), (0.9, 2)):
        acc.compose(dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(0.5, dp_accounting.GaussianDpEvent(nm)), n))
    assert ours.get_epsilon(1e-5) == pytest.approx(acc.get_epsilon(1e-5), rel=1e-9)
    assert ours.get_epsilon(1e-5) == pytest.approx(theirs.get_epsilon(1e-5), rel=0.05)   # Opacus's conversion
    assert RDPAccountant().get_epsilon(1e-5) == 0.0
    copy = RDPAccountant()
    copy.load_state_dict(ours.state_dict())
    assert copy.history == ours.history


def test_dp_fedavg_keeps_one_accountant_across_rounds(run_fgx, tiny_cfg, monkeypatch):
    from fgx.privacy.dp_fedavg import DPFedAvg

    made = []
    real = DPFedAvg.__init__

    def init(self, params):
        real(self, params)
        made.append(self)
    monkeypatch.setattr(DPFedAvg, "__init__", init)
    run_fgx(*tiny_cfg, "privacy=dp_fedavg", "algorithm.weighting=uniform", "privacy.noise_multiplier=1.2",
            "rounds=3", "eval_every=3")
    (m,) = made
    assert m.accountant.history == [(1.2, 1.0, 3)] and m.eps == m.accountant.get_epsilon(m.params.delta)
