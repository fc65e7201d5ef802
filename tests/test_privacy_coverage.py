"""The coverage rule (fgx/privacy/base.py): a run whose privacy mechanism claims a budget is refused
before any work when the algorithm's clients send a message kind the mechanism does not cover,
unless the config marks the kind public; privacy.json lists what the budget covers. The walk below
takes every registered algorithm x privacy mechanism pair, so new algorithms and mechanisms are
checked automatically (a new task needs a tiny config in tests/test_privacy_audit.py)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from fgx.cli import compose, conf_component_name, main
from fgx.config import ConfigError, validate
from fgx.privacy.base import CLIENT_DIRECTIONS, algorithm_messages, coverage
from fgx.registry import ALGORITHMS, PRIVACY
from test_privacy_audit import ALGO_CFG, TASK_CFG

REPO = Path(__file__).resolve().parents[1]


def preset_of(name: str) -> str:
    """The conf/algorithm preset of a registered algorithm (the file of the same name, else the first
    preset that selects it)."""
    files = sorted((REPO / "conf" / "algorithm").glob("*.yaml"))
    same = [f.stem for f in files if f.stem == name]
    return same[0] if same else next(f.stem for f in files if conf_component_name(f) == name)


# adafgl's first half of the rounds is its FedAvg extractor: one round would send no update at all
ROUNDS = {"adafgl": 2}


def job(algo: str, mech: str, *extra: str) -> list[str]:
    task = (ALGORITHMS.get(algo).meta.get("tasks") or ("node",))[0]
    fields = {f.name for f in dataclasses.fields(ALGORITHMS.get(algo).params or object)} \
        if dataclasses.is_dataclass(ALGORITHMS.get(algo).params) else set()
    # what the mechanism itself needs: dp_fedavg calibrates its noise for uniformly weighted updates
    mech_cfg = {"dp_fedavg": ["algorithm.weighting=uniform"] if "weighting" in fields else [],
                "metric_dp": ["privacy.k=5"]}.get(mech, [])
    mech_fields = {f.name for f in dataclasses.fields(PRIVACY.get(mech).params)}
    # an algorithm's privacy.* settings (e.g. mf_dsgd's correlation) apply to the mechanisms that have the key
    algo_cfg = [o for o in ALGO_CFG.get(algo, [])
                if not o.startswith("privacy.") or o.split("=")[0].split(".")[1] in mech_fields]
    return [*TASK_CFG[task], f"algorithm={preset_of(algo)}", *algo_cfg, f"privacy={mech}",
            *mech_cfg, f"rounds={ROUNDS.get(algo, 1)}", "eval_every=1", "output.checkpoint=false", *extra]


def outcome(overrides: list[str]):
    """(validated, None) or (None, the ConfigError)."""
    try:
        return validate(compose(overrides)), None
    except ConfigError as e:
        return None, e


PAIRS = [(a, m) for a in ALGORITHMS.names() for m in PRIVACY.names()]


def walk() -> list[tuple[str, str, list[str], object]]:
    """Every pair, as run: accepted as is, or accepted once the kinds the error names are declared
    public, or refused for a reason of its own. Returns the accepted (algo, mech, overrides, validated)."""
    accepted = []
    for algo, mech in PAIRS:
        entry = PRIVACY.get(mech).obj
        overrides = job(algo, mech)
        v, err = outcome(overrides)
        algo_params = v.params["algorithm"] if v is not None else None
        messages = algorithm_messages(ALGORITHMS.get(algo).obj, algo_params) if algo_params is not None \
            else ALGORITHMS.get(algo).obj.messages
        cov = coverage(entry, PRIVACY.get(mech).params(), messages)
        if entry.accounts and cov.uncovered:
            # refused, and the error names every kind the mechanism does not cover
            assert v is None and err.key == "privacy.name", (algo, mech)
            for kind in cov.uncovered:
                assert repr(kind) in str(err), (algo, mech, str(err))
            overrides = job(algo, mech, f"privacy.public_messages=[{','.join(cov.uncovered)}]")
            v, err = outcome(overrides)
            assert err is None or err.key != "privacy.name" or "covers" not in str(err), (algo, mech, str(err))
        if v is not None:
            accepted.append((algo, mech, overrides, v))
    return accepted


@pytest.fixture(scope="module")
def accepted_pairs():
    return walk()


def test_every_pair_is_refused_naming_the_uncovered_kinds_or_accepted_with_nothing_uncovered(accepted_pairs):
    accepted = accepted_pairs
    names = {(a, m) for a, m, _, _ in accepted}
    assert {(a, "none") for a in ALGORITHMS.names() if (a, "none") in names}     # the walk is not empty
    for algo, mech, _, v in accepted:
        messages = algorithm_messages(v.entries["algorithm"].obj, v.params["algorithm"])
        cov = coverage(v.entries["privacy"].obj, v.params["privacy"], messages)
        if cov.accounts:
            assert not cov.uncovered and cov.covered, (algo, mech)
            for kind in cov.covered:       # a covered kind passes through the mechanism
                assert messages[kind].release
    # the pairs the paper presets use are accepted
    assert ("fedavg", "dp_fedavg") in names and ("ce_fedgnn", "metric_dp") in names


def test_ce_fedgnn_with_dp_fedavg_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["run", "algorithm=ce_fedgnn", "privacy=dp_fedavg", "dataset=aml_tiny"])
    msg = str(e.value.code)
    assert "privacy.name='dp_fedavg'" in msg and "['embeddings', 'grad_estimator']" in msg
    assert "privacy.public_messages=[embeddings,grad_estimator]" in msg
    assert not (tmp_path / "outputs").exists()


def test_unknown_public_message_kind_is_a_config_error():
    _, err = outcome(job("fedavg", "dp_fedavg", "algorithm.weighting=uniform", "privacy.public_messages=[updates]"))
    assert err is not None and err.key == "privacy.public_messages" and "'update'" in str(err)
    assert err.value == ["updates"]


def run_and_check(tmp_path, algo: str, mech: str, overrides: list[str], v) -> None:
    """One round; privacy.json lists the covered kinds, and every kind the clients actually sent
    is covered, declared public, or raw data the dataset declares public."""
    run_dir = tmp_path / f"{algo}-{mech}"
    assert main(["run", *overrides, f"hydra.run.dir={run_dir}"]) == 0, (algo, mech)
    priv = json.loads((run_dir / "privacy.json").read_text())["messages"]
    summary = json.loads((run_dir / "summary.json").read_text())
    messages = algorithm_messages(v.entries["algorithm"].obj, v.params["algorithm"])
    cov = coverage(v.entries["privacy"].obj, v.params["privacy"], messages)
    assert priv["epsilon_covers"] == (list(cov.covered) if cov.accounts else [])
    assert priv["public_by_config"] == list(cov.public) and priv["not_covered"] == list(cov.uncovered)
    assert summary["privacy"]["covers"] == priv["epsilon_covers"]
    sent = json.loads((run_dir / "comm.json").read_text())["messages"]
    for kind in sent:
        if messages[kind].direction in CLIENT_DIRECTIONS:
            ok = priv["epsilon_covers"] + priv["public_by_config"] + priv["raw_data"]
            assert kind in ok or not cov.accounts, (algo, mech, kind)
    if cov.accounts:
        assert set(sent) & set(priv["epsilon_covers"]), (algo, mech, "no covered kind was sent")


def test_every_accepted_pair_reports_what_its_budget_covers(tmp_path, monkeypatch, accepted_pairs):
    """One round of every accepted pair (tiny data; ~10 s for all of them)."""
    monkeypatch.chdir(tmp_path)
    assert any(PRIVACY.get(m).obj.accounts for _, m, _, _ in accepted_pairs)
    for algo, mech, overrides, v in accepted_pairs:
        run_and_check(tmp_path, algo, mech, overrides, v)
    priv = json.loads((tmp_path / "ce_fedgnn-metric_dp" / "privacy.json").read_text())["messages"]
    assert priv["epsilon_covers"] == ["embeddings"]
    assert priv["public_by_config"] == ["grad_estimator", "update"]
    assert json.loads((tmp_path / "fedavg-none" / "privacy.json").read_text())["messages"]["epsilon_covers"] == []


def test_coverage_puts_each_kind_in_exactly_one_bucket():
    """The rule on a hand-made message table: server-to-client, raw, covered (claimed, released and
    accounted), public by config, or uncovered (a claimed kind not routed through the mechanism is
    uncovered too)."""
    from types import SimpleNamespace

    from fgx.federation.channel import Message

    class Accounting:
        name, accounts = "acc", True

        @classmethod
        def covers(cls, params):
            return {"update", "unrouted"}

    class NotAccounting(Accounting):
        name, accounts = "none", False

    messages = {"update": Message("up", release=True), "unrouted": Message("up"), "emb": Message("peer", release=True),
                "x": Message("up", raw=True, reason="public features"), "model": Message("down"),
                "stats": Message("any")}
    cov = coverage(Accounting, SimpleNamespace(public_messages=["stats"]), messages)
    assert (cov.covered, cov.public, cov.raw, cov.uncovered, cov.server) == (
        ("update",), ("stats",), ("x",), ("emb", "unrouted"), ("model",))
    assert cov.as_dict()["server_to_client"] == ["model"] and cov.as_dict()["epsilon_covers"] == ["update"]
    none = coverage(NotAccounting, SimpleNamespace(), messages)
    assert none.covered == () and none.uncovered == ("emb", "stats", "unrouted", "update") and not none.accounts
    assert none.as_dict(features_public=True)["raw_data_sent"] is True
    assert none.as_dict()["note"] == "no privacy mechanism: every message kind is sent as computed"
    assert none.as_dict()["epsilon_covers"] == []
    assert cov.as_dict()["note"].startswith("the budget covers every release of the epsilon_covers kinds")
