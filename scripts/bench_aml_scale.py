"""CE-FedGNN at the paper's data scale: one local step of CE-FedGNN-PNA on generated HI-Small
(515k accounts, 5.08M transactions, 4 banks as clients; batch 1024 seed transactions, fanouts
[100, 100]) beside a bare PyG PNA forward + backward on the same sampled subgraph, and the time
of one complete validation + test evaluation.

fgx's step is everything CE-FedGNN does per local step (seed batch, neighbour sampling, the
subgraph, the layer-wise forward with halo embeddings and the moving averages of Eq. 5, the loss,
backward, the gradient moving average of Eq. 9 and the update W <- W - lr * G). The bare step is
the floor, written here with PyG's layers and nothing of fgx's models: the Multi-GNN edge network
(GINEConv or PNAConv, batch norm and residual, edge-update MLPs, ego IDs, readout on
[h_u, h_v, e]) of the same sizes, run on the same already-sampled subgraph (a PyG Data) with a plain
loop: forward over every edge of the subgraph, class-weighted cross-entropy on the seed edges,
backward, an SGD step; no sampling, no CE-FedGNN state. Steps are interleaved (fgx, bare, fgx, ...)
on the same subgraphs and the medians are compared. The complete evaluation is timed per bank.

    python scripts/bench_aml_scale.py --data-dir /path/to/data          # generates HI-Small on first use
    python scripts/bench_aml_scale.py --data-dir ... --steps 3 --no-eval --scale 0.1   # quick look

The last line printed is JSON: {"step_ratio": fgx / bare, "eval_s": ..., ...}."""
from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from pathlib import Path


def build(args):
    import torch

    from fgx.cli import compose
    from fgx.config import default_data_dir, validate
    from fgx.data.base import DataEnv
    from fgx.federation.channel import Channel
    from fgx.federation.context import Context
    from fgx.partition.base import build_clients

    over = ["algorithm=ce_fedgnn", f"dataset={args.dataset}", f"dataset.scale={args.scale}", f"model={args.model}",
            f"partitioner.num_clients={args.clients}", f"algorithm.batch_size={args.batch_size}",
            f"algorithm.fanouts=[{','.join(map(str, args.fanouts))}]", f"algorithm.local_steps={args.steps}",
            f"seed={args.seed}", f"eval.batch_size={args.eval_batch_size}", *args.overrides]
    if args.data_dir:
        over.append(f"data_dir={args.data_dir}")
    cfg = compose(over)
    v = validate(cfg)
    log = logging.getLogger("fgx")
    log.setLevel(logging.INFO)
    if not log.handlers:
        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(logging.Formatter("[fgx] %(message)s"))
        log.addHandler(h)
    torch.manual_seed(args.seed)
    env = DataEnv(data_dir=Path(v.top.data_dir or default_data_dir()), seed=args.seed, log=log)
    t = time.time()
    ds = v.entries["dataset"].obj(v.params["dataset"], env)
    clients = build_clients(ds.data, ds.info, v.entries["partitioner"].obj(v.params["partitioner"], ds.data,
                                                                             ds.info, args.seed))
    load_s = time.time() - t
    privacy = v.entries["privacy"].obj(v.params["privacy"])
    algo_cls = v.entries["algorithm"].obj
    ctx = Context(clients=clients, info=ds.info, config=v, params=v.params["algorithm"],
                  model_params=v.params["model"], model_builder=v.entries["model"].obj,
                  channel=Channel(algo_cls.messages, privacy=privacy, features_public=ds.info.features_public),
                  executor=v.entries["executor"].obj(v.params["executor"]), privacy=privacy,
                  device=torch.device(args.device), seed=args.seed, log=log, global_data=ds.data)
    privacy.bind(ctx)
    algo = algo_cls(ctx)
    algo.setup()
    return ds, algo, v, load_s


