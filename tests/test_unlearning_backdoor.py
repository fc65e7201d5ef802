"""Unlearning as a remedy for a backdoor (unlearning.requests.selection=backdoor, fgx/unlearning/backdoor_remedy.py):
the trigger is learnt, the certified node requests remove it, the certificate holds for those requests,
and the triggered rows the ASR is measured on are those exact propagation gives."""
from __future__ import annotations

import json

import numpy as np
import pytest

from fgx.unlearning.backdoor_remedy import BackdoorAttack, BackdoorParams
from fgx.unlearning.propagation import exact_propagation
from tests.test_unlearning import build_server, certified, make_parties


def test_triggered_rows_equal_exact_propagation_of_the_triggered_features():
    """A triggered test node is served with the row exact propagation gives when only its own features
    carry the trigger (the other nodes unchanged), on the preprocessed scale of the poisoned data."""
    parties = make_parties(3, seed=1)
    attack = BackdoorAttack.inject(parties, BackdoorParams(num_poison=6, malicious_fraction=0.4, target_class=0,
                                                           trigger_size=2, trigger_value=4.0),
                                   3, np.random.default_rng(0))
    assert attack.malicious and all(parties[c].y[u] == 0 for c, u in attack.items())
    assert all(np.all(parties[c].x_raw[u, attack.columns] == 4.0) for c, u in attack.items())
    server = build_server(parties, exact=True)
    attack.read_trigger(parties)
    for p in parties:
        ids = p.split_ids("test")[:5]
        rows = attack.triggered_rows(p, ids)
        for k, v in enumerate(ids):
            x = p.current_features().astype(np.float64)
            x[v, attack.columns] = attack.trigger
            exact = exact_propagation(p.prop.adj, x, p.prop.weights, deg=p.prop.deg, dtype=np.float64)[v]
            np.testing.assert_allclose(rows[k], exact, rtol=1e-9, atol=1e-12)
    m = attack.measure(server)
    assert 0.0 <= m["asr"] <= 1.0 and m["triggered_items"] == sum(
        int((p.y[p.split_ids("test")] != 0).sum()) for p in parties)


def test_backdoor_selection_is_for_node_requests(run_fgx, tiny_cfg):
    with pytest.raises(SystemExit, match="unlearning.requests.type.*node"):
        run_fgx(*certified(tiny_cfg), "unlearning=scalegun", "unlearning.requests.selection=backdoor")


def test_certified_unlearning_removes_the_backdoor_on_cora(run_fgx, data_root):
    """On real Cora (the record's preset, seed 0): the poison is learnt (ASR well above the retrained
    model's), the 40 node requests remove it (ASR after near the retrained model's), and every request's
    released model is inside its certificate with its true gradient norm under its bound. Fails when the
    poison is not injected (ASR before = retrained) and when the requests are ignored (ASR stays)."""
    run = run_fgx("+experiment=threat_unlearning", f"data_dir={data_root}", "seed=0")
    out = json.loads((run / "unlearning.json").read_text())
    s = out["summary"]
    assert s["backdoor_removed"] == 40 and out["setup"]["backdoor"]["poisoned_nodes"] == 40
    assert s["backdoor_asr_before"] > 0.5
    assert s["backdoor_asr_before"] - s["backdoor_asr_retrained"] > 0.3           # the poison took
    assert s["backdoor_asr_before"] - s["backdoor_asr_after"] > 0.3               # unlearning removed it
    assert abs(s["backdoor_asr_after"] - s["backdoor_asr_retrained"]) < 0.1
    assert abs(s["backdoor_test_accuracy_after"] - s["backdoor_test_accuracy_retrained"]) < 0.03
    # the guarantee for these requests: nothing released outside the budget, true norm <= bound
    assert s["requests_outside_budget"] == 0 and not s["certificate_failed"] and s["actions_refused"] == 0
    assert s["true_norm_violations"] == 0 and s["bounds_true_le_data_dependent"] == 1.0
    assert s["max_released_bound"] <= s["budget"]
    assert all(r["true_norm"] <= r["bound"] for r in out["requests"])
