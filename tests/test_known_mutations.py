"""scripts/known_mutations.py stays a live guard: a mutation whose snippet no longer occurs in its file is
skipped as "not applicable" when the script runs, so a refactor could retire a guard without anyone
noticing. Each snippet occurs exactly once in its file and each killing test's file exists."""
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import known_mutations  # noqa: E402

MUTATIONS = known_mutations.MUTATIONS


def test_names_are_unique():
    names = [m.name for m in MUTATIONS]
    assert len(names) == len(set(names)), sorted({n for n in names if names.count(n) > 1})


@pytest.mark.parametrize("m", MUTATIONS, ids=[m.name for m in MUTATIONS])
def test_each_mutation_applies_once_and_names_existing_tests(m):
    text = (REPO / m.path).read_text()
    assert text.count(m.old) == 1, f"{m.name}: its snippet occurs {text.count(m.old)} times in {m.path}"
    assert m.old != m.new
    for t in m.tests:
        assert (REPO / t.split("::")[0]).is_file(), f"{m.name}: no test file {t}"
