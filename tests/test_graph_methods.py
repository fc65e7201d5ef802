"""Graph-level federated methods inside tiny runs: GCFL's sharing of the GIN layers, GCFL+'s
DTW split of diverging update-norm sequences, FedStar's shared structure encoder."""
from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
import torch

from fgx.federation.client import Objective

from mechanisms import capture_setup

GROUPS = ["dataset=graph_synth", "dataset.groups=2", "dataset.num_graphs=120", "partitioner=cross_dataset",
          "partitioner.clients_per_dataset=3", "model.hidden=8", "model.layers=2"]


def rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def scaled_objective(self, chosen, weights, r):
    """FedAvg's client objective, whose update is scaled after training: clients 3-5's updates grow every
    round, so their sequences of update norms diverge from clients 0-2's, whose directions stay as they were."""
    return Scaled(r)


@dataclass
class Scaled(Objective):
    r: int

    def finish(self, state, delta):
        f = 1.0 if state.cid < 3 else 20.0 * self.r
        for v in delta.values():
            if v.is_floating_point():
                v.mul_(f)


SPLIT = ["rounds=4", "eval_every=4", "algorithm.warmup_rounds=1", "algorithm.seq_length=3", "algorithm.eps1=1e9",
         "algorithm.eps2=0", "algorithm.local_steps=2"]


def test_gcfl_plus_splits_the_clients_whose_update_norm_sequences_diverge(run_fgx, monkeypatch):
    from fgx.algorithms.gcfl_plus import GCFLPlus, dtw_distances

    monkeypatch.setattr(GCFLPlus, "client_objective", scaled_objective)
    rd = run_fgx("algorithm=gcfl_plus", *GROUPS, *SPLIT)
    clusters = [r["clusters"] for r in rows(rd / "gcfl_clusters.jsonl")]
    # no split before every client has seq_length norms; then the two trends are cut apart
    assert clusters[0] == clusters[1] == [[0, 1, 2, 3, 4, 5]]
    assert sorted(clusters[2]) == [[0, 1, 2], [3, 4, 5]] and sorted(clusters[3]) == [[0, 1, 2], [3, 4, 5]]
    dtw = rows(rd / "gcfl_plus_dtw.jsonl")
    assert [d["round"] for d in dtw] == [3]
    D = torch.tensor(dtw[0]["distances"])
    assert D[:3, 3:].min() > 10 * max(D[:3, :3].max(), D[3:, 3:].max())
    assert torch.allclose(torch.tensor(dtw_distances([[1.0, 2.0], [1.0, 3.0]], False)),
                          torch.tensor([[0.0, 1.0], [1.0, 0.0]], dtype=torch.double))
    # whether and when it split, beside the accuracy (issue #66): summary.json and `fgx report`
    diag = json.loads((rd / "summary.json").read_text())["diagnostics"]
    assert diag["first_split_round"]["last"] == 3 and diag["clusters"]["last"] == 2


def test_the_report_shows_whether_and_when_gcfl_split(run_fgx, monkeypatch, capsys):
    from fgx.algorithms.gcfl_plus import GCFLPlus
    from fgx.cli import main

    monkeypatch.setattr(GCFLPlus, "client_objective", scaled_objective)
    split = run_fgx("algorithm=gcfl_plus", *GROUPS, *SPLIT)
    never = run_fgx("algorithm=gcfl_plus", *GROUPS, *SPLIT[:-3], "algorithm.eps1=0")   # a mean norm below 0: never
    capsys.readouterr()
    assert main(["report", str(split), str(never), "--by", "algorithm.eps1"]) == 0
    lines = [l for l in capsys.readouterr().out.splitlines() if l.startswith("|")]
    cols = [c.strip() for c in lines[0].strip("|").split("|")]
    rows_ = {r[0]: dict(zip(cols, r)) for r in ([c.strip() for c in l.strip("|").split("|")] for l in lines[2:])}
    assert "accuracy" in cols, lines
    assert rows_["1000000000.0"]["first_split_round"] == "3.0000" and rows_["1000000000.0"]["clusters"] == "2.0000", lines
    assert rows_["0"]["first_split_round"] == "-" and rows_["0"]["clusters"] == "1.0000", lines


