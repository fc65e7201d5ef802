"""Paper tables: a table's spec and checks, its records, running it, tuning it, and the reproduction doc.

    spec.py        the preset and targets of a table, what its sweep expands to
    stats.py       how an ordering is decided: seeds and test items in one test, Holm across the table
    seeds.py       the seeds rule, stated per table; tally.py: every table's decisions as JSON (--tally)
    checks.py      the checks (paper values, orderings, floor, equal effort, training progress), the status
    records.py     results/NAME.json: per-run entries with their own provenance; staleness by config and code
    accounting/    tables that are arithmetic, one registered kind per file
    run.py         `fgx repro`: launch the sweep (fgx.launch), collect, record, compute
    tune.py        `fgx tune`: every method the same validation budget
    render.py, docs.py   one table as markdown; docs/REPRODUCTION.md

fgx/report/ only reads run directories; everything that launches or judges a table lives here.
"""
