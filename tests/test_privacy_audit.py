"""Privacy audit: every algorithm preset (conf/algorithm/*.yaml) runs one round on a tiny graph with
an auditor on the channel that inspects every payload, and no payload may carry raw node/edge
features, labels or training interactions, except in message kinds the algorithm declares raw with
a reason (those are listed in docs/RELIABILITY.md and allowed only on datasets whose features are
public). A new algorithm is audited automatically; a new task needs a tiny config here."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fgx.cli import conf_component_name, main
from fgx.registry import ALGORITHMS
from fgx.federation.channel import payload_tensors

REPO = Path(__file__).resolve().parents[1]

TASK_CFG = {
    "node": ["dataset=csbm", "dataset.num_nodes=240", "dataset.num_features=12", "partitioner=random",
             "partitioner.num_clients=3", "model=gcn", "model.hidden=8"],
    "edge": ["dataset=aml_tiny", "dataset.scale=0.25", "partitioner=by_bank", "partitioner.num_clients=3",
             "model=gine"],
    "ranking": ["dataset=synthetic_bipartite", "dataset.num_users=90", "dataset.num_items=120",
                "dataset.mean_degree=12", "partitioner=random_users", "partitioner.num_clients=3", "model=lgcn"],
    "graph": ["dataset=graph_synth", "dataset.num_graphs=60", "dataset.num_features=8", "partitioner=random",
              "partitioner.num_clients=3", "model=gin_graph", "model.hidden=8", "model.layers=2"],
    "regression": ["dataset=diabetes", "partitioner=topology", "partitioner.graph=karate", "model=mlp_tabular",
                   "algorithm.k=1", "algorithm.b=1"],   # gossip runs have rounds = k * b
    "link": ["task=link", "dataset=csbm", "dataset.num_nodes=240", "dataset.num_features=12", "partitioner=random",
             "partitioner.num_clients=3", "model=gcn", "model.hidden=8"],
}
# algorithm-specific extras for the tiny run (a model it needs, fewer local steps)
ALGO_CFG: dict[str, list[str]] = {"fedmf": ["model=mf"], "pfedrec": ["model=lightgcn"],
                                 "fedrap": ["model=mf"], "f2mf": ["model=mf"], "fedhgnn": ["model=mf"],
                                 "fedpergnn": ["model=gat_ranker"],
                                 "fedgcn": ["dataset.features_public=true"],   # its feature sums are raw (node task)
                                 "fedgsp": ["model=unifilter"],
                                 "fedstar": ["model=gin_dc", "model.hidden=8"],   # its two-channel GIN
                                 "fedssp_graph": ["model=ssp", "model.hidden=8", "model.heads=2"],   # its spectral model
                                 "fedgta": ["model=gamlp", "model.hidden=8"],      # their own backbones
                                 "fediih": ["model=disengcn"],
                                 "fedsage_plus": ["model=sage", "algorithm.local_gen_epochs=2",   # GraphSAGE;
                                                  "algorithm.fed_gen_epochs=2"],          # short NeighGen
                                 "mf_dsgd": ["privacy.correlation=identity"]}   # MF-D-SGD names its correlation


def presets() -> list[tuple[str, str, str]]:
    out = []
    for f in sorted((REPO / "conf" / "algorithm").glob("*.yaml")):
        name = conf_component_name(f)
        tasks = ALGORITHMS.get(name).meta.get("tasks") or ("node",)
        for task in tasks:
            out.append((f.stem, name, task))
    return out


def _rows(t: torch.Tensor) -> torch.Tensor:
    return t.detach().reshape(-1, t.shape[-1]).to(torch.float32).contiguous()


def _row_set(m: torch.Tensor) -> set[bytes]:
    m = _rows(m)
    keep = m.abs().sum(1) > 0                  # all-zero rows (padding, halo placeholders) carry nothing
    return {r.numpy().tobytes() for r in m[keep]}


MIN_AFFINE_WIDTH = 6     # below this many columns a chance affine fit is too likely: exact bytes only
FIT_TOL = 1e-6           # 1 - R² of the least-squares fit a·raw + b; 1e-6 = noise of 0.1% of the row's spread
MAX_ROWS = 512           # payload rows examined per tensor (a sample of larger payloads)


def _standardise(m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows centred and scaled to unit norm (float64), and which rows vary at all."""
    m = m.double()
    c = m - m.mean(1, keepdim=True)
    norm = c.norm(dim=1, keepdim=True)
    ok = norm.squeeze(1) > 1e-9 * (1 + m.abs().amax(1))
    return c / norm.clamp(min=1e-300), ok