def test_gcfl_cosine_cut_does_not_see_the_norm_trend(run_fgx, monkeypatch):
    """The same updates under GCFL's cut (cosines ignore the norms): not the two groups. So the test
    above fails when GCFL+'s DTW step is replaced by GCFL's."""
    from fgx.algorithms.gcfl import GCFL
    from fgx.algorithms.gcfl_plus import GCFLPlus

    monkeypatch.setattr(GCFLPlus, "client_objective", scaled_objective)
    monkeypatch.setattr(GCFLPlus, "bipartition", GCFL.bipartition)
    rd = run_fgx("algorithm=gcfl_plus", *GROUPS, *SPLIT)
    assert sorted(rows(rd / "gcfl_clusters.jsonl")[2]["clusters"]) != [[0, 1, 2], [3, 4, 5]]


def test_gcfl_on_graphs_shares_the_gin_layers_only(run_fgx, monkeypatch, recorded):
    """As the authors' code: the clusters' messages hold the message-passing layers; every client keeps
    its own input layer and head, and scores with them and its cluster's layers."""
    from fgx.algorithms.gcfl import GCFL

    seen = capture_setup(monkeypatch, GCFL, "observe")
    run_fgx("algorithm=gcfl", *GROUPS, "rounds=2", "eval_every=2")
    kinds = {kind: payload for kind, payload, *_ in recorded["sent"]}
    assert set(kinds["cluster_weights"]) == set(kinds["update"])
    assert kinds["update"] and all(k.startswith("convs.") for k in kinds["update"])
    algo = seen["algo"]
    clients = recorded["clients"]
    models = [algo.model_for(c).state_dict() for c in clients]
    cluster = algo.cluster_models[0].state_dict()
    for m in models:
        assert all(torch.equal(m[k], cluster[k]) for k in cluster if k.startswith("convs."))
    assert not torch.equal(models[0]["readout.weight"], models[1]["readout.weight"])
    assert not torch.equal(models[0]["pre.weight"], models[4]["pre.weight"])


def test_fedstar_averages_the_structure_encoder_and_keeps_the_feature_encoder(run_fgx, monkeypatch, recorded):
    from fgx.algorithms.fedstar import FedStar

    seen = capture_setup(monkeypatch, FedStar)
    run_fgx("algorithm=fedstar", *GROUPS, "rounds=2", "eval_every=2", "model.n_rw=4", "model.n_dg=4")
    sent = [(kind, payload) for kind, payload, *_ in recorded["sent"]]
    structure = ("embedding_s.", "convs_s.")
    assert sent and all(k.startswith(structure) for _, p in sent for k in p)       # nothing else leaves
    algo = seen["algo"]
    models = [algo.model_for(c).state_dict() for c in recorded["clients"]]
    server = algo.global_model.state_dict()
    keys = list(server)
    shared = [k for k in keys if k.startswith(structure)]
    personal = [k for k in keys if not k.startswith(structure) and server[k].is_floating_point()]
    assert shared and personal
    for m in models:
        assert all(torch.equal(m[k], server[k]) for k in shared)
    for k in ("pre.weight", "convs.0.nn.0.weight", "Whp.weight", "readout.weight"):
        assert len({m[k].sum().item() for m in models}) == len(models), k      # each client its own


