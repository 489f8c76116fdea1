"""Stage 7, eval: the paper's evaluation, resumable, with its tables, report and figures.

suite --suites--> plan of steps --run (tune, compile, time)--> databases + step outputs
      --tables--> CSVs --report/plots--> summary.md + PNGs

- suites.py   suites, the run's config and the steps with their outputs
- run.py      `tlm eval`: runs the steps, interleaved end-to-end timing
- tables.py   CSVs from the databases and step outputs
- report.py   summary.md (the paper's tables)
- plots.py    the report's figures
"""