def affine_row_hits(payload: torch.Tensor, raw: torch.Tensor) -> int:
    """How many rows of ``payload`` [r, d] equal a·s[o:o+d] + b for a raw row s [f], any scalars a ≠ 0,
    b and any contiguous column window o (d = f: the whole row). The least-squares fit of a payload
    row on a raw row window leaves 1 - R² = 1 - corr² of its variance unexplained: a hit is a fit
    within FIT_TOL. ``raw`` rows with fewer than 3 distinct values are left to the exact check."""
    r, d = payload.shape
    f = raw.shape[1]
    if d < MIN_AFFINE_WIDTH or d > f or r == 0:
        return 0
    if r > MAX_ROWS:
        payload = payload[torch.randperm(r, generator=torch.Generator().manual_seed(0))[:MAX_ROWS]]
    p, p_ok = _standardise(payload)
    p = p[p_ok]
    if p.numel() == 0:
        return 0
    hit = torch.zeros(p.size(0), dtype=torch.bool)
    for o in range(f - d + 1):
        window = raw[:, o:o + d]
        s, s_ok = _standardise(window)
        distinct = (window.sort(1).values.diff(dim=1).abs() > 0).sum(1) >= 2
        s = s[s_ok & distinct]
        if s.numel() == 0:
            continue
        corr = (p @ s.T).abs()                 # |corr| of every payload row with every raw window row
        hit |= (1 - corr.amax(1) ** 2) < FIT_TOL
    return int(hit.sum())


MIN_COLUMN_ROWS = 8      # a column fit over fewer aligned rows is left to the row checks


def affine_column_hits(payload: torch.Tensor, block: torch.Tensor) -> int:
    """How many columns of ``payload`` [r, d] equal a·block[:r, k] + b for some raw column k: rows
    aligned with a client's raw rows as the client holds them (``block`` [m, f], r ≤ m), any scalars
    a ≠ 0, b per column. Catches any column subset, in any order, each column scaled and shifted on its
    own. Raw columns with fewer than 3 distinct values over those rows are left to the exact check."""
    r = payload.shape[0]
    if r < MIN_COLUMN_ROWS or r > block.shape[0]:
        return 0
    p, p_ok = _standardise(payload.T)
    raw = block[:r].T
    s, s_ok = _standardise(raw)
    distinct = (raw.sort(1).values.diff(dim=1).abs() > 0).sum(1) >= 2
    p, s = p[p_ok], s[s_ok & distinct]
    if p.numel() == 0 or s.numel() == 0:
        return 0
    corr = (p @ s.T).abs()                     # |corr| of every payload column with every raw column
    return int(((1 - corr.amax(1) ** 2) < FIT_TOL).sum())


def affine_vector_equal(flat: torch.Tensor, y: torch.Tensor) -> bool:
    """``flat`` = a·y + b for scalars a ≠ 0, b (least squares, within FIT_TOL); y must vary."""
    if flat.numel() != y.numel() or y.numel() < 4:
        return False
    (a, ok_a), (b, ok_b) = _standardise(flat.reshape(1, -1)), _standardise(y.reshape(1, -1).double())
    if not (bool(ok_a) and bool(ok_b)):
        return False
    return float(1 - (a @ b.T).abs().item() ** 2) < FIT_TOL


def one_hot_classes(m: torch.Tensor) -> torch.Tensor | None:
    """If every row of m (3+ columns) is an affine image a·e_k + b of a one-hot row (one entry apart,
    the others equal), the class k of each row; else None."""
    if m.dim() != 2 or m.size(0) < 4 or m.size(1) < 3:
        return None
    dev = (m.double() - m.double().median(1, keepdim=True).values).abs()
    k = dev.argmax(1)
    gap = dev.gather(1, k[:, None]).squeeze(1)
    others = dev.scatter(1, k[:, None], 0.0)
    if (gap < 1e-9).any() or (others.amax(1) > 1e-6 * gap).any():
        return None
    return k