def BareEdgeGNN(kind: str, in_node: int, in_edge: int, hidden: int, layers: int, deg_hist):
    """Multi-GNN's edge network written directly with PyG layers (the floor; nothing of fgx.models)."""
    import torch
    from torch import nn
    from torch_geometric.nn import GINEConv, PNAConv

    def mlp(a, b):
        return nn.Sequential(nn.Linear(a, b), nn.ReLU(), nn.Linear(b, b))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            h = hidden
            self.node_emb, self.edge_emb = nn.Linear(in_node + 1, h), nn.Linear(in_edge, h)
            if kind == "pna":
                deg = torch.tensor(deg_hist, dtype=torch.long)
                self.convs = nn.ModuleList([PNAConv(h, h, aggregators=["mean", "min", "max", "std"],
                                                    scalers=["identity", "amplification", "attenuation"], deg=deg,
                                                    edge_dim=h, towers=5, pre_layers=1, post_layers=1,
                                                    divide_input=False) for _ in range(layers)])
            else:
                self.convs = nn.ModuleList([GINEConv(mlp(h, h), edge_dim=h) for _ in range(layers)])
            self.bns = nn.ModuleList([nn.BatchNorm1d(h) for _ in range(layers)])
            self.emlps = nn.ModuleList([mlp(3 * h, h) for _ in range(layers)])
            self.head = nn.Sequential(nn.Linear(3 * h, 50), nn.ReLU(), nn.Dropout(0.1), nn.Linear(50, 25), nn.ReLU(),
                                      nn.Dropout(0.1), nn.Linear(25, 2))

        def forward(self, x, edge_index, edge_attr, k):
            ego = torch.zeros(x.size(0), 1, device=x.device)
            ego[edge_index[:, :k].reshape(-1)] = 1.0            # the seed edges' endpoints
            x = self.node_emb(torch.cat([x, ego], 1))
            e = self.edge_emb(edge_attr)
            src, dst = edge_index
            for conv, bn, emlp in zip(self.convs, self.bns, self.emlps):
                x = (x + torch.relu(bn(conv(x, edge_index, e)))) / 2
                e = e + emlp(torch.cat([x[src], x[dst], e], 1)) / 2
            return self.head(torch.cat([torch.relu(x[src[:k]]), torch.relu(x[dst[:k]]), e[:k]], 1))

    return Net()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=None, help="fgx data root (default: $FGX_DATA_DIR or ~/.cache/fgx)")
    ap.add_argument("--dataset", default="aml_hi_small")
    ap.add_argument("--scale", type=float, default=1.0, help="generated data size (1 = the paper's HI-Small)")
    ap.add_argument("--model", default="pna")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--fanouts", type=int, nargs="+", default=[100, 100])
    ap.add_argument("--steps", type=int, default=8, help="measured steps of each kind (after one warm-up)")
    ap.add_argument("--client", type=int, default=0, help="the client whose steps are timed")
    ap.add_argument("--eval-batch-size", type=int, default=65536,
                    help="items per evaluation batch (eval.batch_size); at fanouts [100, 100] a batch's "
                         "subgraph nears the whole client graph, so large batches amortise it")
    ap.add_argument("--no-eval", action="store_true", help="skip the complete evaluation")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu", help="cpu or cuda: both steps and the evaluation run there "
                    "(the neighbour sampler indexes on the CPU, as in fgx runs)")
    ap.add_argument("overrides", nargs="*", help="further fgx overrides")
    args = ap.parse_args()

    import torch
    from torch import nn

    import fgx.algorithms.ce_fedgnn as ce
    from fgx.algorithms.base import flat_params
    from fgx.federation.client import round_seed
    from fgx.sampler import sample_view
    from fgx.tasks import targets

    ds, algo, v, load_s = build(args)
    dev = torch.device(args.device)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    p = algo.params
    c = algo.clients[args.client]
    info = {"dataset": args.dataset, "scale": args.scale, "nodes": int(ds.data.num_nodes),
            "edges": int(ds.data.edge_index.size(1)), "clients": len(algo.clients), "model": args.model,
            "batch_size": args.batch_size, "fanouts": args.fanouts, "client_edges": int(c.view.edge_index.size(1)),
            "load_s": round(load_s, 1), "torch_threads": torch.get_num_threads(), "device": str(dev),
            "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None,
            "torch": torch.__version__}
    print(json.dumps({"setup": info}), flush=True)

    # one fgx step = local_round with K = 1 (its per-round bookkeeping included, upload excluded)
    state = flat_params(algo.global_model)
    G = {k: torch.zeros_like(w) for k, w in algo.global_G.items()}
    p.local_steps = 1
    upload = ce._upload
    ce._upload = lambda c, gs, share: ({}, {}, [])

    def fgx_step(seed: int) -> float:
        sync()
        t = time.perf_counter()
        ce.local_round(c, p, state, G, seed, algo.share, False)
        sync()
        return time.perf_counter() - t

    # the bare step: a network of the same shape written with PyG's layers, on the subgraph the fgx step
    # sampled (same generator draws)
    torch.manual_seed(args.seed)
    bare = BareEdgeGNN(args.model, c.view.x.size(1), c.view.edge_attr.size(1), c.model.bns[0].num_features,
                       c.model.num_layers, ds.info.extra.get("in_degree_histogram")).to(dev)
    opt = torch.optim.SGD(bare.parameters(), lr=p.lr)
    mask, _ = targets(c.view, c.task, "train")
    train_ids = mask.nonzero().view(-1)

    def subgraph(seed: int):
        g = torch.Generator().manual_seed(seed + c.cid)
        pick = torch.randperm(train_ids.numel(), generator=g)[:p.batch_size].to(train_ids.device)
        smp = c.sampler.sample_edges(train_ids[pick].cpu(), g)
        return sample_view(c.view, smp).to(dev), smp.num_seed_edges

    def bare_step(sub, k) -> float:
        sync()
        t = time.perf_counter()
        bare.train()
        out = bare(sub.x, sub.edge_index, sub.edge_attr, k)
        loss = nn.functional.cross_entropy(out, sub.edge_y[:k], weight=c.loss_weight)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sync()
        return time.perf_counter() - t

    fgx_t, bare_t, sample_t, sizes = [], [], [], []
    for step in range(args.steps + 1):
        seed = round_seed(args.seed, 1) + 7919 * step
        sync()
        ts = time.perf_counter()
        sub, k = subgraph(seed)          # the sampling fgx's step also does (CPU sampler, moved to the device)
        sync()
        s_t = time.perf_counter() - ts
        a = fgx_step(seed)
        b = bare_step(sub, k)
        if step > 0:            # step 0 warms up both
            fgx_t.append(a)
            bare_t.append(b)
            sample_t.append(s_t)
            sizes.append((int(sub.num_nodes), int(sub.edge_index.size(1))))
        print(json.dumps({"step": step, "fgx_s": round(a, 4), "bare_s": round(b, 4), "sample_s": round(s_t, 4), "subgraph_nodes": sub.num_nodes,
                          "subgraph_edges": int(sub.edge_index.size(1))}), flush=True)
    ce._upload = upload
    res = {"step_fgx_s": statistics.median(fgx_t), "step_bare_s": statistics.median(bare_t),
           "subgraph_edges_median": statistics.median(e for _, e in sizes)}
    res["step_ratio"] = res["step_fgx_s"] / res["step_bare_s"]
    # the bare step starts from a sampled subgraph; fgx's step samples its own: the ratio without sampling
    res["sample_s"] = statistics.median(sample_t)
    res["step_ratio_without_sampling"] = (res["step_fgx_s"] - res["sample_s"]) / res["step_bare_s"]

    if not args.no_eval:
        t = time.perf_counter()
        n_items, per_bank = 0, []
        for client in algo.ctx.clients:
            tb = time.perf_counter()
            out = algo.predict(client, splits=("val", "test"), batch_size=args.eval_batch_size)
            sync()
            per_bank.append(round(time.perf_counter() - tb, 2))
            n_items += sum(int(y.numel()) for _, y in out.values())
        res["eval_s"] = time.perf_counter() - t
        res["eval_s_per_bank"] = per_bank
        res["eval_inference"] = str(algo.ctx.config.top.eval.inference)
        res["eval_items"] = n_items
    else:
        res["eval_s"] = None
    print(json.dumps({k: (round(x, 4) if isinstance(x, float) else x) for k, x in res.items()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
