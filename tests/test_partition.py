import pytest
import torch

from fgx.data.base import DataEnv, DataError
from fgx.data.csbm import CsbmParams, load_csbm
from fgx.partition.base import build_clients, partition_stats
from fgx.partition.label_dirichlet import LabelDirichletParams, label_dirichlet_partition
from fgx.partition.louvain import LouvainParams, louvain_partition
from fgx.partition.metis import MetisParams, metis_partition
from fgx.partition.random import RandomParams, random_partition
import logging

PARTS = [
    (random_partition, RandomParams(num_clients=5)),
    (louvain_partition, LouvainParams(num_clients=5)),
    (metis_partition, MetisParams(num_clients=5)),
    (label_dirichlet_partition, LabelDirichletParams(num_clients=5, alpha=0.3)),
]


@pytest.fixture(scope="module")
def graph():
    return load_csbm(CsbmParams(num_nodes=400, num_features=8, avg_degree=6), DataEnv(None, 0, logging.getLogger()))


@pytest.mark.parametrize("fn,p", PARTS, ids=lambda x: getattr(x, "__name__", ""))
def test_every_node_owned_once_and_cross_edges_counted(graph, fn, p):
    data, info = graph.data, graph.info
    parts = fn(p, data, info, seed=0)
    assert len(parts) == 5
    owned = torch.cat(parts)
    assert owned.numel() == data.num_nodes and torch.unique(owned).numel() == data.num_nodes
    clients = build_clients(data, info, parts)
    stats = partition_stats(data, info, clients)
    owner = torch.empty(data.num_nodes, dtype=torch.long)
    for c, nodes in enumerate(parts):
        owner[nodes] = c
    ei = data.edge_index
    crossing = int((owner[ei[0]] != owner[ei[1]]).sum()) // 2
    assert stats["cross_client_edges"] == crossing
    # every stored edge is internal to exactly one client or crosses and is held by both clients
    assert sum(c.data.edge_index.size(1) for c in clients) + int((owner[ei[0]] != owner[ei[1]]).sum()) == ei.size(1)
    assert sum(c.data.cross_edge_index.size(1) for c in clients) == 2 * int((owner[ei[0]] != owner[ei[1]]).sum())
    assert stats["ls_ratio"] >= 1.0


def test_halo_nodes_carry_no_features_or_labels(graph):
    parts = random_partition(RandomParams(num_clients=3), graph.data, graph.info, 0)
    for c in build_clients(graph.data, graph.info, parts):
        assert c.num_halo > 0
        halo = slice(c.num_owned, c.num_owned + c.num_halo)
        assert torch.all(c.data.x[halo] == 0) and torch.all(c.data.y[halo] == -1)
        assert not c.data.train_mask[halo].any()
        assert torch.equal(c.data.x[: c.num_owned], graph.data.x[c.nodes])
        # cross edges join an owned node and a halo node
        ce = c.data.cross_edge_index
        own = ce < c.num_owned
        assert torch.all(own[0] ^ own[1])


def test_more_clients_than_nodes_is_a_clear_error(graph):
    with pytest.raises(DataError, match="num_clients"):
        random_partition(RandomParams(num_clients=10_000), graph.data, graph.info, 0)


def test_partitions_are_deterministic(graph):
    for fn, p in PARTS:
        a = fn(p, graph.data, graph.info, seed=3)
        b = fn(p, graph.data, graph.info, seed=3)
        assert all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("fn,p", PARTS, ids=lambda x: getattr(x, "__name__", ""))
def test_every_client_gets_training_nodes(graph, fn, p):
    """Regression: the random partitioner once reused the split's permutation, so one client held
    every training node and the others none."""
    parts = fn(p, graph.data, graph.info, seed=0)
    for nodes in parts:
        frac = graph.data.train_mask[nodes].float().mean().item()
        assert 0.05 < frac < 0.5, frac   # the split trains on 20 %


