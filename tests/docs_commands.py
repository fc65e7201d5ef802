"""Every `fgx ...` command written in README.md and docs/*.md, found the way a reader finds them.

Where commands are found:
- code blocks (fenced or indented): every line whose first word (after `$ `, environment assignments
  such as `OMP_NUM_THREADS=1` and `time`/`nice -n 10`) is `fgx`, with `\\` continuation lines;
  commands chained with `&&` or `;` count one by one;
- inline code spans in prose: `` `fgx run ...` ``.
- ```console blocks: lines starting with `$ ` are commands, the lines after one (up to the next
  `$ `) are its expected output, which the slow docs test compares with what the command prints.
  Blocks with the info string `text` are output only (no commands).

Marks, written in the command's trailing shell comment (inside the code span for inline commands):
- `[your data]`       the command needs data the user must bring (a Kaggle CSV, their own runs):
                      resolved by the fast test, not run by the slow one;
- `[your cluster]`    it needs a Ray or SLURM cluster: likewise;
- `[full scale: SIZE, ~TIME]`  a full-scale example (its size and expected time on a laptop-class
                      machine, or `time not yet measured`): resolved by the fast test, not run by the slow one;
- `[refused]`         the doc shows a command fgx refuses (a config error is the point): the fast
                      test checks that it is refused, the slow one does not run it.

A command is a *usage pattern*, not an example, when a word in it is a placeholder the test cannot
fill in: `NAME`-like capitals, `<something>` other than the known ones below, `[optional]` words,
`a|b` alternatives or `...`. Patterns are checked for their subcommand and option names only.
Known placeholders: `<data root ...>`/`<root>` (the data root, also every `data_dir=` value) and the
run directories a previous command of the same page wrote: `outputs/multirun/<date>/<time>`,
`outputs/<date>/<time>`, `<dir>`, `<runs>`, `<run dir>`.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MARKS = ("your data", "your cluster", "full scale", "refused")
RUN_PLACEHOLDERS = ("outputs/multirun/<date>/<time>", "outputs/<date>/<time>", "<dir>", "<runs>", "<run_dir>")
_WRAPPERS = {"time", "/usr/bin/time", "nice", "-n", "$", "env"}
_ENV = re.compile(r"^[A-Z_][A-Z0-9_]*=")
_DATA_PLACEHOLDER = re.compile(r"<(data_)?root[^>]*>")
_MARK = re.compile(r"\[(your data|your cluster|full scale|refused)(:[^\]]*)?\]")


@dataclass
class DocCommand:
    file: str                    # path relative to the repo
    line: int                    # 1-based line of the command's first line
    text: str                    # the command as written (continuations joined, comment removed)
    argv: list[str]              # the tokens after `fgx`
    env: dict[str, str]          # VAR=value written before `fgx`
    comment: str = ""            # the trailing shell comment
    inline: bool = False         # from an inline code span in prose
    expected_output: str | None = None   # console blocks: the lines printed after the command
    output_options: dict = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def subcommand(self) -> str:
        return self.argv[0] if self.argv else ""

    @property
    def marks(self) -> dict[str, str]:
        """mark -> its detail (`full scale: 5M edges, ~10 min` -> {'full scale': '5M edges, ~10 min'})."""
        return {m.group(1): (m.group(2) or "")[1:].strip() for m in _MARK.finditer(self.comment)}

    @property
    def pattern_words(self) -> list[str]:
        """Placeholders that make this a usage pattern rather than a runnable example."""
        out = []
        for tok in self.argv[1:]:
            rest = _DATA_PLACEHOLDER.sub("DATA", tok)
            for ph in RUN_PLACEHOLDERS:
                rest = rest.replace(ph, "RUNS")
            if tok.startswith("data_dir="):
                continue
            if "..." in rest or "…" in rest or "<" in rest or (rest.startswith("[") and not "=" in rest):
                out.append(tok)
            elif re.fullmatch(r"[A-Z][A-Z_]{2,}(=[A-Z_]+)?", rest) and rest not in ("DATA", "RUNS"):
                out.append(tok)
            elif "|" in rest and "=" in rest and not rest.startswith(("'", '"')):
                out.append(tok)
        return out

    @property
    def is_name(self) -> bool:
        """A command named in prose (`fgx report`, `fgx privacy metric-dp`): no arguments."""
        return self.inline and all(re.fullmatch(r"[a-z][a-z-]*", t) for t in self.argv)

    @property
    def is_pattern(self) -> bool:
        return bool(self.pattern_words)

    @property
    def multirun(self) -> bool:
        return self.subcommand == "run" and ("-m" in self.argv or "--multirun" in self.argv)


def _strip_comment(s: str) -> tuple[str, str]:
    """Split `cmd args  # comment` outside quotes."""
    quote = None
    for i, ch in enumerate(s):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or s[i - 1].isspace()):
            return s[:i].rstrip(), s[i + 1:].strip()
    return s.rstrip(), ""


def _segments(s: str) -> list[str]:
    """`a && b ; c | d` -> the commands a, b, c, d (a `|` only with spaces around it: `node|edge` stays)."""
    return [p.strip() for p in re.split(r"\s(?:&&|;|\|\|?)\s|;$", s) if p.strip()]


def parse_command(segment: str) -> tuple[dict[str, str], list[str]] | None:
    """The environment and the fgx argv of one shell command, or None if it does not run fgx."""
    # a placeholder with spaces (`<data root>`) is one word
    segment = re.sub(r"<[^<>]*>", lambda m: m.group(0).replace(" ", "_"), segment)
    try:
        toks = shlex.split(segment)
    except ValueError:
        toks = segment.split()
    if "fgx" not in toks:
        return None
    i = toks.index("fgx")
    env = {}
    for t in toks[:i]:
        if _ENV.match(t):
            k, v = t.split("=", 1)
            env[k] = v
        elif t not in _WRAPPERS and not t.isdigit():
            return None
    return env, toks[i + 1:]


def _commands_in_line(file: str, line_no: int, logical: str, inline: bool) -> list[DocCommand]:
    body, comment = _strip_comment(logical)
    out = []
    for seg in _segments(body):
        parsed = parse_command(seg.lstrip("$ ").strip() if seg.startswith("$ ") else seg)
        if parsed is None or not parsed[1]:
            continue
        env, argv = parsed
        out.append(DocCommand(file, line_no, seg, argv, env, comment, inline))
    return out


def _join_continuations(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    out, cur, start = [], "", None
    for no, text in lines:
        if start is None:
            start = no
        s = text.rstrip()
        if s.endswith("\\"):
            cur += s[:-1].strip() + " "
            continue
        out.append((start, cur + s.strip()))
        cur, start = "", None
    if cur:
        out.append((start, cur.strip()))
    return out


def _commands_in_block(rel: str, block: list[tuple[int, str]]) -> list[DocCommand]:
    """Commands of a shell code block; inside `for VAR in a b c; do ... done` a command using $VAR is
    one command per value."""
    out: list[DocCommand] = []
    loops: list[tuple[str, list[str]]] = []
    for no, logical in _join_continuations(block):
        s = logical.strip()
        m = re.match(r"^for (\w+) in ([^;]+); do$", s)
        if m:
            loops.append((m.group(1), m.group(2).split()))
            continue
        if s == "done" and loops:
            loops.pop()
            continue
        variants = [logical]
        for var, values in loops:
            variants = [re.sub(rf"\$\{{?{var}\}}?(?!\w)", v, text) for text in variants for v in values]
        for text in variants:
            out += _commands_in_line(rel, no, text, inline=False)
    return out


def extract(path: Path, root: Path = REPO) -> list[DocCommand]:
    rel = str(path.relative_to(root))
    lines = path.read_text().splitlines()
    cmds: list[DocCommand] = []
    prose: list[tuple[int, str]] = []
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)(.*)$", lines[i])
        if m:
            fence, lang, opts = m.group(2), m.group(3).lower(), m.group(4)
            block = []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(fence):
                block.append((i + 1, lines[i]))
                i += 1
            i += 1
            if lang == "console":
                cmds += _console_block(rel, block, opts)
            elif lang not in ("text", "python", "yaml", "json", "toml", "latex", "tex"):
                cmds += _commands_in_block(rel, block)
            continue
        line = lines[i]
        if re.match(r"^( {4,}|\t)\S", line) and (not prose or prose[-1][1].strip() == "" or
                                                  re.match(r"^( {4,}|\t)", prose[-1][1])):
            # an indented code block (after a blank line or another indented line)
            block = []
            while i < len(lines) and (re.match(r"^( {4,}|\t)", lines[i]) or
                                      (lines[i].strip() == "" and i + 1 < len(lines)
                                       and re.match(r"^( {4,}|\t)\S", lines[i + 1]))):
                block.append((i + 1, lines[i]))
                prose.append((i + 1, "    "))
                i += 1
            cmds += _commands_in_block(rel, block)
            continue
        prose.append((i + 1, line))
        i += 1
    cmds += _inline_commands(rel, prose)
    return sorted(cmds, key=lambda c: c.line)


def _console_block(rel: str, block: list[tuple[int, str]], opts: str) -> list[DocCommand]:
    options = dict(kv.split("=", 1) for kv in opts.split() if "=" in kv)
    out: list[DocCommand] = []
    current: DocCommand | None = None
    expected: list[str] = []

    def close():
        if current is not None:
            current.expected_output = "\n".join(expected).strip("\n")
            current.output_options = options

    pending: list[tuple[int, str]] = []
    for no, text in block:
        if pending or text.startswith("$ "):
            pending.append((no, text[2:] if text.startswith("$ ") else text))
            if text.rstrip().endswith("\\"):
                continue
            close()
            (start, logical), = _join_continuations(pending)
            pending = []
            found = _commands_in_line(rel, start, logical, inline=False)
            out += found
            current, expected = (found[-1] if found else None), []
            continue
        expected.append(text)
    close()
    return out


def _inline_commands(rel: str, prose: list[tuple[int, str]]) -> list[DocCommand]:
    out = []
    # paragraphs (a code span can wrap onto the next line)
    para: list[tuple[int, str]] = []
    for item in prose + [(0, "")]:
        if item[1].strip():
            para.append(item)
            continue
        if para:
            text = "\n".join(t for _, t in para)
            starts = []
            pos = 0
            for no, t in para:
                starts.append((pos, no))
                pos += len(t) + 1
            for m in re.finditer(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", text, flags=re.S):
                span = " ".join(m.group(2).split())
                if not re.match(r"^(\$ )?([A-Z_][A-Z0-9_]*=\S+ )*fgx [a-z]", span):
                    continue
                line_no = max(no for p, no in starts if p <= m.start())
                out += _commands_in_line(rel, line_no, span.replace("\\|", "|"), inline=True)
            para = []
    return out


def doc_files(root: Path = REPO) -> list[Path]:
    return [root / "README.md"] + sorted((root / "docs").glob("*.md"))


def all_commands(root: Path = REPO) -> list[DocCommand]:
    return [c for f in doc_files(root) for c in extract(f, root)]


def split_shell(text: str) -> list[str]:
    return shlex.split(text)


# ---------------------------------------------------------------- running a command

@dataclass
class Plan:
    argv: list[str]
    env: dict[str, str]
    skip: str | None = None          # why the slow test does not run it
    timeout: int = 300
    ok_codes: tuple[int, ...] = (0,)
    as_written: list[str] | None = None   # the argv without the added rounds=, where one was added


def _latest(root: Path, multirun: bool) -> Path | None:
    base = root / "outputs" / "multirun" if multirun else root / "outputs"
    dirs = [p for p in base.glob("*/*") if p.is_dir() and (multirun or p.parts[-2] != "multirun")]
    return max(dirs, key=lambda p: (p.parent.name, p.name)) if dirs else None


def _fill(tok: str, runs_dir: Path, data_dir: Path) -> str:
    if tok.startswith("data_dir="):
        return f"data_dir={data_dir}"
    tok = re.sub(r"(^|=)/tmp/", lambda m: f"{m.group(1)}{runs_dir}/tmp/", tok)
    tok = _DATA_PLACEHOLDER.sub(str(data_dir), tok)
    for ph in RUN_PLACEHOLDERS:
        if ph in tok:
            found = _latest(runs_dir, True) if "multirun" in ph else (
                _latest(runs_dir, False) if ph.startswith("outputs/") else
                (_latest(runs_dir, True) or _latest(runs_dir, False)))
            if found is not None:
                tok = tok.replace(ph, str(found))
    return tok


def plan_run(cmd: DocCommand, runs_dir: Path, data_dir: Path, rounds: int | None) -> Plan:
    """How the docs test runs `cmd`: placeholders filled in (the data root; run directories an earlier
    command of the page wrote; /tmp/ paths moved under `runs_dir`), `rounds=` set where given, and
    why it is skipped, if it is."""
    argv = [cmd.argv[0]] + [_fill(t, runs_dir, data_dir) for t in cmd.argv[1:]]
    env = {k: (str(data_dir) if k == "FGX_DATA_DIR" else _fill(v, runs_dir, data_dir)) for k, v in cmd.env.items()}
    env.pop("OMP_NUM_THREADS", None)
    plan = Plan(argv, env)
    marks = cmd.marks
    options = cmd.output_options
    if cmd.is_name:
        plan.skip = "a command named in prose"
    elif cmd.is_pattern:
        plan.skip = "a usage pattern"
    elif marks:
        plan.skip = next(iter(marks))
    elif cmd.subcommand == "run":
        from fgx.cli import missing_hydra_plugin

        missing = missing_hydra_plugin(argv[1:])
        if missing:
            plan.skip = missing
        elif any(t in ("device=cuda", "device=auto") for t in argv) and not _has_cuda():
            plan.skip = "needs CUDA" if "device=cuda" in argv else None
    if cmd.subcommand == "tune" and "--dry-run" not in argv:
        plan.argv = argv + ["--dry-run"]   # a tuning run takes long and writes conf/tuned/: its plan is checked
    is_repro_run = cmd.subcommand == "repro" and len(argv) > 1 and not argv[1].startswith("-") and not any(
        t in ("--from", "--docs", "--list", "--dry-run") for t in argv)
    if rounds is not None and (cmd.subcommand == "run" or is_repro_run) and not any(
            t.startswith(("--cfg", "-c", "--help", "--info")) for t in argv):
        plan.as_written = plan.argv
        plan.argv = [t for t in plan.argv if not t.startswith("rounds=")] + [f"rounds={rounds}"]
        if is_repro_run:
            plan.ok_codes = (0, 1)      # a check of the paper's numbers may fail after one round
    if "exit" in options:
        plan.ok_codes = (int(options["exit"]),)
    if "timeout" in options:
        plan.timeout = int(options["timeout"])
    return plan


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


# ---------------------------------------------------------------- comparing printed output

_NUMBER = r"[-+]?(?:\d[\d,]*)?\.?\d+(?:[eE][-+]?\d+)?"
_TOKEN = re.compile(rf"(\.\.\.)|((?<![\w.]){_NUMBER}(?![\w]))|(\s+)")


def _line_pattern(expected: str) -> tuple[re.Pattern, list[str]]:
    parts, numbers, pos = [], [], 0
    for m in _TOKEN.finditer(expected):
        parts.append(re.escape(expected[pos:m.start()]))
        if m.group(1):
            parts.append(".*?")
        elif m.group(2):
            parts.append(f"({_NUMBER})")
            numbers.append(m.group(2))
        else:
            parts.append(r"\s+")
        pos = m.end()
    parts.append(re.escape(expected[pos:]))
    return re.compile("".join(parts)), numbers


def _number_ok(expected: str, actual: str, tolerance: str | None) -> bool:
    e, a = float(expected.replace(",", "")), float(actual.replace(",", ""))
    mantissa = expected.lower().split("e")[0]
    if "." not in mantissa:
        return e == a                        # counts are exact
    if tolerance:
        tol = abs(e) * float(tolerance[:-1]) / 100 if str(tolerance).endswith("%") else float(tolerance)
    else:
        tol = 10.0 ** -len(mantissa.split(".")[1])
        if "e" in expected.lower():
            tol *= 10.0 ** int(expected.lower().split("e")[1])
    return abs(e - a) <= tol * (1 + 1e-9)


def _line_diff(expected: str, actual: str, tolerance: str | None) -> str | None:
    pat, numbers = _line_pattern(expected.strip())
    m = pat.fullmatch(actual.strip())
    if m is None:
        return f"expected {expected.strip()!r}, got {actual.strip()!r}"
    for want, got in zip(numbers, m.groups()):
        if not _number_ok(want, got, tolerance):
            return f"{want} expected, {got} printed (in {actual.strip()!r})"
    return None


def compare_output(expected: str, actual: str, tolerance: str | None = None) -> str | None:
    """None when `actual` matches `expected` line by line: a line `...` stands for any lines, `...`
    inside a line for any text; a number with decimals may differ by one unit of its last printed
    digit (or by `tolerance`: absolute, or `N%`), whole numbers must be equal."""
    exp = [ln.rstrip() for ln in expected.strip("\n").splitlines()]
    act = [ln.rstrip() for ln in actual.strip("\n").splitlines()]
    best: list[str] = []

    def match(i: int, j: int) -> bool:
        if i == len(exp):
            return j == len(act)
        if exp[i].strip() == "...":
            return any(match(i + 1, k) for k in range(j, len(act) + 1))
        if j == len(act):
            best.append(f"line {i + 1} of the expected output ({exp[i].strip()!r}) is missing")
            return False
        d = _line_diff(exp[i], act[j], tolerance)
        if d:
            best.append(f"line {i + 1}: {d}")
            return False
        return match(i + 1, j + 1)

    return None if match(0, 0) else (best[0] if best else "the output differs")


def covering(jobs: list[list[str]]) -> list[list[str]]:
    """A subset of a sweep's jobs in which every swept value occurs at least once (the first job, then
    each job that brings a value not seen yet): what the fast docs test composes of a long sweep."""
    seen: set[str] = set()
    out = []
    for job in jobs:
        if not set(job) <= seen:
            out.append(job)
            seen |= set(job)
    return out