def test_fedstar_structural_encoding_is_the_authors():
    """Random-walk landing probabilities diag((A D^-1)^k), k = 1..n_rw, and the degree one-hot clipped
    to 1..n_dg, graph by graph (a path of 3 nodes and a triangle here)."""
    from torch_geometric.data import Data

    from fgx.algorithms.fedstar import structural_encoding

    ei = torch.tensor([[0, 1, 1, 2, 3, 4, 4, 5, 5, 3], [1, 0, 2, 1, 4, 3, 5, 4, 3, 5]])
    view = Data(edge_index=ei, num_nodes=6, graph=torch.tensor([0, 0, 0, 1, 1, 1]), graph_y=torch.tensor([0, 1]))
    enc = structural_encoding(view, 3, 2)
    for nodes in ([0, 1, 2], [3, 4, 5]):
        n = len(nodes)
        A = torch.zeros(n, n)
        for s, d in ei.t().tolist():
            if s in nodes:
                A[nodes.index(s), nodes.index(d)] = 1
        M = A / A.sum(0, keepdim=True)          # A D^-1
        P = torch.eye(n)
        for k in range(3):
            P = P @ M
            assert torch.allclose(enc[nodes, k], P.diagonal(), atol=1e-6)
    assert enc[:, 3:].tolist() == [[1, 0], [0, 1], [1, 0], [0, 1], [0, 1], [0, 1]]


SSP = [*GROUPS, "model.hidden=8", "model.heads=2", "model.layers=1"]


def test_fedssp_graph_shares_the_spectral_encoders_only(run_fgx, monkeypatch, recorded):
    """Generic spectral knowledge: the eigenvalue and filter encoders are averaged and identical on every
    client; the transformer, filter decoder, convolutions, input layer, head and preference are each
    client's own. Nothing else is sent but the representation means and their consensus."""
    from fgx.algorithms.fedssp_graph import FedSSPGraph

    seen = capture_setup(monkeypatch, FedSSPGraph)
    run_fgx("algorithm=fedssp_graph", *SSP, "rounds=2", "eval_every=2")
    kinds = {}
    for kind, payload, *_ in recorded["sent"]:
        kinds.setdefault(kind, payload)
    assert set(kinds) == {"global_weights", "update", "consensus", "global_consensus"}
    assert set(kinds["update"]) == set(kinds["global_weights"])
    assert kinds["update"] and all(k.startswith(("eig_encoder.", "filter_encoder.")) for k in kinds["update"])
    assert not any("running" in k for k in kinds["update"])             # BN statistics stay local
    algo = seen["algo"]
    models = [algo.model_for(c).state_dict() for c in recorded["clients"]]
    for k in kinds["update"]:
        assert all(torch.equal(m[k], models[0][k]) for m in models), k
    for k in ("atom.0.weight", "mha.in_proj_weight", "decoder.weight", "convs.0.pre_ffn.0.weight",
              "classifier.weight", "preference"):
        assert len({m[k].sum().item() for m in models}) == len(models), k


def test_fedssp_graph_preference_pulls_client_means_to_the_consensus(run_fgx):
    """Personalised preference: with the consensus term the clients' representation means gather around
    the global consensus; without it (tau 0) they stay apart."""
    spread = {}
    for tau in (0.0, 1000.0):
        rd = run_fgx("algorithm=fedssp_graph", *SSP, "rounds=6", "eval_every=6", f"algorithm.tau_weight={tau}")
        spread[tau] = [r for r in rows(rd / "metrics.jsonl") if r["split"] == "test"][-1]["consensus_spread"]
    assert spread[1000.0] < 0.5 * spread[0.0]


def test_fedssp_graph_round_without_clients_keeps_the_consensus_and_logs_no_spread(run_fgx, monkeypatch, recorded):
    """A Poisson draw may pick no client: the round sends nothing, the consensus stays unset and the
    spread is logged as missing (NaN, null in metrics.jsonl), not as a number."""
    from fgx.algorithms.fedssp_graph import FedSSPGraph

    seen = capture_setup(monkeypatch, FedSSPGraph)
    rd = run_fgx("algorithm=fedssp_graph", *SSP, "rounds=2", "eval_every=1", "algorithm.client_sampling=poisson",
                 "algorithm.client_fraction=0.01")          # seed 0: no client in either round
    assert not recorded["sent"] and seen["algo"].consensus is None
    assert [r["consensus_spread"] for r in rows(rd / "metrics.jsonl")] == [None] * 4


