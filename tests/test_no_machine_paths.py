"""No path of a developer's machine in the committed tree: a newcomer has neither the developers'
folders (home, /root, the build machine's work area) nor their job wrappers, and a `data_dir=` that
names an absolute folder of one machine is a command that works nowhere else. Documented
placeholders (`<data root>`, `/path/to/...`) are what the docs use instead.

The committed records `results/*.json` are checked too: `fgx repro --record` writes a run's data root as
`<data root>` (fgx/tables/records.py, `portable`)."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# the folders of one machine (any file); written split so that this file does not match itself
MACHINE = re.compile("(?<![\\w.])/(?:" + "|".join(["wo" + "rk", "ro" + "ot", "home/[a-z][\\w.-]*", "Us" + "ers/[A-Za-z][\\w.-]*"])
                     + ")/|" + "cpu" + "job")
# an absolute data folder in a command or config (docs, conf, scripts, the package; tests use temp dirs)
DATA_DIR = re.compile(r"(?:data_dir=|--data-dir[= ]|FGX_DATA_DIR=|dataset\.root=)/(?!path/to/)")
DATA_DIR_AREAS = ("README.md", "docs/", "conf/", "scripts/", "fgx/")


def problems(name: str, text: str) -> list[str]:
    found = []
    for no, line in enumerate(text.splitlines(), 1):
        if MACHINE.search(line) or (name.startswith(DATA_DIR_AREAS) and DATA_DIR.search(line)):
            found.append(f"{name}:{no}: {line.strip()[:160]}")
    return found


def committed_files() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [f for f in out.splitlines() if f != "tests/test_no_machine_paths.py"]


def test_no_committed_file_names_a_path_of_one_machine():
    bad = []
    for name in committed_files():
        path = REPO / name
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):     # binary files, a file deleted in the work tree
            continue
        bad += problems(name, text)
    assert not bad, ("machine-specific paths (write <data root>, or a path relative to the checkout):\n"
                     + "\n".join(bad))


@pytest.mark.parametrize("name, line, flagged", [
    ("conf/tuned/t/m.yaml", "# chosen by `fgx tune t data_dir=" + "/wo" + "rk/data-lead`", True),
    ("docs/x.md", "fgx run dataset=cora data_dir=/" + "tmp/fgxdata", True),
    ("scripts/b.py", "python scripts/b.py --data-dir /srv/data", True),
    ("docs/x.md", "/usr/local/bin/" + "cpu" + "job --quiet python scripts/b.py", True),
    ("tests/t.py", "cd " + "/ho" + "me/alice/fgx", True),
    ("docs/x.md", "fgx run dataset=cora data_dir=<data root>", False),
    ("scripts/b.py", "python scripts/b.py --data-dir /path/to/data", False),
    ("docs/x.md", "fgx run dataset=cora data_dir=../shared/data", False),
    ("tests/t.py", 'main(["run", "data_dir=/nonexistent"])', False),
    ("docs/x.md", "the cache lives in ~/.cache/fgx", False),
])
def test_the_guard_tells_machine_paths_from_placeholders(name, line, flagged):
    assert bool(problems(name, line)) == flagged


def test_a_record_entry_names_no_data_root_of_the_machine(tmp_path):
    from fgx.tables.records import portable

    root = tmp_path / "data"
    entry = {"command": f"fgx run data_dir={root} seed=0", "summary": {"data": {"root": str(root),
                                                                           "file": f"{root}/aml/Trans.csv"}}}
    out = portable(entry, [str(root), None])
    assert str(root) not in json.dumps(out) and out["summary"]["data"]["file"] == "<data root>/aml/Trans.csv"
    assert portable({"command": "fgx run data_dir=../shared/data"}, ["../shared/data"]) == \
        {"command": "fgx run data_dir=../shared/data"}          # a relative root stays as it is
