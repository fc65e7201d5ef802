import math

import numpy as np
import pytest

from fgx.privacy.metric_dp_accounting import (OPACUS_ORDERS, epsilon_table, exact_gaussian_epsilon,
                                              knn_distance_percentiles, metric_dp_epsilon)

# CE-FedGNN Table 6 (HI-Small, k = 50, δ = 1e-4), copied from the paper.
TABLE6_RHO = {50: 0.0533, 90: 0.1466, 95: 0.1845, 99: 0.2793, 100: 0.8913}
TABLE6_SIGMAS = [0.3, 0.5, 0.7, 1, 2, 3, 5]
TABLE6 = {
    50: [12.881, 6.815, 4.556, 3.005, 1.367, 0.869, 0.492],
    90: [51.794, 25.017, 15.941, 10.097, 4.356, 2.719, 1.522],
    95: [73.245, 34.476, 21.641, 13.524, 5.724, 3.547, 1.973],
    99: [141.039, 63.316, 38.576, 23.426, 9.501, 5.787, 3.173],
    100: [1059.705, 424.668, 237.899, 131.634, 45.275, 25.478, 12.936],
}


def test_table6_all_35_entries_within_1e_3():
    rows = epsilon_table(TABLE6_RHO, TABLE6_SIGMAS, releases=200, delta=1e-4)
    n = 0
    for row in rows:
        for s, published in zip(TABLE6_SIGMAS, TABLE6[row["percentile"]]):
            assert abs(row["eps"][float(s)] - published) < 1e-3, (row["percentile"], s)
            n += 1
    assert n == 35


def closed_form(rho, sigma, steps, delta):
    """Independent check without any library: RDP of the Gaussian at q = 1 is α·steps/(2z²),
    converted with Canonne–Kamath–Steinke over the same discrete grid."""
    z = sigma / rho
    return min(steps * a / (2 * z * z) + math.log((a - 1) / a) - (math.log(delta) + math.log(a)) / (a - 1)
               for a in OPACUS_ORDERS)


@pytest.mark.parametrize("rho,sigma,steps", [(0.1466, 1.0, 200), (0.5, 2.0, 37), (2.0, 5.0, 1000)])
def test_accountant_matches_closed_form_and_opacus(rho, sigma, steps):
    eps = metric_dp_epsilon(rho, sigma, steps, 1e-4)
    assert eps == pytest.approx(closed_form(rho, sigma, steps, 1e-4), rel=1e-9)
    from opacus.accountants.analysis.rdp import compute_rdp, get_privacy_spent
    rdp = compute_rdp(q=1.0, noise_multiplier=sigma / rho, steps=steps, orders=list(OPACUS_ORDERS))
    assert eps == pytest.approx(get_privacy_spent(orders=list(OPACUS_ORDERS), rdp=rdp, delta=1e-4)[0], rel=1e-9)


def test_exact_epsilon_is_below_rdp():
    # at sample rate 1 the exact (PLD) ε is ~5% below RDP (z = 1.1, T = 100, δ = 1e-5: 79.28 vs 83.10)
    ex = exact_gaussian_epsilon(1.0, 1.1, 100, 1e-5)
    rd = metric_dp_epsilon(1.0, 1.1, 100, 1e-5)
    assert ex == pytest.approx(79.28, abs=0.05) and ex < rd


def test_knn_percentiles_exclude_self():
    # two tight clusters of 3 points: the nearest *other* point is always within the cluster
    x = np.array([[1, 0], [1, 0.001], [1, -0.001], [0, 1], [0.001, 1], [-0.001, 1]], dtype=float)
    r = knn_distance_percentiles(x, k=1)
    assert r["k"] == 1 and 0 < r["rho"][100] < 0.01
    r2 = knn_distance_percentiles(x, k=3)   # the 3rd other point lies in the other cluster
    assert r2["rho"][50] > 1.0


