"""The client runtime and the algorithm shape (issue 68): one local-training loop with a typed objective,
a round of fixed phases, executor=batched asking the objective (no algorithm names, no copied maths in
fgx/federation), no string-key plug-ins on client state and no capability probing of algorithms."""
from __future__ import annotations

import ast
import copy
import inspect
import io
import re
import tokenize
from pathlib import Path

import pytest
import torch

from fgx.config import ConfigError
from test_client_batching import BASE, build, step

FGX = Path(__file__).resolve().parents[1] / "fgx"
ARCHITECTURE = FGX.parent / "docs" / "ARCHITECTURE.md"


def sources(*parts: str) -> dict[Path, str]:
    return {f: f.read_text() for part in parts for f in sorted((FGX / part).rglob("*.py") if (FGX / part).is_dir()
                                                                  else [FGX / part])}


# -- no string keys, no probing --------------------------------------------------------------------------

STRING_KEY_PLUGIN = re.compile(r"\.extra(\[|\.get\(|\.setdefault\(|\.update\(|\.pop\()|\bextra_loss\b|extra=\{")
PROBING = re.compile(r"\b(getattr|hasattr)\((self\.)?(algo|algorithm)\b")


def test_no_string_key_plugins_on_client_state():
    """Client state is typed (a method subclasses ClientState): no ``extra`` dict of string keys in the
    client runtime, the algorithms or the trainer (a dataset's ``info.extra`` facts are not client state)."""
    from fgx.federation.client import ClientState
    from fgx.recsys.graph_clients import GraphClient

    hits = [f"{f.relative_to(FGX.parent)}:{i + 1}: {line.strip()}"
            for f, text in sources("algorithms", "federation", "recsys", "trainer.py", "privacy").items()
            for i, line in enumerate(text.splitlines())
            if STRING_KEY_PLUGIN.search(line.replace("info.extra", ""))]
    assert not hits, "string-key plug-ins:\n" + "\n".join(hits)
    assert "extra" not in ClientState.__dataclass_fields__
    assert "self.extra" not in inspect.getsource(GraphClient)


def test_the_string_key_check_sees_a_plugin():
    assert STRING_KEY_PLUGIN.search('    state.extra["prox_mu"] = p.mu')
    assert STRING_KEY_PLUGIN.search("    loss = train(state, extra_loss=proximal_term)")
    assert PROBING.search('        custom = getattr(algo, "client_metrics", None)')
    assert PROBING.search('    x = algo.privacy_report() if hasattr(algo, "privacy_report") else None')
    assert PROBING.search('    if callable(getattr(algo, "node_embeddings", None)):')


def test_no_capability_probing_of_algorithms():
    """What the trainer and the privacy mechanisms ask an algorithm is declared on Algorithm
    (client_metrics, privacy_report, node_embeddings, gossip, objective), never probed."""
    hits = [f"{f.relative_to(FGX.parent)}:{i + 1}: {line.strip()}" for f, text in sources(".").items()
            for i, line in enumerate(text.splitlines()) if PROBING.search(line)]
    assert not hits, "capability probing:\n" + "\n".join(hits)
    from fgx.algorithms.base import Algorithm

    for name in ("client_metrics", "privacy_report", "node_embeddings", "gossip", "objective", "score"):
        assert hasattr(Algorithm, name)


# -- fgx/federation knows no algorithm -----------------------------------------------------------------

def test_federation_names_no_algorithm_and_imports_nothing_of_them():
    """The executors and the client runtime name no method (a method's maths comes from its objective),
    and no module of fgx/federation imports fgx/algorithms (the runtime is the layer under the methods)."""
    from fgx.registry import ALGORITHMS
    from test_imports import import_graph

    words = {"local", "gossip"}            # ordinary words that also name a method
    names = [n for n in ALGORITHMS.names() if n not in words]
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")('s)?\b", re.IGNORECASE)
    hits = [f"{f.name}:{i + 1}: {m.group(0)}" for f, text in sources("federation").items()
            for i, line in enumerate(text.splitlines()) for m in [pattern.search(line)] if m]
    assert not hits, "algorithm names in fgx/federation:\n" + "\n".join(hits)
    g = import_graph()
    up = [(a, b) for a, b in g.edges if a.startswith("fgx.federation") and b.startswith("fgx.algorithms")]
    assert not up, f"fgx/federation imports fgx/algorithms: {up}"
    assert g.has_edge("fgx.algorithms.base", "fgx.federation.client")      # the direction that is allowed