class Secrets:
    """What must never leave a client, from the global graph and the client views: raw feature and
    edge-attribute rows, labels (as vectors and as one-hot rows) and regression targets, recognised
    up to scale and shift (a·raw + b), a contiguous column window of a row, any column subset of a
    client's rows (in the client's row order), and transposition."""

    def __init__(self, data, clients, task: str, num_classes: int):
        self.float_rows: dict[int, set[bytes]] = {}
        self.raw_mats: list[torch.Tensor] = []
        self.client_blocks: list[torch.Tensor] = []    # each client's raw rows, in the client's order
        self.label_vectors: list[torch.Tensor] = []
        self.class_sequences: list[torch.Tensor] = []
        self.num_classes = num_classes
        self.pairs: set[tuple[int, int]] = set()
        mats = []
        if getattr(data, "x", None) is not None and data.x.is_floating_point():
            mats.append(data.x)
        if task == "edge" and getattr(data, "edge_attr", None) is not None:
            mats.append(data.edge_attr)
        self.raw_mats = [m.detach().reshape(-1, m.shape[-1]).double() for m in mats
                         if m.numel() and m.dim() >= 2 and m.shape[-1] >= MIN_AFFINE_WIDTH]
        for c in clients:
            blocks = []
            if getattr(data, "x", None) is not None and data.x.is_floating_point() and data.x.dim() == 2:
                own = data.x[c.nodes]
                blocks.append(own)
                if getattr(data, "train_mask", None) is not None:
                    blocks.append(own[data.train_mask[c.nodes]])
            attr = getattr(data, "edge_attr", None)
            if task == "edge" and attr is not None and attr.dim() == 2 and attr.is_floating_point():
                blocks += [attr[c.data.global_edge_id], attr[c.data.cross_global_edge_id]]
            self.client_blocks += [b.detach().double() for b in blocks if b.numel()]
        if task == "node" and num_classes > 0:
            mats.append(torch.nn.functional.one_hot(data.y.clamp(min=0), num_classes).float())
            for c in clients:
                y = data.y[c.nodes]
                self.label_vectors += [y, y[data.train_mask[c.nodes]]]
                self.class_sequences += [y, y[data.train_mask[c.nodes]]]
        if task == "graph" and num_classes > 0:      # one label per graph
            mats.append(torch.nn.functional.one_hot(data.graph_y, num_classes).float())
            for c in clients:
                y = c.data.graph_y
                self.label_vectors += [y, y[c.data.graph_train_mask]]
                self.class_sequences += [y, y[c.data.graph_train_mask]]
        if task == "edge" and getattr(data, "edge_y", None) is not None:
            self.label_vectors.append(data.edge_y)
        if task == "regression":
            for c in clients:                  # a node's targets, as a vector or one value per row
                self.label_vectors.append(data.y[c.nodes].flatten())
        for m in (m for m in mats if m.numel() and m.shape[-1] > 0):
            self.float_rows.setdefault(m.shape[-1], set()).update(_row_set(m))
        if task == "ranking":
            ei = data.edge_index
            self.pairs = set(map(tuple, ei[:, : min(ei.size(1), 20000)].t().tolist()))

    def _float_leak(self, t: torch.Tensor) -> str | None:
        flat = t.detach().flatten().cpu()
        for y in self.label_vectors:
            if y.numel() >= 4 and flat.numel() == y.numel():
                if y.is_floating_point() and torch.equal(flat.to(y.dtype), y.cpu()):
                    return "a vector equal to a client's regression targets"
                if affine_vector_equal(flat, y.cpu()):
                    return "a vector that is a scaled/shifted copy of a client's labels or targets"
        views = [_rows(t)]
        if t.dim() == 2 and t.size(0) > 1:
            views.append(t.detach().T.float())          # a payload sent transposed
        for v in views:
            rows = self.float_rows.get(v.shape[-1])
            if rows:
                hit = sum(r.numpy().tobytes() in rows for r in v)
                if hit:
                    return f"{hit} row(s) equal to raw feature/label rows"
            for raw in self.raw_mats:
                hit = affine_row_hits(v, raw)
                if hit:
                    return f"{hit} row(s) that are a·(raw feature/attribute rows) + b on a column window"
            for block in self.client_blocks:
                hit = affine_column_hits(v, block)
                if hit:
                    return f"{hit} column(s) that are a·(a raw feature/attribute column of a client's rows) + b"
            if self.num_classes > 1 and v.shape[-1] == self.num_classes:
                k = one_hot_classes(v)
                if k is not None and any(k.numel() == y.numel() and torch.equal(k, y.cpu())
                                         for y in self.class_sequences):
                    return "one-hot rows (scaled/shifted) spelling a client's labels"
        return None

    def leaks(self, t: torch.Tensor) -> str | None:
        if t.numel() == 0 or t.dim() == 0 or t.shape[-1] == 0:
            return None
        if t.is_floating_point():
            return self._float_leak(t)
        flat = t.flatten()
        for y in self.label_vectors:
            if y.numel() >= 4 and flat.numel() == y.numel() and torch.equal(flat.cpu(), y.to(flat.dtype).cpu()):
                return "a vector equal to a client's labels"
        if self.pairs and t.dim() == 2 and 2 in t.shape and t.numel() >= 10:
            pairs = t if t.shape[0] == 2 else t.t()
            hits = sum(p in self.pairs for p in map(tuple, pairs.t().tolist()))
            if hits >= max(5, pairs.size(1) // 2):
                return f"{hits} training interactions"
        return None


@pytest.fixture
def audited(monkeypatch):
    """Patch the trainer so that the channel reports every payload and the test sees the data."""
    import fgx.trainer as trainer
    from fgx.federation.channel import Channel

    seen = {"payloads": [], "endpoints": [], "data": None, "clients": None, "declared_raw": set()}
    real_graph, real_clients = trainer.check_graph, trainer.check_clients

    def grab_graph(ds, name):
        seen["data"], seen["info"] = ds.data, ds.info
        return real_graph(ds, name)

    def grab_clients(clients, info, name):
        seen["clients"] = clients
        return real_clients(clients, info, name)

    class AuditedChannel(Channel):
        def __init__(self, messages, **kw):
            def auditor(kind, p, src, dst, r):
                seen["payloads"].append((kind, p))
                seen["endpoints"].append((kind, src, dst))
            super().__init__(messages, auditor=auditor, **{k: v for k, v in kw.items() if k != "auditor"})
            seen["declared_raw"] = {k for k, m in messages.items() if m.raw}

    monkeypatch.setattr(trainer, "check_graph", grab_graph)
    monkeypatch.setattr(trainer, "check_clients", grab_clients)
    monkeypatch.setattr(trainer, "Channel", AuditedChannel)
    return seen


def audit(seen) -> list[str]:
    info = seen["info"]
    secrets = Secrets(seen["data"], seen["clients"], info.task, info.num_classes)
    problems = []
    for kind, payload in seen["payloads"]:
        if kind in seen["declared_raw"]:
            continue
        for t in payload_tensors(payload):
            why = secrets.leaks(t)
            if why:
                problems.append(f"message '{kind}' ({list(t.shape)}): {why}")
    return problems


@pytest.mark.parametrize("preset,name,task", presets(), ids=lambda x: str(x))
def test_no_payload_carries_raw_data(preset, name, task, audited, run_fgx):
    if task not in TASK_CFG:
        pytest.fail(f"algorithm '{name}' supports task {task!r}: add a tiny {task} config to TASK_CFG "
                    f"in tests/test_privacy_audit.py so that it is audited")
    graph = ["algorithm.fanouts=null"] if task in ("graph", "link") and "fanouts" in (REPO / "conf" / "algorithm" /
                                                                        f"{preset}.yaml").read_text() else []
    run = run_fgx(*TASK_CFG[task], f"algorithm={preset}", *[o for o in ALGO_CFG.get(name, []) if task != "edge" or not o.startswith("dataset.")], *graph, "rounds=1", "eval_every=1",
                  "output.checkpoint=false")
    assert (run / "summary.json").exists()
    problems = audit(audited)
    assert not problems, f"{preset} on {task}: " + "; ".join(problems[:5])
    # every message goes from one party to another: a client id, the server or FedPerGNN's third party
    # (the ledger the privacy accounting and the communication totals are kept by)
    parties = set(range(len(audited["clients"]))) | {"server", "third_party"}
    wrong = {(kind, src, dst) for kind, src, dst in audited["endpoints"]
             if src not in parties or dst not in parties or src == dst}
    assert not wrong, f"{preset} on {task}: messages between unknown parties: {sorted(map(str, wrong))[:5]}"


LEAKS = {   # what a leaking algorithm sends (from its client's view), and what the audit must say
    "raw_rows": (lambda v: v.x[:3], "equal to raw feature"),
    "scaled_shifted": (lambda v: v.x[:20] * 1.0001 + 1e-6, "a·(raw feature"),
    "first_15_columns": (lambda v: v.x[:20, :15], "a·(raw feature"),
    "scaled_columns_2_to_9": (lambda v: -3.0 * v.x[:20, 2:10] + 7.0, "a·(raw feature"),
    "transposed": (lambda v: (v.x[:20] * 2.0 - 1.0).T.contiguous(), "a·(raw feature"),
    "every_other_column": (lambda v: v.x[:20, ::2] * 0.5 + 1.0, "a raw feature/attribute column"),
    "permuted_columns_each_scaled": (
        lambda v: v.x[:20][:, [5, 0, 11, 3]] * torch.tensor([2.0, -1.0, 0.3, 4.0]) + torch.tensor([1.0, 0, 0, -2.0]),
        "a raw feature/attribute column"),
    "one_feature_of_the_train_nodes": (lambda v: v.x[v.train_mask][:, 7:8] * 1.0001 + 1e-6,
                                       "a raw feature/attribute column"),
    "labels_one_hot_scaled": (lambda v: torch.nn.functional.one_hot(v.y, 5).float() * 3.0 + 0.5, "one-hot rows"),
    "labels_as_floats": (lambda v: v.y.float() * 1.0001 + 1e-6, "scaled/shifted copy of a client's labels"),
}


@pytest.mark.parametrize("leak", sorted(LEAKS))
def test_the_audit_catches_a_leaking_algorithm(audited, tiny_cfg, tmp_path, monkeypatch, leak):
    """The auditor is not vacuous: an algorithm that ships raw features or labels under an innocent
    name is caught, also scaled and shifted, cut to a column window or any column subset, transposed or
    one-hot encoded."""
    from fgx.algorithms.fedavg import FedAvg
    from fgx.federation.channel import Message

    make, why = LEAKS[leak]

    class Leaky(FedAvg):
        messages = {**FedAvg.messages, "summary_stats": Message("up")}

        def round(self, r):
            for s in self.states:
                self.ctx.channel.send("summary_stats", {"mean": make(s.view)}, src=s.cid, dst="server", round=r)
            return super().round(r)

    entry = ALGORITHMS.get("fedavg")
    ALGORITHMS._entries["leaky_test"] = type(entry)("leaky_test", Leaky, entry.params, __name__, entry.meta)
    monkeypatch.chdir(tmp_path)
    try:
        assert main(["run", *tiny_cfg, "algorithm=fedavg", "algorithm.name=leaky_test", "rounds=1",
                     "dataset.num_classes=5", f"hydra.run.dir={tmp_path / 'r'}"]) == 0
    finally:
        ALGORITHMS._entries.pop("leaky_test", None)
    problems = audit(audited)
    assert any("summary_stats" in p and why in p for p in problems), problems
    assert not [p for p in problems if "summary_stats" not in p], problems     # nothing else is flagged


def test_the_affine_audit_does_not_flag_a_linear_layer_of_the_features():
    """A model's view of the features (x·W for a random W, noisy releases) is not a raw row."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(200, 16, generator=g)
    assert affine_row_hits(x[:50] @ torch.randn(16, 16, generator=g), x.double()) == 0
    assert affine_row_hits(x[:50] + 0.05 * torch.randn(50, 16, generator=g), x.double()) == 0
    assert affine_row_hits(x[:50, 3:12] * 0.5 - 2, x.double()) == 50
    own = x[:60].double()
    assert affine_column_hits(x[:50] @ torch.randn(16, 16, generator=g), own) == 0
    assert affine_column_hits(x[:50] + 0.05 * torch.randn(50, 16, generator=g), own) == 0
    assert affine_column_hits(x[10:60, [1, 4, 9]] * 3 + 1, own) == 0        # other rows than the client's first
    assert affine_column_hits(x[:50, [9, 1, 4]] * -3 + 1, own) == 3
    assert affine_column_hits(x[:7, [9, 1, 4]], own) == 0                    # too few rows to tell
