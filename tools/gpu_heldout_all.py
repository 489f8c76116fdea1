"""The candidates of one held-out GPU bundle with every contender, measured on one card in one call
(tools/gpu_prepare.sh; issue 49): MetaSchedule@64's first-round programs (those of the bundle measured on
an H100 on 2026-11-27), the random programs of bundle-h (built for the H200: re-prompted for the H100,
the same programs, only the card's words differ) and the shipped GPU TLM's 32 samples per task.

    python tools/gpu_heldout_all.py TLM_CANDIDATES OUT_JSONL
"""
import json
import sys
from tlm.graph.target import resolve_target
from tlm.measure.cuda_measure import read_manifest
from tlm.measure.gpu_bundle import read_tasks
from tlm.space.language import reprompt

h100, h200 = resolve_target("h100"), resolve_target("h200")
out = []
ms = read_manifest("results/gpu/bundles/bundle-heldout")
for e in ms["tasks"]:
    out += [{"task": e["hash"], "proposer": "metaschedule", "sentence": c["sentence"]}
            for c in e["candidates"] if c.get("proposer") == "metaschedule"]
rb = "results/gpu/bundles/bundle-h"
rm, rt = read_manifest(rb), read_tasks(rb)
held = {e["hash"] for e in ms["tasks"]}
for e in rm["tasks"]:
    if e["hash"] not in held:
        continue
    for c in e["candidates"]:
        out.append({"task": e["hash"], "proposer": "random", "sentence": reprompt(c["sentence"], rt[e["hash"]], h200, h100)})
out += [json.loads(line) for line in open(sys.argv[1])]
with open(sys.argv[2], "w") as f:
    for r in out:
        f.write(json.dumps(r) + "\n")
from collections import Counter
print(Counter(r["proposer"] for r in out))