def test_ssp_edge_bases_are_spectral_filters():
    """Each head's basis on edge (i, j) is (U diag(f_h(λ)) U^T)_ij over that edge's graph only."""
    from torch_geometric.data import Data

    from fgx.models.ssp import SSP as Model, SSPParams, spectral_cache

    ei = torch.tensor([[0, 1, 1, 2, 3, 4, 4, 5, 5, 3, 2, 0], [1, 0, 2, 1, 4, 3, 5, 4, 3, 5, 0, 2]])
    view = Data(x=torch.randn(6, 3), edge_index=ei, num_nodes=6, graph=torch.tensor([0, 0, 0, 1, 1, 1]),
                graph_y=torch.tensor([0, 1]))
    view.spectral = spectral_cache(view)
    m = Model(SSPParams(hidden=8, heads=2, layers=1), 3, 2).eval()
    f = m.filters(view.spectral)                                         # [6 eigenvalues, 2 heads]
    seen = {}

    def grab_input(module, args):
        seen["bases"] = args[0]

    m.filter_encoder.register_forward_pre_hook(grab_input)
    m(view)
    for lo in (0, 3):
        A = torch.zeros(3, 3)
        for s, d in ei.t().tolist():
            if lo <= s < lo + 3:
                A[s - lo, d - lo] = 1
        lam, U = torch.linalg.eigh(torch.diag(A.sum(1)) - A)
        assert torch.allclose(view.spectral["eig"][lo:lo + 3], lam)
        for h in range(2):
            F = U @ torch.diag(f[lo:lo + 3, h]) @ U.T
            for e, (s, d) in enumerate(ei.t().tolist()):
                if lo <= s < lo + 3:
                    assert torch.allclose(seen["bases"][e, 1 + h], F[s - lo, d - lo], atol=1e-5)


def test_gcfl_plus_standardised_dtw_ignores_each_sequence_scale():
    """GCFL+'s `seq_length`-normalised sequences: divided by their own standard deviation, a sequence and
    its double are at DTW distance 0; unstandardised they are not (seed-4 mutation sample)."""
    from fgx.algorithms.gcfl_plus import dtw_distances

    seqs = [[1.0, 2.0, 4.0], [2.0, 4.0, 8.0], [4.0, 1.0, 2.0]]
    d = dtw_distances(seqs, standardize=True)
    assert d[0, 1] == pytest.approx(0.0, abs=1e-9) and d[0, 2] > 0.1
    assert dtw_distances(seqs, standardize=False)[0, 1] > 1.0


def test_ssp_attention_by_size_buckets_equals_padding_every_graph_to_the_largest():
    """FedSSP's transformer over each graph's eigenvalues runs per bucket of similar-size graphs (issue #66:
    padding to the client's largest graph made a Mutagenicity step ~40 s); in eval mode its filters equal
    those of one attention call over every graph padded to the largest, and buckets pad far less."""
    import networkx as nx
    from torch_geometric.data import Data
    from torch_geometric.utils import from_networkx

    from fgx.models.ssp import SSP as Model, SSPParams, spectral_cache

    sizes = [3, 4, 5, 9, 10, 12, 30, 31, 80]
    graphs = [from_networkx(nx.gnp_random_graph(n, 0.3, seed=n)) for n in sizes]
    offs = torch.tensor([0] + sizes).cumsum(0)
    ei = torch.cat([g.edge_index + offs[i] for i, g in enumerate(graphs)], 1)
    view = Data(x=torch.randn(sum(sizes), 3), edge_index=ei, num_nodes=sum(sizes),
                graph=torch.arange(len(sizes)).repeat_interleave(torch.tensor(sizes)), graph_y=torch.zeros(len(sizes)))
    c = spectral_cache(view)
    torch.manual_seed(0)
    m = Model(SSPParams(hidden=8, heads=2, layers=1), 3, 2).eval()
    got = m.filters(c)
    # the reference: every graph padded to the largest, one attention call
    eig = m.eig_encoder(c["eig"])
    tok_graph, G, big = view.graph, len(sizes), max(sizes)
    pad = eig.new_zeros(G, big, eig.size(1))
    pad[tok_graph, c["tok_pos"]] = eig
    mask = torch.ones(G, big, dtype=torch.bool)
    mask[tok_graph, c["tok_pos"]] = False
    q = m.mha_norm(pad)
    att, _ = m.mha(q, q, q, key_padding_mask=mask, need_weights=False)
    pad = pad + att
    pad = pad + m.eig_ffn(m.ffn_norm(pad))
    want = m.decoder(pad[tok_graph, c["tok_pos"]])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    padded = sum(rows * length ** 2 for rows, length in c["bucket_shape"])
    assert padded < 0.2 * G * big ** 2 and sum(r for r, _ in c["bucket_shape"]) == G