def test_file_partition_reproduces_the_written_clients(graph, tmp_path):
    """partitioner=file hands back exactly the clients written to the file, in every format."""
    import json

    import numpy as np

    from fgx.partition.file import FileParams, file_partition

    data, info = graph.data, graph.info
    parts = louvain_partition(LouvainParams(num_clients=4), data, info, seed=3)
    owner = torch.full((data.num_nodes,), -1, dtype=torch.long)
    for c, nodes in enumerate(parts):
        owner[nodes] = c
    owner[parts[2][:5]] = -1                      # unowned nodes are allowed
    files = {"a.pt": lambda p: torch.save(owner, p), "d.pt": lambda p: torch.save({"client": owner, "x": 1}, p), "a.npy": lambda p: np.save(p, owner.numpy()),
             "a.json": lambda p: p.write_text(json.dumps({"client": owner.tolist()})),
             "a.txt": lambda p: p.write_text("\n".join(map(str, owner.tolist())))}
    for name, write in files.items():
        write(tmp_path / name)
        got = file_partition(FileParams(path=str(tmp_path / name), num_clients=4), data, info, seed=0)
        assert len(got) == 4
        for c in range(4):
            assert torch.equal(got[c].sort().values, (owner == c).nonzero().view(-1)), name


def test_file_partition_refuses_bad_files(graph, tmp_path):
    from fgx.config import ConfigError
    from fgx.partition.file import FileParams, file_partition

    data, info = graph.data, graph.info
    with pytest.raises(ConfigError, match="partitioner.path"):
        FileParams(path=str(tmp_path / "missing.pt")).validate("partitioner")
    bad = tmp_path / "short.txt"
    bad.write_text("0\n1\n")
    with pytest.raises(DataError, match="2 entries"):
        file_partition(FileParams(path=str(bad)), data, info, seed=0)
    gap = tmp_path / "gap.pt"
    torch.save(torch.where(torch.arange(data.num_nodes) % 2 == 0, 0, 2), gap)
    with pytest.raises(DataError, match=r"clients \[1\] own no nodes"):
        file_partition(FileParams(path=str(gap)), data, info, seed=0)
    floats = tmp_path / "f.pt"
    torch.save(torch.zeros(data.num_nodes), floats)
    with pytest.raises(DataError, match="integer client ids"):
        file_partition(FileParams(path=str(floats)), data, info, seed=0)
    torch.save(torch.zeros(data.num_nodes, dtype=torch.long), floats)
    with pytest.raises(DataError, match="names 1 clients"):
        file_partition(FileParams(path=str(floats), num_clients=3), data, info, seed=0)


def test_louvain_gives_every_client_training_nodes_on_csbm_seeds_0_to_19():
    """dataset=csbm brings louvain with 10 clients; before the size cap seeds 2, 6, 16, 18 and 19 left a
    client with isolated nodes only (no training node). The cap (delta) is what prevents it."""
    import logging

    from fgx.data.base import DataEnv
    from fgx.data.csbm import CsbmParams, load_csbm

    for seed in range(20):
        ds = load_csbm(CsbmParams(), DataEnv(None, seed, logging.getLogger()))
        p = LouvainParams()
        parts = louvain_partition(p, ds.data, ds.info, seed)
        cap = ds.data.num_nodes // p.num_clients - p.delta
        sizes = [len(x) for x in parts]
        assert max(sizes) - min(sizes) <= cap, (seed, sizes)
        train = [int(ds.data.train_mask[x].sum()) for x in parts]
        assert min(train) > 0, (seed, train)


def test_louvain_cap_cuts_large_communities_into_connected_pieces():
    import networkx as nx

    from fgx.partition.louvain import cap_communities

    g = nx.path_graph(10)
    g.add_edges_from([(20, 21)])
    g.add_nodes_from([30])
    pieces = cap_communities(g, [list(range(10)), [20, 21], [30]], cap=4)
    assert pieces == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9], [20, 21], [30]]
    shuffled = nx.relabel_nodes(nx.path_graph(8), {i: [5, 0, 7, 2, 6, 1, 4, 3][i] for i in range(8)})
    for piece in cap_communities(shuffled, [list(range(8))], cap=3):
        assert nx.is_connected(shuffled.subgraph(piece)), piece