# -- the round's phases --------------------------------------------------------------------------------

def round_overrides() -> set[str]:
    out = set()
    for f in sorted((FGX / "algorithms").glob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ClassDef) and any(isinstance(b, ast.FunctionDef) and b.name == "round"
                                                      for b in node.body):
                out.add(f.name)
    return out - {"base.py"}


def test_only_the_methods_named_in_architecture_md_define_their_own_round():
    """A method overrides the phase its paper changes; the files that still define ``round`` are exactly
    the ones docs/ARCHITECTURE.md names, with the reason."""
    text = ARCHITECTURE.read_text()
    block = text[text.index("<!-- own-round -->"):text.index("<!-- /own-round -->")]
    named = set(re.findall(r"`fgx/algorithms/(\w+\.py)`", block))
    assert round_overrides() == named
    for core in ("fedavg.py", "fedprox.py", "scaffold.py", "moon.py", "feddc.py", "fedproto.py", "fedtgp.py",
                 "local.py"):
        assert core not in named


def code_lines(path: Path) -> int:
    """Lines of a module's own logic: code lines without imports, docstrings, comments, decorators and the
    params dataclass (configuration)."""
    src = path.read_text()
    tree = ast.parse(src)
    skip: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            skip |= set(range(body[0].lineno, body[0].end_lineno + 1))
        if isinstance(node, (ast.Import, ast.ImportFrom)) or \
                (isinstance(node, ast.ClassDef) and node.name.endswith("Params")):
            skip |= set(range(node.lineno - len(getattr(node, "decorator_list", [])), node.end_lineno + 1))
        for d in getattr(node, "decorator_list", []):
            skip |= set(range(d.lineno, d.end_lineno + 1))
    code = {t.start[0] for t in tokenize.generate_tokens(io.StringIO(src).readline)
            if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                              tokenize.ENDMARKER)}
    return len(code - skip)


def test_fedprox_is_fedavg_plus_its_objective():
    from fgx.algorithms.fedavg import FedAvg
    from fgx.algorithms.fedprox import FedProx, Proximal

    assert code_lines(FGX / "algorithms" / "fedprox.py") <= 25
    own = {k for k, v in vars(FedProx).items() if callable(v) or isinstance(v, classmethod)} - {"objective"}
    assert own <= {"client_objective", "reduces_to", "aggregate"}      # its term, when it is FedAvg, its diagnostic
    assert FedProx.round is FedAvg.round and FedProx.objective is Proximal


# -- executor=batched asks the objective --------------------------------------------------------------

def test_batched_fedprox_trains_with_the_objectives_batched_form(tmp_path, monkeypatch):
    """executor=batched computes FedProx's term from Proximal.batched_term (no copy of it in fgx/federation):
    that form removed, the batched round is no longer FedProx's; as it is, it equals the loop."""
    from fgx.algorithms.fedprox import Proximal

    cfg = ["algorithm=fedprox", "algorithm.mu=2.0", "model=gcn"]
    calls = []
    real = Proximal.batched_term
    monkeypatch.setattr(Proximal, "batched_term", lambda self, params: calls.append(1) or real(self, params))
    loop = step(build(tmp_path, *cfg, "executor=local"), 1)
    batched = step(build(tmp_path, *cfg, "executor=batched", "executor.client_batching=on"), 1)
    assert calls and batched["loss"] == pytest.approx(loop["loss"], abs=1e-5)
    monkeypatch.setattr(Proximal, "batched_term", lambda self, params: None)
    without = step(build(tmp_path, *cfg, "executor=batched", "executor.client_batching=on"), 1)
    assert abs(without["loss"] - loop["loss"]) > 1e-3