def flipped_objective(self, chosen, weights, r):
    """Clients 3-5's updates are sent negated: two groups whose updates point in opposite directions."""
    return Flipped()


@dataclass
class Flipped(Objective):
    def finish(self, state, delta):
        if state.cid >= 3:
            for v in delta.values():
                if v.is_floating_point():
                    v.neg_()


def test_gcfl_splits_at_the_minimum_cut_of_the_received_updates_cosine_similarities(run_fgx, monkeypatch, recorded):
    """GCFL's split (issue 67 (c)): the two new clusters are the bipartition of the clients whose
    cross-cluster cosine similarity (mapped to (1 + cos)/2 >= 0) is smallest, found here by trying all
    31 bipartitions of the six updates the server received; with clients 3-5 sending negated updates
    that is {0, 1, 2} | {3, 4, 5}. A cut that kept dissimilar clients together fails both."""
    import itertools

    from fgx.algorithms.gcfl import GCFL

    monkeypatch.setattr(GCFL, "client_objective", flipped_objective)
    rd = run_fgx("algorithm=gcfl", *GROUPS, "rounds=1", "eval_every=1", "algorithm.warmup_rounds=0",
                 "algorithm.eps1=1e9", "algorithm.eps2=0")
    ups = sorted((src, torch.cat([v.flatten().double() for v in p.values() if v.is_floating_point()]))
                 for k, p, src, dst, r in recorded["sent"] if k == "update" and r == 1)
    u = torch.stack([v for _, v in ups])
    w = (1 + torch.nn.functional.cosine_similarity(u[:, None], u[None], dim=-1)) / 2
    n = len(u)
    cuts = []
    for size in range(1, n):
        for a in itertools.combinations(range(n), size):
            if 0 in a:
                b = [j for j in range(n) if j not in a]
                cuts.append((float(w[list(a)][:, b].sum()), sorted([list(a), b])))
    cuts.sort()
    assert cuts[1][0] - cuts[0][0] > 1e-6                  # one minimum, no tie for the cut to break
    clusters = rows(rd / "gcfl_clusters.jsonl")[0]["clusters"]
    assert sorted(clusters) == cuts[0][1] == [[0, 1, 2], [3, 4, 5]]


def test_fedssp_graph_consensus_is_the_mean_of_the_clients_running_means(run_fgx, recorded):
    """Personalised preference's global consensus (issue 67 (c)): what the server sends every client in
    round r + 1 is the uniform mean of the running means the clients sent in round r."""
    run_fgx("algorithm=fedssp_graph", *SSP, "rounds=2", "eval_every=2")
    sent = {}
    for kind, p, src, dst, r in recorded["sent"]:
        sent.setdefault((kind, r), []).append((src, dst, p))
    for r in (1,):
        means = torch.stack([p.double() for _, _, p in sent[("consensus", r)]])
        assert len(means) == 6 and (means - means.mean(0)).norm(dim=1).min() > 1e-4   # clients' means differ
        down = sent[("global_consensus", r + 1)]
        assert sorted(dst for _, dst, _ in down) == list(range(6))
        for _, dst, p in down:
            assert torch.allclose(p.double(), means.mean(0), atol=1e-6), f"round {r + 1}, client {dst}"
