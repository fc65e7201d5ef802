"""Per-round training time of FedSSP (fedssp_graph) beside FedStar on TU collections, at each method's
defaults (issue #66: FedSSP padded every graph's eigenvalue tokens to the client's largest graph, and a
Mutagenicity round took over an hour). `--padded` also times FedSSP with that padding (the attention of
before the fix, kept here as the reference), to state the speed-up.

    python scripts/bench_graph_round.py --data-dir <data root> --datasets mutag proteins --rounds 3 --padded

Prints one line per (dataset, method): seconds per round (the loop's time / rounds, evaluation included),
set-up seconds (data, partition, each client's eigendecompositions), peak RSS, and the ratio to FedStar."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PADDED = '''
import torch
from fgx.models import ssp
from fgx.models.base import dropout

def padded_filters(self, c):
    # before issue #66: every graph's tokens padded to the client's largest graph, one attention call
    eig = self.eig_encoder(c["eig"])
    tok_graph = torch.empty_like(c["tok_pos"])
    g0 = 0
    for b, (rows, length) in enumerate(c["bucket_shape"]):
        toks = c["bucket_tok"][c["bucket_ptr"][b]:c["bucket_ptr"][b + 1]]
        tok_graph[toks] = c["tok_row"][c["bucket_ptr"][b]:c["bucket_ptr"][b + 1]] + g0
        g0 += rows
    G, big = g0, max(length for _, length in c["bucket_shape"])
    pad = eig.new_zeros(G, big, eig.size(1))
    pad[tok_graph, c["tok_pos"]] = eig
    mask = torch.ones(G, big, dtype=torch.bool, device=eig.device)
    mask[tok_graph, c["tok_pos"]] = False
    q = self.mha_norm(pad)
    att, _ = self.mha(q, q, q, key_padding_mask=mask, need_weights=False)
    pad = pad + dropout(att, self.p, self.training)
    pad = pad + dropout(self.eig_ffn(self.ffn_norm(pad)), self.p, self.training)
    return self.decoder(pad[tok_graph, c["tok_pos"]])

ssp.SSP.filters = padded_filters
'''


def run(overrides: list[str], padded: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        code = (PADDED if padded else "") + (
            "import sys\nfrom fgx.cli import main\nsys.exit(main(['run', *sys.argv[1:]]))\n")
        p = subprocess.run([sys.executable, "-c", code, *overrides, f"hydra.run.dir={tmp}/run",
                            "output.checkpoint=false", "output.progress=off"], cwd=REPO, capture_output=True, text=True)
        f = Path(tmp) / "run" / "summary.json"
        if not f.exists():
            sys.exit(f"run failed: {p.stderr[-2000:]}")
        return json.loads(f.read_text())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--datasets", nargs="+", default=["mutag", "proteins"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--padded", action="store_true", help="also FedSSP with every graph padded to the largest")
    args = ap.parse_args()
    print("dataset | method | s/round | set-up s | peak RSS MB | x fedstar")
    for ds in args.datasets:
        common = [f"dataset={ds}", f"data_dir={args.data_dir}", f"rounds={args.rounds}", f"eval_every={args.rounds}"]
        base = None
        for name, algo, padded in (("fedstar", "fedstar", False), ("fedssp_graph", "fedssp_graph", False),
                                   *((("fedssp_graph (padded)", "fedssp_graph", True),) if args.padded else ())):
            s = run(common + [f"algorithm={algo}"], padded)
            per = s["train_time_s"] / s["rounds"]
            base = per if base is None else base
            print(f"{ds} | {name} | {per:.2f} | {s['wall_time_s'] - s['train_time_s']:.1f} | "
                  f"{s['peak_rss_mb']:.0f} | {per / base:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