def test_fedprox_batched_run_gives_the_loops_metrics(run_fgx):
    cfg = [*BASE, "algorithm=fedprox", "algorithm.mu=0.5", "model=gcn", "rounds=3", "eval_every=1"]
    import json

    loop, batched = run_fgx(*cfg), run_fgx(*cfg, "executor=batched", "executor.client_batching=on")
    a, b = (json.loads((d / "summary.json").read_text()) for d in (loop, batched))
    assert b["components"]["executor"] == "batched"
    assert b["final"] == pytest.approx(a["final"], abs=1e-5) and b["total_bytes"] == a["total_bytes"]


@pytest.mark.parametrize("algorithm,objective", [("moon", "Contrastive"), ("fedproto", "PrototypeTerm"),
                                                 ("scaffold", "Corrected")])
def test_representation_methods_declare_why_they_do_not_run_batched(algorithm, objective):
    """MOON's and FedProto's terms read each client's representation: their objectives declare that
    they have no batched form, and client_batching=on refuses them before work naming that reason."""
    from fgx.cli import compose
    from fgx.config import validate
    from fgx.registry import ALGORITHMS

    declared = ALGORITHMS.get(algorithm).obj.objective
    assert declared.__name__ == objective and isinstance(declared.unbatched, str)
    with pytest.raises(ConfigError, match=f"executor.client_batching.*{objective} has no batched form"):
        validate(compose([*BASE, f"algorithm={algorithm}", "model=gcn", "executor=batched",
                          "executor.client_batching=on"]))


def test_a_call_without_a_batched_form_is_refused_at_run_time_under_on(tmp_path):
    """The objective the round actually builds is asked again when the clients are mapped."""
    from fgx.algorithms.moon import Contrastive
    from fgx.federation.client import local_update

    job = build(tmp_path, "algorithm=fedavg", "model=gcn", "executor=batched", "executor.client_batching=on")
    job.executor.start_round(0, 1)
    with pytest.raises(RuntimeError, match="Contrastive has no batched form"):
        job.executor.map(local_update, job.algo.states, None, job.algo.params, 0, Contrastive(1.0, 0.5))


# -- the one loop ----------------------------------------------------------------------------------------

def test_the_loop_calls_the_objectives_hooks_in_order(tmp_path):
    """start before the weights are loaded, term after each forward, before_step between backward and
    the optimiser step, finish with the update; what finish returns travels up as ClientUpdate.sent."""
    from fgx.federation.client import Objective, local_update

    job = build(tmp_path, "algorithm=fedavg", "model=gcn", "algorithm.local_steps=3")
    state, events = job.algo.states[0], []
    weights = {k: v + 1.0 for k, v in state.model.state_dict().items()}

    class Spy(Objective):
        def start(self, s, w):
            events.append(("start", float(next(s.model.parameters()).detach().sum()) != float(next(iter(w.values())).sum())))
            return self

        def term(self, s, step):
            events.append(("term", step.items.numel()))
            return None

        def before_step(self, s):
            events.append(("before_step", all(q.grad is not None for q in s.model.parameters())))

        def finish(self, s, delta):
            events.append(("finish", sorted(delta) == sorted(weights)))
            return "sent"

    u = local_update(state, weights, job.algo.params, 0, Spy())
    n = int(state.view.train_mask.sum())
    assert events == [("start", True)] + [("term", n), ("before_step", True)] * 3 + [("finish", True)]
    assert u.sent == "sent" and u.loss.loss == u.loss.ce and u.loss.term == 0.0