def test_knn_percentiles_on_sampled_queries_measure_against_every_node():
    """``queries``: the distances of a seeded random subset of nodes, still to all nodes."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(40, 4))
    full = knn_distance_percentiles(x, k=2)
    part = knn_distance_percentiles(x, k=2, queries=10, seed=7)
    assert (part["queries"], part["nodes"], full["queries"]) == (10, 40, 40)
    assert part == knn_distance_percentiles(x, k=2, queries=10, seed=7)
    assert part["rho"] != knn_distance_percentiles(x, k=2, queries=10, seed=8)["rho"]
    # brute force on the same 10 nodes: the 2nd nearest other node among all 40
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    picked = np.random.default_rng(7).choice(40, size=10, replace=False)
    d = np.linalg.norm(unit[picked, None, :] - unit[None, :, :], axis=-1)
    second = np.sort(d, axis=1)[:, 2]                 # column 0 is the node itself
    assert part["rho"][50] == pytest.approx(np.percentile(second, 50))
    assert part["rho"][100] == pytest.approx(second.max())


def test_no_release_costs_no_privacy():
    assert metric_dp_epsilon(1.0, 1.0, 0, 1e-5) == 0.0


def test_bad_inputs_raise():
    with pytest.raises(ValueError):
        metric_dp_epsilon(0.0, 1.0, 10, 1e-5)
    with pytest.raises(ValueError):
        knn_distance_percentiles(np.zeros((1, 3)))


def test_cli_prints_table6(capsys):
    import json as _json

    from fgx.cli import main
    rc = main(["privacy", "metric-dp", "--rho", "0.0533", "0.1466", "--percentiles", "50", "90",
               "--sigma", "0.3", "1", "--releases", "200", "--delta", "1e-4", "--json"])
    assert rc == 0
    out = _json.loads(capsys.readouterr().out)
    assert out["rows"][1]["eps"]["1.0"] == pytest.approx(10.097, abs=1e-3)
    assert main(["privacy", "metric-dp", "--rho", "0.1", "--sigma", "1", "--releases", "10", "--delta", "2"]) == 2


def test_named_order_grids_are_the_libraries_defaults():
    from dp_accounting import rdp
    from opacus.accountants import RDPAccountant

    from fgx.privacy.metric_dp_accounting import orders_for
    assert orders_for("opacus_default") == tuple(RDPAccountant.DEFAULT_ALPHAS)
    assert orders_for("dp_accounting_default") == tuple(rdp.RdpAccountant().orders)
    assert orders_for([2, 8]) == (2.0, 8.0)
    with pytest.raises(ValueError, match="unknown RDP order grid 'x'"):
        orders_for("x")


def test_epsilon_table_uses_the_given_orders_and_the_exact_column_on_request():
    from fgx.privacy.metric_dp_accounting import epsilon_table, exact_gaussian_epsilon, metric_dp_epsilon
    coarse = (2.0, 4.0)
    (row,) = epsilon_table({50: 0.8}, [0.5, 1.0], 3, 1e-5, orders=coarse, exact=True)
    assert row["eps"] == {s: metric_dp_epsilon(0.8, s, 3, 1e-5, coarse) for s in (0.5, 1.0)}
    assert row["eps"][0.5] != metric_dp_epsilon(0.8, 0.5, 3, 1e-5)          # the grid matters here
    assert row["eps_exact"] == {s: exact_gaussian_epsilon(0.8, s, 3, 1e-5) for s in (0.5, 1.0)}
    assert "eps_exact" not in epsilon_table({50: 0.8}, [0.5], 3, 1e-5)[0]


def test_metric_dp_fixed_steps_needs_its_count():
    from fgx.config import ConfigError
    from fgx.privacy.metric_dp import MetricDPParams
    with pytest.raises(ConfigError) as err:
        MetricDPParams(steps="fixed").validate("privacy")
    assert (err.value.key, err.value.value, err.value.allowed) == (
        "privacy.fixed_steps", None, "an integer >= 1 when steps=fixed")
    MetricDPParams(steps="fixed", fixed_steps=3).validate("privacy")


def test_knn_percentiles_use_at_most_the_other_nodes():
    from fgx.privacy.metric_dp_accounting import knn_distance_percentiles
    x = np.arange(5, dtype=np.float64)[:, None] * np.ones((1, 2))
    out = knn_distance_percentiles(x, k=50)
    assert out["k"] == 4 and out["nodes"] == 5
