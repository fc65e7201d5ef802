"""A run stopped right after round 1's checkpoint and resumed (`resume=true`) gives, for every algorithm,
the numbers of the uninterrupted two-round run (tests/fixtures/behaviour_2rounds.json): each algorithm's
state_dict carries everything its later rounds read, and its load_state_dict puts it back."""
from __future__ import annotations

import json

import pytest
import torch

from behaviour_cases import CASES, COMMON, FIXTURE, differences, measure, recorded

RECORDED = json.loads(FIXTURE.read_text())


class Interrupted(Exception):
    pass


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_run_resumed_after_round_1_gives_the_uninterrupted_numbers(name, tmp_path, monkeypatch):
    from fgx.cli import main
    from fgx.outputs import RunDir

    save = RunDir.save_checkpoint

    def stop_after_round_1(self, state):
        save(self, state)
        if state["round"] == 1:
            raise Interrupted("stopped after round 1's checkpoint")

    run_dir = tmp_path / name
    overrides = [*CASES[name], *[o for o in COMMON if not o.startswith("output.checkpoint")],
                 "output.checkpoint=true", "output.checkpoint_every_s=0", f"hydra.run.dir={run_dir}"]
    monkeypatch.chdir(tmp_path)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)          # as the fixture was written
    try:
        monkeypatch.setattr(RunDir, "save_checkpoint", stop_after_round_1)
        assert main(["run", *overrides]) != 0
        assert json.loads((run_dir / "summary.json").read_text())["status"] != "completed"
        monkeypatch.setattr(RunDir, "save_checkpoint", save)
        assert main(["run", *overrides, "resume=true"]) == 0
    finally:
        torch.set_num_threads(threads)
    # the second run continued the first one's checkpoint (a run made again from round 1 would give the
    # same numbers and prove nothing)
    log = (run_dir / "fgx.log").read_text().split("stopped after round 1's checkpoint")[-1]
    assert "resumed from checkpoint at round 1" in log and "run again from round 1" not in log
    bad = differences(measure(run_dir), recorded(RECORDED, name))
    assert not bad, f"{name} resumed differs from the uninterrupted run:\n" + "\n".join(bad[:20])


def test_adafgl_resumed_inside_its_personalised_step_gives_the_uninterrupted_numbers(tmp_path, monkeypatch):
    """The two-round cases stop AdaFGL before step 2; this run stops after round 2, inside step 2
    (extractor_rounds = 1), so the personalised models, their optimisers and the extractor's
    soft labels must come back from the checkpoint."""
    from fgx.cli import main
    from fgx.outputs import RunDir

    save = RunDir.save_checkpoint

    def stop_after_round_2(self, state):
        save(self, state)
        if state["round"] == 2:
            raise Interrupted("stopped after round 2's checkpoint")

    base = [*CASES["adafgl"], *[o for o in COMMON if not o.startswith(("output.checkpoint", "rounds"))],
            "rounds=3", "algorithm.extractor_rounds=1", "output.checkpoint=true", "output.checkpoint_every_s=0"]
    monkeypatch.chdir(tmp_path)
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    assert main(["run", *base, f"hydra.run.dir={whole}"]) == 0
    monkeypatch.setattr(RunDir, "save_checkpoint", stop_after_round_2)
    assert main(["run", *base, f"hydra.run.dir={resumed}"]) != 0
    monkeypatch.setattr(RunDir, "save_checkpoint", save)
    assert main(["run", *base, f"hydra.run.dir={resumed}", "resume=true"]) == 0
    log = (resumed / "fgx.log").read_text().split("stopped after round 2's checkpoint")[-1]
    assert "resumed from checkpoint at round 2" in log
    bad = differences(measure(resumed), measure(whole))
    assert not bad, "\n".join(bad[:20])
