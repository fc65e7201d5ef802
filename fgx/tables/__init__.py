"""Paper tables: a table's spec and checks, its records, running it, tuning it, and the reproduction doc.

    spec.py        the preset and targets of a table, what its sweep expands to
    stats.py       how an ordering is decided on paired seeds (holds / fails / inconclusive)
    checks.py      the checks (paper values, orderings, floor, equal effort, training progress), the status
    records.py     results/NAME.json: per-run entries with their own provenance; staleness by config and code
    accounting/    tables that are arithmetic, one registered kind per file
    run.py         `fgx repro`: launch the sweep (fgx.launch), collect, record, compute
    tune.py        `fgx tune`: every method the same validation budget
    render.py, docs.py   one table as markdown; docs/REPRODUCTION.md

fgx/report/ only reads run directories; everything that launches or judges a table lives here. The
commands (fgx/commands/repro.py, tune.py) use the names below and nothing else of the package; a table
that cannot be loaded, run, recorded or checked raises TablesError.
"""
from fgx.tables.docs import reproduction_markdown
from fgx.tables.errors import TablesError
from fgx.tables.render import markdown
from fgx.tables.run import identical_rows, record_result, reproduce
from fgx.tables.spec import load_targets, table_names
from fgx.tables.spotcheck import TOLERANCE, spot_check
from fgx.tables.tune import tune as tune_table     # fgx.tables.tune stays the module

__all__ = ["TOLERANCE", "TablesError", "identical_rows", "load_targets", "markdown", "record_result", "reproduce",
           "reproduction_markdown", "spot_check", "table_names", "tune_table"]
