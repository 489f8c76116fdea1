"""Stage 2, space: a task's MetaSchedule design spaces, its programs as sentences, random sampling.

Task  --design-->  TaskSpace / Program (decisions)  --language-->  sentence  --sampling-->  shards

- intrin.py     fast registration of TVM's CPU tensor intrinsics (the spaces need them)
- design.py     design spaces and a walk through their decisions with exact choice sets; trace JSON
- inline.py     which blocks a space may inline: costly math read by two blocks is computed once
- serial.py     which tasks run on one thread: a parallel loop costs more than a small task's work
- threads.py    a program's speedup on a model's cores from its parallel loops (records are timed on one)
- locations.py  the valid tile factors and compute locations (by TVM's rules and checks) of one decision
- language.py   tensor sentences: prompt (subgraph + hardware words) and decisions; exact render/parse
- sampling.py   large-scale random sampling into resumable compressed shards (pretraining corpus)
"""