def test_file_partition_config_errors_name_the_problem(tmp_path, monkeypatch):
    """Each refusal of partitioner.path says what is wrong with it (mutation survivors: the checks
    were reached but any ConfigError passed)."""
    from fgx.config import ConfigError
    from fgx.partition.file import FileParams

    def refusal(path):
        with pytest.raises(ConfigError) as e:
            FileParams(path=path).validate("partitioner")
        return e.value

    e = refusal("")
    assert (e.key, e.value) == ("partitioner.path", "")
    assert e.allowed == "the path of a partition file (one client id per node)"
    e = refusal(str(tmp_path / "clients.csv"))
    assert (e.key, e.value) == ("partitioner.path", str(tmp_path / "clients.csv"))
    assert e.allowed == "a file ending in one of ['.pt', '.npy', '.json', '.txt']"
    e = refusal(str(tmp_path / "missing.pt"))
    assert (e.key, e.value) == ("partitioner.path", str(tmp_path / "missing.pt"))
    assert e.allowed == "an existing partition file"
    (tmp_path / "folder.pt").mkdir()
    assert refusal(str(tmp_path / "folder.pt")).allowed == "an existing partition file"
    (tmp_path / "ok.txt").write_text("0\n")
    FileParams(path=str(tmp_path / "ok.txt")).validate("partitioner")          # accepted: no error
    monkeypatch.setenv("HOME", str(tmp_path))
    FileParams(path="~/ok.txt").validate("partitioner")                        # ~ is the user's home


