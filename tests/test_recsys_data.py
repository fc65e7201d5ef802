"""MovieLens loading, malformed lines, the per-user split, filters and the bipartite partitioners."""
import logging

import numpy as np
import pytest
import torch

from fgx.data.base import DataEnv, DataError
from fgx.data.movielens import ML100KParams, load_movielens100k, read_ratings
from fgx.partition.base import build_clients
from fgx.partition.random_users import RandomUsersParams, random_users
from fgx.partition.spectral_bipartite import SpectralBipartiteParams, spectral_bipartite
from fgx.recsys.bipartite import client_interactions, densify, k_core, min_user_interactions, per_user_split


@pytest.fixture(scope="module")
def ml100k(tmp_path_factory):
    from tests.conftest import SHARED_DATA
    if not (SHARED_DATA / "ml-100k" / "u.data").exists():
        pytest.skip("ml-100k not in shared data")
    return load_movielens100k(ML100KParams(download=False), DataEnv(SHARED_DATA, 0, logging.getLogger()))


def test_ml100k_offline_counts_and_split(ml100k):
    d, info = ml100k.data, ml100k.info
    assert (d.num_users, d.num_items, d.edge_index.size(1)) == (943, 1682, 100000)
    assert info.task == "ranking" and info.main_metric == "ndcg@20"
    frac = [float(m.float().mean()) for m in (d.edge_train_mask, d.edge_val_mask, d.edge_test_mask)]
    assert abs(frac[0] - 0.8) < 0.01 and abs(frac[1] - 0.1) < 0.01 and abs(frac[2] - 0.1) < 0.01
    users = d.edge_index[0]
    # every user keeps training interactions and has a test interaction (all ML-100K users have >= 20)
    assert torch.unique(users[d.edge_train_mask]).numel() == 943
    assert torch.unique(users[d.edge_test_mask]).numel() == 943


def test_malformed_line_names_file_and_line(tmp_path):
    f = tmp_path / "u.data"
    f.write_text("1\t2\t5\t100\n3\tx\t4\t101\n")
    with pytest.raises(DataError, match=r"u\.data, line 2"):
        read_ratings(f, r"\t", min_fields=3)
    f.write_text("1\t2\t5\t100\n\n7\n")
    with pytest.raises(DataError, match=r"line 3"):
        read_ratings(f, r"\t", min_fields=3)


def test_missing_file_without_download(tmp_path):
    with pytest.raises(DataError, match="u.data not found"):
        load_movielens100k(ML100KParams(download=False), DataEnv(tmp_path, 0, logging.getLogger()))


def test_filters_and_split_small():
    u = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2])
    i = np.array([0, 1, 2, 0, 1, 0, 1, 2, 3])
    x = densify(u, i)
    core = k_core(x, 2)
    assert core.num_items == 3 and core.num_users == 3          # item 3 has one interaction
    assert min_user_interactions(x, 3).num_users == 2
    s = per_user_split(x, 0.1, 0.1, 0)
    assert (s[x.users == 1] == 0).all()                         # < 3 interactions: all train
    assert (s[x.users == 0] == 2).sum() == 1 and (s[x.users == 0] == 1).sum() == 1


@pytest.mark.parametrize("part", ["spectral", "random", "interconnected"])
def test_partitioners_own_users_once_and_their_items(ml100k, part):
    d, info = ml100k.data, ml100k.info
    if part == "spectral":
        owned = spectral_bipartite(SpectralBipartiteParams(num_clients=4), d, info, 0)
    elif part == "random":
        owned = random_users(RandomUsersParams(num_clients=4), d, info, 0)
    else:
        from fgx.partition.interconnected import InterconnectedParams, interconnected
        owned = interconnected(InterconnectedParams(num_clients=4), d, info, 0)
        sizes = [int((o < d.num_users).sum()) for o in owned]
        assert max(sizes) - min(sizes) <= 1
    users = torch.cat([o[o < d.num_users] for o in owned])
    assert users.numel() == 943 and torch.unique(users).numel() == 943
    clients = build_clients(d, info, owned)
    total_train = 0
    for c in clients:
        ci = client_interactions(c, d.num_users)
        assert ci.train.size(1) > 0 and ci.test.size(1) > 0
        assert int(ci.train[1].max()) < ci.num_items and int(ci.test[1].max()) < ci.num_items
        total_train += ci.train.size(1)
    assert total_train == int(d.edge_train_mask.sum())         # every training interaction is held once


def test_synthetic_bipartite_skew_and_seed():
    from fgx.data.synthetic_bipartite import SyntheticBipartiteParams, generate, load_synthetic_bipartite
    p = SyntheticBipartiteParams(num_users=400, num_items=600, communities=3, size_ratio=0.5, degree_ratio=0.5)
    u, i = generate(p, 0)
    u2, _ = generate(p, 0)
    assert np.array_equal(u, u2)
    deg = np.bincount(u, minlength=400)
    # community 0 (first 4/7 of users) is bigger and denser than community 2 (last 1/7)
    assert deg[:228].mean() > 2 * deg[-57:].mean()
    ds = load_synthetic_bipartite(p, DataEnv(None, 0, logging.getLogger()))
    assert ds.info.task == "ranking" and ds.info.source == "generated"


def test_ego_graph_clients_center_on_seed(ml100k):
    from fgx.partition.ego_graph import EgoGraphParams, ego_graph
    d = ml100k.data
    owned = ego_graph(EgoGraphParams(num_clients=3, users_per_client=50), d, ml100k.info, 0)
    assert len(owned) == 3
    for o in owned:
        assert int((o < d.num_users).sum()) == 50
    for c in build_clients(d, ml100k.info, owned):
        assert client_interactions(c, d.num_users).train.size(1) > 0


def test_lightgcn_files(tmp_path):
    from fgx.data.lightgcn_files import LightGCNFilesParams, load_lightgcn_files
    tr, te = tmp_path / "train.txt", tmp_path / "test.txt"
    tr.write_text("0 0 1 2 3 4 5 6 7 8 9\n1 2 3 4\n2 5\n")
    te.write_text("0 10\n1 5\n")
    ds = load_lightgcn_files(LightGCNFilesParams(str(tr), str(te)), DataEnv(tmp_path, 0, logging.getLogger()))
    d = ds.data
    assert (d.num_users, d.num_items, d.edge_index.size(1)) == (3, 11, 16)
    assert int(d.edge_test_mask.sum()) == 2 and int(d.edge_val_mask.sum()) == 2   # users 0 and 1
    tr.write_text("0 1 2\n1 x\n")
    with pytest.raises(DataError, match=r"train\.txt, line 2"):
        load_lightgcn_files(LightGCNFilesParams(str(tr), str(te)), DataEnv(tmp_path, 0, logging.getLogger()))
