"""Stage 5, search: tuners spend a measurement budget on a model's tasks.

[Task] + budget  --tuner (proposals -> measurer -> database)-->  summary rows

- base.py         TuneConfig, budgets, seeds and the `Tuner` base every tuner shares
- baselines.py    MetaSchedule's evolutionary search and random programs
- tlm_tuner.py    the language model as the proposer (greedy program, samples, rounds by weight x latency)
- ranking.py      the TLM tuner's cost-model ranking of its samples (boosted per task, parallel loops counted)
- tune.py         `tlm tune`: one entry for every tuner
- loop.py         iterative optimization: generate, measure, fine-tune, in rounds
- loop_finetune.py the loop's fine-tuning process (beside the measuring, or waited for)
- proposals.py    what a round measures for a task: other CPUs' fastest programs, samples, cost-model picks
- loop_cli.py     `tlm loop`
- loop_state.py   the loop's work directory, batches (cycle or gain schedule), stop rule and convergence log
- collect.py      the data engine: the loop, ingesting and flushing the corpus shards (`tlm collect`, `make collect`)
- corpus_curve.py the corpus' first-pass coverage and convergence curve per hardware (`tlm corpus --curve`)
"""
