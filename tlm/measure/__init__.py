"""Stage 3, measure: programs are built, checked against the untuned task and timed; every result
is kept.

Candidate (task + schedule)  --measurer-->  MeasureResult (latencies | error)  --database-->  Record

- measurer.py   LLVM build + timed run through MetaSchedule's builder/runner, RPC, batch API
- workers.py    what the builder/runner worker processes run (the output check lives here)
- database.py   the durable SQLite record database; which record a task compiles with
- shards.py     the corpus in git: append-only xz shards per hardware, flushed from / ingested into a database
"""
