"""The attacks (fgx/threats, docs/threats.md), checked inside FedAvg runs: what the malicious clients sent
up the channel is the attack's forgery of the round's true updates (the honest clients' untouched), and a
label-flipping client trains on flipped labels only; ALIE and IPM equal ByzFL's on random inputs."""
from __future__ import annotations

import pytest
import torch

from fgx.cli import compose
from fgx.config import ConfigError, validate
from fgx.federation.robust import flatten
from fgx.threats import model_poisoning as mp
from mechanisms import by_round, capture_setup, flat
from mechanisms import byzfl as load_byzfl

RUN = ["dataset=csbm", "dataset.num_nodes=300", "dataset.num_features=8", "partitioner=random",
       "partitioner.num_clients=5", "model=gcn", "model.hidden=8", "algorithm=fedavg", "algorithm.local_steps=2",
       "rounds=3", "eval_every=10", "output.checkpoint=false", "threat.fraction=0.4", "seed=1"]


@pytest.fixture
def tampered(monkeypatch):
    """Every call of a model-poisoning threat's tamper: (round, cids, true updates, what it returned)."""
    calls = []
    real = mp.ModelPoisoning.tamper

    def wrapped(self, cids, deltas, r):
        out = real(self, cids, deltas, r)
        calls.append((r, list(cids), [flat(d) for d in deltas], [flat(d) for d in out], self.malicious))
        return out

    monkeypatch.setattr(mp.ModelPoisoning, "tamper", wrapped)
    return calls


def _expected(name: str, own: torch.Tensor, honest: torch.Tensor, n: int, f: int) -> torch.Tensor | None:
    if name == "sign_flip":
        return -2.5 * own
    if name == "ipm":
        return -0.5 * honest.mean(0)
    if name == "alie":
        return honest.mean(0) + mp.alie_z(n, f) * honest.std(0)
    return None


@pytest.mark.parametrize("name, extra", [("sign_flip", ["threat.scale=2.5"]), ("ipm", ["threat.epsilon=0.5"]),
                                         ("alie", []), ("gaussian", ["threat.std=0.5", "threat.mean=0.1"])])
def test_malicious_clients_send_the_attack_of_the_rounds_true_updates(recorded, run_fgx, tampered, name, extra):
    run_fgx(*RUN, f"threat={name}", *extra)
    ups = by_round(recorded, "update")
    assert len(tampered) == 3
    noise = []
    for r, cids, true, sent, malicious in tampered:
        assert len(malicious) == 2 and set(cids) == set(range(5))
        received = {src: flat(p) for src, _, p in ups[r]}
        bad = [i for i, c in enumerate(cids) if c in malicious]
        honest = torch.stack([true[i] for i in range(len(cids)) if i not in bad])
        for i, c in enumerate(cids):
            assert torch.equal(received[c], sent[i])          # tampered before it went up the channel
            if i not in bad:
                assert torch.equal(sent[i], true[i])          # the honest clients' updates as they trained
                continue
            want = _expected(name, true[i], honest, len(cids), len(bad))
            if want is not None:
                assert (sent[i] - want).abs().max() < 1e-5, f"{name} round {r} client {c}"
            else:
                noise.append(sent[i])
            assert (sent[i] - true[i]).abs().max() > 1e-3
    if name == "gaussian":      # N(0.1, 0.5^2) per coordinate, fresh for each client and round
        z = torch.cat(noise)
        assert abs(float(z.mean()) - 0.1) < 0.02 and abs(float(z.std()) - 0.5) < 0.02
        assert not torch.equal(noise[0], noise[1])


def test_the_malicious_clients_are_the_seeds_and_the_same_for_every_attack(run_fgx, tampered):
    run_fgx(*RUN, "threat=sign_flip")
    run_fgx(*RUN, "threat=ipm", "aggregator=median")
    assert tampered[0][4] == tampered[-1][4] and len(tampered[0][4]) == 2


@pytest.mark.parametrize("seed", [0, 1])
def test_alie_and_ipm_equal_byzfl(seed):
    byzfl = load_byzfl()
    honest = torch.randn(8, 30, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    alie = mp.ALIE(mp.ALIEParams(z=1.5)).forge(honest[0], honest, 10, 2, 1, 0)
    ipm = mp.IPM(mp.IPMParams(epsilon=0.3)).forge(honest[0], honest, 10, 2, 1, 0)
    assert torch.allclose(alie, torch.as_tensor(byzfl.ALittleIsEnough(tau=1.5)(honest.clone())).double(), atol=1e-6)
    assert torch.allclose(ipm, torch.as_tensor(byzfl.InnerProductManipulation(tau=0.3)(honest.clone())).double(),
                          atol=1e-6)


def test_alie_z_is_baruch_et_als_supporter_bound():
    # n = 50, f = 12 (Baruch et al. 2019's example): s = 26 - 12 = 14, z = Phi^-1(36/50) ~ 0.58
    assert abs(mp.alie_z(50, 12) - 0.5828) < 1e-3
    assert abs(mp.alie_z(10, 2) - 0.2533) < 1e-3


def test_a_label_flipping_client_trains_on_flipped_labels_only(monkeypatch, run_fgx):
    from fgx.algorithms.fedavg import FedAvg

    seen = capture_setup(monkeypatch, FedAvg)
    run_fgx(*RUN, "threat=label_flip", "rounds=1")
    algo = seen["algo"]
    malicious = algo.ctx.threat.malicious
    assert len(malicious) == 2
    c = algo.ctx.info.num_classes
    truth = algo.ctx.global_data.y
    for client in algo.ctx.clients:
        d, own = client.data, client.nodes
        y = d.y[: client.num_owned]
        true = truth[own]
        train = d.train_mask[: client.num_owned]
        if client.cid in malicious:
            assert torch.equal(y[train], c - 1 - true[train]) and not torch.equal(y[train], true[train])
            assert torch.equal(y[~train], true[~train])        # validation and test keep their labels
        else:
            assert torch.equal(y, true)


def test_flip_rate_is_reported_at_evaluations(run_fgx):
    import json

    rd = run_fgx(*RUN, "threat=label_flip", "eval_every=1")
    s = json.loads((rd / "summary.json").read_text())
    assert s["threat"]["name"] == "label_flip" and len(s["threat"]["malicious"]) == 2
    assert 0.0 <= s["threat"]["flip_rate"] <= 1.0


def test_a_model_poisoning_threat_the_algorithm_would_ignore_is_refused():
    with pytest.raises(ConfigError) as e:
        validate(compose(["algorithm=feddc", "dataset=cora", "threat=sign_flip"]))
    assert e.value.key == "threat.name" and "would be ignored" in str(e.value)
    validate(compose(["algorithm=feddc", "dataset=cora", "threat=label_flip"]))   # data poisoning needs no hook
    with pytest.raises(ConfigError, match="classification"):
        validate(compose(["algorithm=fedavg", "dataset=cora", "task=link", "threat=label_flip"]))