def test_an_objectives_term_and_gradient_hook_act_in_the_loop(tmp_path):
    """A term pulls the trained weights and a before_step that zeroes the gradients freezes them: both
    act through the one loop every method trains in."""
    from fgx.federation.client import Objective, local_training

    class Zero(Objective):
        def before_step(self, s):
            for q in s.model.parameters():
                q.grad.zero_()

    class Big(Objective):
        def term(self, s, step):
            return 100.0 * sum(q.pow(2).sum() for q in s.model.parameters())

    job = build(tmp_path, "algorithm=local", "model=gcn", "model.dropout=0", "algorithm.optimizer=sgd",
                "algorithm.weight_decay=0")
    s = job.algo.states[0]
    start = {k: v.clone() for k, v in s.model.state_dict().items()}
    local_training(s, 3, None, torch.Generator().manual_seed(0), Zero())
    assert all(torch.equal(start[k], v) for k, v in s.model.state_dict().items())
    plain = local_training(s, 1, None, torch.Generator().manual_seed(0))
    s.model.load_state_dict(start)
    big = local_training(s, 1, None, torch.Generator().manual_seed(0), Big())
    assert big.term > 0 and big.loss == pytest.approx(big.ce + big.term, rel=1e-6) and big.ce == pytest.approx(plain.ce)


def test_a_term_that_vanishes_at_the_start_weights_is_skipped_on_the_first_step_only(tmp_path, monkeypatch):
    """FedProx's term is zero with its gradient at the weights the clients load: the loop skips it on the first
    step from them (issue #68's speed), and a local update is then bit for bit what computing it gives; the
    later steps still compute it (their term is positive and moves the weights)."""
    from fgx.algorithms.fedprox import Proximal
    from fgx.federation.client import local_update

    job = build(tmp_path, "algorithm=fedprox", "algorithm.mu=5.0", "model=gcn", "model.dropout=0",
                "algorithm.local_steps=3")
    state = job.algo.states[0]
    weights = {k: v.clone() for k, v in state.model.state_dict().items()}
    optimiser = copy.deepcopy(state.optimizer.state_dict())
    calls = []
    real = Proximal.term
    monkeypatch.setattr(Proximal, "term", lambda self, s, step: calls.append(1) or real(self, s, step))

    def update(vanishes: bool, mu: float = 5.0):
        monkeypatch.setattr(Proximal, "vanishes_at_start", vanishes)
        calls.clear()
        state.optimizer.load_state_dict(copy.deepcopy(optimiser))
        u = local_update(state, weights, job.algo.params, 0, Proximal(mu, weights))
        return u, len(calls), {k: v.clone() for k, v in state.model.state_dict().items()}

    (skipped, n_skipped, w_skipped), (computed, n_computed, w_computed) = update(True), update(False)
    assert (n_skipped, n_computed) == (2, 3)
    assert all(torch.equal(w_skipped[k], w_computed[k]) for k in w_computed)
    assert (skipped.loss.loss, skipped.loss.ce, skipped.loss.term) == (computed.loss.loss, computed.loss.ce, computed.loss.term)
    _, _, w_plain = update(True, mu=0.0)
    assert skipped.loss.term > 0 and any(not torch.equal(w_skipped[k], w_plain[k]) for k in w_plain)


@pytest.mark.parametrize("algorithm,model", [("fedsage_plus", "sage"), ("ce_fedgnn", "gcn"), ("adafgl", "gcn"),
                                             ("fedgcn", "gcn")])
def test_client_batching_on_refuses_methods_with_client_work_of_their_own(algorithm, model):
    """A method some of whose client calls are not local_update declares no objective (``objective = None``):
    client_batching=on refuses it before work rather than in the middle of a run."""
    from fgx.cli import compose
    from fgx.config import validate

    extra = ["dataset.features_public=true"] if algorithm == "fedgcn" else []
    with pytest.raises(ConfigError, match=f"executor.client_batching.*'{algorithm}' runs client work of its own"):
        validate(compose([*BASE, f"algorithm={algorithm}", f"model={model}", *extra, "executor=batched",
                          "executor.client_batching=on"]))