def test_file_partition_data_errors_name_the_file_and_the_fault(graph, tmp_path):
    import numpy as np

    from fgx.partition.file import FileParams, file_partition, read_assignment

    data, info = graph.data, graph.info
    n = data.num_nodes

    def refusal(path, **kw):
        with pytest.raises(DataError) as e:
            file_partition(FileParams(path=str(path), **kw), data, info, seed=0)
        return str(e.value)

    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a torch file")
    msg = refusal(junk)
    assert msg.startswith(f"partition file {junk}: cannot read one client id per node (") and "Error: " in msg
    # files are read without unpickling: a pickled numpy array in a .pt, an object array in a .npy
    pickled = tmp_path / "pickled.pt"
    torch.save(np.arange(n) % 2, pickled)
    assert "(UnpicklingError: Weights only load failed" in refusal(pickled)
    objects = tmp_path / "objects.npy"
    np.save(objects, np.array([0, 1] * (n // 2), dtype=object), allow_pickle=True)
    assert "(ValueError: Object arrays cannot be loaded when allow_pickle=False)" in refusal(objects)
    flat = tmp_path / "two_d.npy"
    np.save(flat, np.zeros((2, 3), dtype=np.int64))
    assert refusal(flat) == (f"partition file {flat}: expected a flat list of integer client ids, got "
                             f"torch.int64 of shape (2, 3)")
    flags = tmp_path / "flags.pt"
    torch.save(torch.zeros(n, dtype=torch.bool), flags)
    assert "got torch.bool of shape" in refusal(flags)
    short = tmp_path / "short.json"
    short.write_text("[0, 1]")
    assert refusal(short) == (f"partition file {short}: 2 entries, but dataset {info.name} has {n} nodes "
                              f"(one client id per node, -1 for none)")
    below = torch.zeros(n, dtype=torch.long)
    below[3] = -2
    torch.save(below, tmp_path / "below.pt")
    assert refusal(tmp_path / "below.pt") == (f"partition file {tmp_path / 'below.pt'}: client ids must be >= 0 "
                                              f"(or -1 for an unowned node), found -2")
    torch.save(torch.full((n,), -1), tmp_path / "none.pt")
    assert refusal(tmp_path / "none.pt") == f"partition file {tmp_path / 'none.pt'}: no node is assigned to a client"
    two = torch.arange(n) % 2
    torch.save(two, tmp_path / "two.pt")
    assert refusal(tmp_path / "two.pt", num_clients=3) == (
        f"partition file {tmp_path / 'two.pt'} names 2 clients, but partitioner.num_clients=3")
    # -1 marks a node no client owns; every other node lands in its client, in node order
    owner = two.clone()
    owner[:4] = -1
    torch.save(owner, tmp_path / "gaps.pt")
    parts = file_partition(FileParams(path=str(tmp_path / "gaps.pt"), num_clients=2), data, info, seed=0)
    assert [p.tolist() for p in parts] == [list(range(4, n, 2)), list(range(5, n, 2))]
    assert read_assignment(tmp_path / "gaps.pt").dtype == torch.long
    (tmp_path / "list.json").write_text("[0, 1, 1]")
    assert read_assignment(tmp_path / "list.json").tolist() == [0, 1, 1]
    (tmp_path / "ids.txt").write_text("2\n0 1\n")
    assert read_assignment(tmp_path / "ids.txt").tolist() == [2, 0, 1]


def test_metis_parts_is_pymetis_on_the_symmetric_adjacency_with_the_run_seed():
    """fgx's CSR for METIS equals one built independently with scipy (undirected, no self loops,
    a trailing isolated node kept), and the run's seed reaches METIS."""
    import numpy as np
    import pymetis
    import scipy.sparse as sp

    from fgx.partition.metis import metis_parts

    g = load_csbm(CsbmParams(num_nodes=400, num_features=8, avg_degree=6), DataEnv(None, 0, logging.getLogger()))
    ei = torch.cat([g.data.edge_index, torch.tensor([[7, 9], [7, 3]])], dim=1)   # a self loop, a one-way edge
    n = 401                                                                          # node 400 has no edge
    a = sp.coo_matrix((np.ones(ei.size(1)), (ei[0].numpy(), ei[1].numpy())), shape=(n, n)).tocsr()
    a = ((a + a.T) > 0).astype(np.int8)
    a.setdiag(0)
    a.eliminate_zeros()
    a.sort_indices()
    results = set()
    for seed in range(3):
        got = metis_parts(ei, n, 5, seed)
        _, want = pymetis.part_graph(5, xadj=a.indptr, adjncy=a.indices, options=pymetis.Options(seed=seed))
        assert got.tolist() == list(want), seed
        results.add(tuple(got.tolist()))
    assert len(results) > 1                      # the seed changes METIS's answer on this graph
    one = metis_parts(ei, n, 1, 0)
    assert one.dtype == np.int64 and one.shape == (n,) and not one.any()


def test_random_users_errors_and_one_user_per_client():
    from torch_geometric.data import Data

    from fgx.partition.random_users import RandomUsersParams, check_bipartite, random_users

    # 3 users (0-2), items 3-5; three clients get exactly one user each, plus that user's items
    data = Data(edge_index=torch.tensor([[0, 1, 2, 2], [3, 4, 4, 5]]), num_nodes=6)
    data.num_users = 3
    parts = random_users(RandomUsersParams(num_clients=3), data, None, seed=0)
    owned_users = sorted(int(p[0]) for p in parts)
    assert owned_users == [0, 1, 2]
    items = {int(p[0]): sorted(p[1:].tolist()) for p in parts}
    assert items == {0: [3], 1: [4], 2: [4, 5]}
    with pytest.raises(DataError) as e:
        random_users(RandomUsersParams(num_clients=4), data, None, seed=0)
    assert str(e.value) == "client 3 got no users (partitioner.num_clients=4 too large?)"
    with pytest.raises(DataError) as e:
        check_bipartite(Data(edge_index=torch.zeros(2, 0, dtype=torch.long), num_nodes=2), "random_users")
    assert str(e.value) == "partitioner 'random_users' needs a user-item (ranking) dataset"


def test_metis_overlapping_accepts_multiples_of_samples_per_part_only():
    from fgx.config import ConfigError
    from fgx.partition.metis_overlapping import MetisOverlappingParams

    MetisOverlappingParams(num_clients=10, samples_per_part=5).validate("partitioner")
    with pytest.raises(ConfigError) as e:
        MetisOverlappingParams(num_clients=12, samples_per_part=5).validate("partitioner")
    assert (e.value.key, e.value.value) == ("partitioner.num_clients", 12)
    assert e.value.allowed == "a multiple of samples_per_part=5 (e.g. 10, 30, 50)"


def test_cap_communities_cuts_breadth_first_from_the_lowest_id_and_keeps_every_node():
    import networkx as nx

    from fgx.partition.louvain import cap_communities

    g = nx.Graph()
    g.add_edges_from([(0, 3), (0, 1), (1, 2), (3, 4), (5, 6)])   # node 0 lists neighbour 3 before 1
    # breadth-first with sorted neighbours: 0, 1, 3, 2, 4, then the separate part 5, 6
    assert cap_communities(g, [[0, 1, 2, 3, 4, 5, 6]], cap=2) == [[0, 1], [2, 3], [4, 5], [6]]
    assert cap_communities(g, [[0, 1], [2, 3, 4]], cap=3) == [[0, 1], [2, 3, 4]]   # at the cap: kept whole


def _path_graph(task, symmetric=True):
    """0-1-2-3-4 and 3-5: clients A [0, 1], B [2, 3], C [4]; node 5 is owned by nobody."""
    from torch_geometric.data import Data

    from fgx.data.base import DatasetInfo

    one_way = torch.tensor([[0, 1, 2, 3, 3], [1, 2, 3, 4, 5]])
    ei = torch.cat([one_way, one_way.flip(0)], dim=1) if symmetric else one_way
    data = Data(x=torch.arange(12.0).view(6, 2), y=torch.tensor([0, 1, 0, 1, 0, 1]), edge_index=ei, num_nodes=6)
    return data, DatasetInfo("path", task, 2, "accuracy", "generated")


def test_client_views_and_partition_statistics_on_a_hand_counted_graph():
    from fgx.partition.base import build_clients, partition_stats

    parts = [torch.tensor([0, 1]), torch.tensor([3, 2]), torch.tensor([4])]
    data, info = _path_graph("node")
    clients = build_clients(data, info, parts)
    assert [c.halo.tolist() for c in clients] == [[2], [1, 4, 5], [3]]
    # undirected node task: each edge counted once
    assert [(c.stats["internal_edges"], c.stats["cross_edges"]) for c in clients] == [(1, 1), (1, 3), (0, 1)]
    assert clients[1].data.edge_index.tolist() == [[0, 1], [1, 0]]            # 2-3 in B's local ids
    stats = partition_stats(data, info, clients)
    assert {k: v for k, v in stats.items() if k != "clients"} == {
        "num_clients": 3, "nodes_unowned": 1, "nodes_owned_more_than_once": 0,
        "cross_client_edges": 3, "ls_ratio": 4.0}                            # 1-2, 3-4, 3-5; 4 / 1
    assert type(stats["cross_client_edges"]) is int
    # an edge task counts directed edges, even where the list is symmetric
    data, info = _path_graph("edge")
    clients = build_clients(data, info, parts)
    assert [(c.stats["internal_edges"], c.stats["cross_edges"]) for c in clients] == [(2, 2), (2, 6), (0, 2)]
    assert partition_stats(data, info, clients)["cross_client_edges"] == 6
    data, info = _path_graph("edge", symmetric=False)
    assert partition_stats(data, info, build_clients(data, info, parts))["cross_client_edges"] == 3
    # a node owned twice: counted, and the cut is not defined
    data, info = _path_graph("node")
    overlap = partition_stats(data, info, build_clients(data, info, [torch.tensor([0, 1, 2]), parts[1], parts[2]]))
    assert (overlap["nodes_owned_more_than_once"], overlap["nodes_unowned"], overlap["cross_client_edges"]) == (1, 1, None)


def test_build_clients_refuses_empty_partitions_with_their_reason():
    from fgx.partition.base import build_clients

    data, info = _path_graph("node")
    with pytest.raises(DataError) as e:
        build_clients(data, info, [])
    assert str(e.value) == "the partitioner produced no clients"
    with pytest.raises(DataError) as e:
        build_clients(data, info, [torch.tensor([0]), torch.tensor([], dtype=torch.long)])
    assert str(e.value) == "client 1 owns no nodes (more clients than the graph can fill?)"


def test_client_statistics_are_the_hand_counted_ones():
    from torch_geometric.data import Data

    from fgx.data.base import DatasetInfo
    from fgx.homophily import adjusted_homophily
    from fgx.partition.base import build_clients

    parts = [torch.tensor([0, 1]), torch.tensor([2, 3]), torch.tensor([4])]
    data, info = _path_graph("node")
    data.x = data.x.double()
    data.train_mask = torch.tensor([1, 0, 1, 0, 1, 0], dtype=torch.bool)
    data.val_mask = torch.tensor([0, 1, 0, 0, 0, 0], dtype=torch.bool)
    data.test_mask = torch.tensor([0, 0, 0, 1, 0, 1], dtype=torch.bool)
    data.edge_y = torch.ones(data.edge_index.size(1))        # edge labels on a node task are not counted
    a, b, c = build_clients(data, info, parts)
    assert a.stats == {"client": 0, "nodes": 2, "halo_nodes": 1, "internal_edges": 1, "cross_edges": 1, "edges": 2,
                       "label_counts": [1, 1], "edge_homophily": 0.0, "node_homophily": 0.0,
                       "adjusted_homophily": adjusted_homophily(a.data.edge_index, a.data.y),
                       "train": 1, "val": 1, "test": 0}
    assert all(type(a.stats[k]) is int for k in ("internal_edges", "cross_edges", "edges"))
    assert c.stats["label_counts"] == [1, 0]                   # every class counted, also absent ones
    assert a.data.num_owned == 2 and a.data.x.dtype == torch.float64
    assert a.data.x.tolist() == [[0.0, 1.0], [2.0, 3.0], [0.0, 0.0]] and a.data.y.tolist() == [0, 1, -1]
    # one class: still counted; no classes (regression, a [N, 1] target): no label statistics
    one = build_clients(data, DatasetInfo("path", "node", 1, "accuracy", "generated"), parts)[2]
    assert one.stats["label_counts"] == [1]
    reg = Data(x=data.x, y=torch.arange(6.0).view(6, 1), edge_index=data.edge_index, num_nodes=6)
    r = build_clients(reg, DatasetInfo("path", "node", 0, "mse", "generated"), parts)[0]
    assert "label_counts" not in r.stats and r.data.y.tolist() == [[0.0], [1.0], [-1.0]]
    bare = Data(x=data.x, edge_index=data.edge_index, num_nodes=6)        # no labels, no masks
    assert set(build_clients(bare, info, parts)[0].stats) == {
        "client", "nodes", "halo_nodes", "internal_edges", "cross_edges", "edges"}
    # edge task: positive edge labels among the client's internal and cross edges, no label statistics
    data, info = _path_graph("edge")
    data.edge_y = torch.tensor([1, 1, 0, 0, 0, 1, 0, 0, 0, 0])  # A holds edges 0, 5 (internal), 1, 6 (cross)
    a = build_clients(data, info, parts)[0]
    assert a.stats == {"client": 0, "nodes": 2, "halo_nodes": 1, "internal_edges": 2, "cross_edges": 2, "edges": 4,
                       "positive_edges": 3}


def test_as_many_clients_as_nodes_is_allowed_and_one_more_is_refused():
    from fgx.partition.base import check_num_clients

    check_num_clients(6, 6)                                   # one node each
    with pytest.raises(DataError) as e:
        check_num_clients(7, 6)
    assert str(e.value) == "partitioner.num_clients=7 is larger than the graph's 6 nodes"


def _reference_client_edges(ei, n, nodes):
    """build_clients' edges as a whole-graph scan computes them: internal and cross edge ids (sorted)
    and the halo, the definition the per-node lookup must match."""
    owned = torch.zeros(n, dtype=torch.bool)
    owned[nodes] = True
    so, do = owned[ei[0]], owned[ei[1]]
    internal, cross = (so & do).nonzero().view(-1), (so ^ do).nonzero().view(-1)
    remote = torch.where(so[cross], ei[1, cross], ei[0, cross])
    return internal, cross, torch.unique(remote)


@pytest.mark.parametrize("directed", [False, True])
def test_client_edges_from_the_per_node_lookup_equal_a_whole_graph_scan(directed):
    """Overlapping clients, self-loops, parallel edges, isolated nodes and (directed) one-way edges:
    each client's internal and cross edge ids, halo and local edge lists are a full scan's."""
    from torch_geometric.data import Data
    from torch_geometric.utils import to_undirected

    from fgx.data.base import DatasetInfo
    from fgx.partition.base import build_clients

    g = torch.Generator().manual_seed(5)
    n = 60
    ei = torch.randint(0, n - 5, (2, 150), generator=g)            # nodes 55..59 isolated
    ei = torch.cat([ei, torch.tensor([[3, 3, 7], [3, 3, 8]])], 1)   # a repeated self-loop, a parallel edge
    if not directed:
        ei = to_undirected(ei, num_nodes=n)
    data = Data(x=torch.randn(n, 4, generator=g), y=torch.randint(0, 3, (n,), generator=g), edge_index=ei,
                num_nodes=n)
    info = DatasetInfo(name="t", task="node", num_classes=3, main_metric="accuracy", source="generated")
    parts = [torch.randperm(n, generator=g)[:k] for k in (1, 10, 25, 40, 60)]   # overlapping, one whole graph
    for nodes, c in zip(parts, build_clients(data, info, parts)):
        internal, cross, halo = _reference_client_edges(ei, n, torch.unique(nodes))
        assert torch.equal(c.data.global_edge_id, internal) and torch.equal(c.data.cross_global_edge_id, cross)
        assert torch.equal(c.halo, halo)
        ids = torch.cat([c.nodes, c.halo])
        assert torch.equal(ids[c.data.edge_index], ei[:, internal])
        assert torch.equal(ids[c.data.cross_edge_index], ei[:, cross])
