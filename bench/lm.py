"""Language-model benchmark: validity, model passes and time per program, perplexity, and how
closely the model's choices follow the random sampler's on held-out tasks.

    .venv/bin/python bench/lm.py --model DIR [--data SAMPLEDIR] [--workloads mobilenet_v2 bert_tiny]
        [--tasks-per-workload 3] [--per-task 32] [--timing 16] [--batch-size 16] [--out bench/results]

On `--tasks-per-workload` tasks of each workload (held-out test workloads by default; the largest
by weight x FLOPs, one per operator kind before repeats):
  - validity: every program the model samples (`Generator.sample`, duplicates included) must be
    valid (no error) and parse back to its own sentence; the script exits 1 otherwise;
  - model passes and milliseconds per program: `Generator.generate` of `--timing` distinct
    programs per task, batched (`--batch-size`) and at batch size 1, on the CPU with `--threads`
    torch threads (one prompt pass per task included);
  - perplexity: exp(validation loss per word) as pretraining recorded it in the model directory,
    else on held-out sentences of `--data`; and on random programs of the benchmark's tasks;
  - choice distribution, two ways, each also for an untrained model of the same size:
    exact: at every value word of the model's sampled programs that has more than one valid
    continuation, the total-variation distance between the model's next-word distribution
    (restricted to the valid words, as generation samples) and the random sampler's (uniform
    over the valid choices: the share of choices under each word), averaged; no sampling noise;
    empirical: per decision point (task, design space, decision index; the space choice is a
    point too), the distance between the empirical distributions of the model's sampled choices
    and of `random_program`'s, averaged over points seen `--min-count` times in both, with a
    second random sample as the reference (the noise floor at this sample size).
Writes OUT/lm.json and OUT/lm.md.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import random
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def pick_tasks(tasks, k: int):
    """The k largest tasks (weight x FLOPs), one per operator kind before any kind repeats."""
    order = sorted(tasks, key=lambda t: (-t.weight * t.flops, t.name))
    first, rest, kinds = [], [], set()
    for t in order:
        (rest if t.kind in kinds else first).append(t)
        kinds.add(t.kind)
    return (first + rest)[:k]


def choice_counts(task_hash: str, progs) -> dict[tuple, Counter]:
    """{(task, space, decision index) or (task, 'space'): Counter of choices} over valid programs."""
    out: dict[tuple, Counter] = defaultdict(Counter)
    for p in progs:
        if p.error:
            continue
        out[(task_hash, "space")][p.space] += 1
        for k, d in enumerate(p.decisions):
            out[(task_hash, p.space, k)][tuple(d) if isinstance(d, (list, tuple)) else d] += 1
    return out


def tv_distance(a: dict[tuple, Counter], b: dict[tuple, Counter], min_count: int) -> tuple[float | None, int]:
    """Mean total-variation distance over the points with at least min_count samples in both."""
    dists = []
    for key in sorted(set(a) & set(b), key=str):
        na, nb = sum(a[key].values()), sum(b[key].values())
        if na < min_count or nb < min_count:
            continue
        vals = set(a[key]) | set(b[key])
        dists.append(0.5 * sum(abs(a[key][v] / na - b[key][v] / nb) for v in vals))
    return (sum(dists) / len(dists) if dists else None), len(dists)


def mean_word_loss(lm, sentences: list[str], batch: int = 16) -> float | None:
    """Mean next-word loss (nats) as pretraining's validation loss: <bos> words <eos>."""
    import torch

    from tlm.model.pretrain import sentence_batch

    total = count = 0.0
    with torch.no_grad():
        for i in range(0, len(sentences), batch):
            ids, mask, labels = sentence_batch(lm.vocab, sentences[i : i + batch], str(lm.model.device))
            n = int((labels[:, 1:] != -100).sum())
            total += float(lm.model(input_ids=ids, attention_mask=mask, labels=labels).loss) * n
            count += n
    return total / count if count else None


def recorded_val_loss(model_dir: Path, data: str | None, lm, max_val: int) -> tuple[float | None, str]:
    """Validation loss as pretraining recorded it, else computed on held-out sentences of `data`."""
    meta = lm.meta
    if meta.get("val_loss") is not None:
        return float(meta["val_loss"]), "tlm.json (pretraining)"
    state = model_dir / "checkpoint" / "state.json"
    if state.is_file():
        hist = [h for h in json.loads(state.read_text()).get("history", []) if h.get("val_loss") is not None]
        if hist:
            return float(hist[-1]["val_loss"]), "checkpoint/state.json (pretraining)"
    if not data:
        return None, "none (no record, no --data)"
    from tlm.model.pretrain import PretrainConfig, split_sentences
    from tlm.space.sampling import read_shards

    sentences = [r["sentence"] for r in read_shards(data)]
    train_json = model_dir / "train.json"
    if train_json.is_file():  # the very split pretraining held out
        cfg = json.loads(train_json.read_text()).get("config", {})
        keep = {k: cfg[k] for k in ("seed", "val_fraction", "max_val") if k in cfg}
        _, val = split_sentences(sentences, PretrainConfig(**keep))
        where = f"{data} (pretraining's held-out split)"
    else:
        val = sorted(set(sentences))
        random.Random(0).shuffle(val)
        where = f"{data} (all sentences; not known to be held out)"
    return mean_word_loss(lm, val[:max_val]), where


def _leaves(node: dict) -> int:
    return sum(1 if k is None else _leaves(v) for k, v in node.items())


def word_tv(lm, task, target, space, sentence: str) -> list[float]:
    """Exact per-word distances of a valid sentence: model next-word distribution over the valid
    words vs the random sampler's (uniform over choices), at every word with several valid words."""
    import torch

    from tlm.model.choices import choice_trie
    from tlm.space.design import walk
    from tlm.space.language import context_tokens, prompt_tokens

    vocab = lm.vocab
    ids = [vocab.bos] + vocab.encode(sentence.split())
    with torch.no_grad():
        logits = lm.model(input_ids=torch.tensor([ids], device=lm.model.device)).logits[0].float()
    out: list[float] = []
    pos = len(prompt_tokens(task, target))  # word index; logits[pos] predicts word pos (= ids[pos + 1])

    def policy(point):
        nonlocal pos
        pos += len(context_tokens(point))
        node = choice_trie(point, vocab)
        while None not in node:
            if len(node) > 1:
                allowed = list(node)
                p = torch.softmax(logits[pos][torch.tensor(allowed, device=logits.device)], -1).cpu()
                q = torch.tensor([_leaves(node[a]) for a in allowed], dtype=torch.float32)
                out.append(0.5 * float((p - q / q.sum()).abs().sum()))
            node = node[ids[pos + 1]]
            pos += 1
        return node[None]

    prog = walk(space, policy, postproc=False)
    if prog.error:
        raise RuntimeError(f"sentence does not replay: {prog.error}")
    return out


def untrained_like(lm, seed: int):
    """A freshly initialised model of the same size and vocabulary."""
    import torch
    from transformers import GPT2LMHeadModel

    from tlm.model.lm import LoadedModel

    torch.manual_seed(seed)
    model = GPT2LMHeadModel(lm.model.config).to(lm.model.device).eval()
    return LoadedModel(model, lm.vocab, dict(lm.meta), lm.path)


def round_trips(task, target, space, g) -> bool:
    from tlm.errors import TlmError
    from tlm.space.language import parse, render

    try:
        prog = parse(g.sentence, task, target, space=space)
    except TlmError:
        return False
    return render(prog, task, target) == g.sentence and [list(d) if isinstance(d, tuple) else d for d in prog.decisions] == g.decisions


def timed(gen, task, n: int, batch_size: int, seed: int) -> tuple[float, int, int]:
    calls, start = gen.forward_calls, time.perf_counter()
    out = gen.generate(task, n, seed=seed, batch_size=batch_size)
    return time.perf_counter() - start, gen.forward_calls - calls, len(out)


def run(args) -> dict:
    import torch

    from tlm.graph.extract import tasks_for_source
    from tlm.graph.zoo import list_workloads
    from tlm.model.generate import Generator
    from tlm.model.lm import load_model
    from tlm.space.design import random_program, task_space

    torch.set_num_threads(args.threads)
    model_dir = Path(args.model)
    lm = load_model(model_dir, args.device)
    tests = {w.name for w in list_workloads("test")} | {w.family for w in list_workloads("test")}
    tasks, target, held_out = [], None, {}
    for name in args.workloads:
        ts = tasks_for_source(name)
        target = target or ts.target
        held_out[name] = name in tests
        tasks += [(name, t) for t in pick_tasks(ts.tasks, args.tasks_per_workload)]
    gen = Generator(lm, target)
    ref = Generator(untrained_like(lm, args.seed), target)

    rows, dist = [], {"model": ({}, {}), "untrained": ({}, {}), "random": ({}, {})}
    totals = Counter()
    random_sentences: list[str] = []
    words_tv: dict[str, list[float]] = {"model": [], "untrained": []}
    for i, (wl, task) in enumerate(tasks):
        from tlm.space.language import render

        t0 = time.perf_counter()
        space = task_space(task, target)
        rng = random.Random(args.seed * 7919 + i)
        rand = [random_program(task, target, rng) for _ in range(2 * args.per_task)]
        random_sentences += [render(p, task, target) for p in rand[: args.per_task] if p.ok]
        samples = gen.sample(task, args.per_task, seed=args.seed + i, batch_size=args.batch_size)
        untrained = ref.sample(task, args.per_task, seed=args.seed + i, batch_size=args.batch_size)
        valid = [g for g in samples if g.error is None and round_trips(task, target, space, g)]
        valid_ref = [g for g in untrained if g.error is None and round_trips(task, target, space, g)]
        exact = {"model": [w for g in valid for w in word_tv(lm, task, target, space, g.sentence)],
                 "untrained": [w for g in valid_ref for w in word_tv(ref.lm, task, target, space, g.sentence)]}
        for who, ws in exact.items():
            words_tv[who] += ws
        for who, progs in (("model", samples), ("untrained", untrained), ("random", rand[args.per_task :])):
            dist[who][0].update(choice_counts(task.hash, progs))
        dist["model"][1].update(choice_counts(task.hash, rand[: args.per_task]))
        dist["untrained"][1].update(choice_counts(task.hash, rand[: args.per_task]))
        dist["random"][1].update(choice_counts(task.hash, rand[: args.per_task]))
        sec_b, calls_b, n_b = timed(gen, task, args.timing, args.batch_size, args.seed + i)
        sec_1, calls_1, n_1 = timed(gen, task, args.timing, 1, args.seed + i)
        totals.update(sampled=len(samples), valid=len(valid), ref_sampled=len(untrained), ref_valid=len(valid_ref),
                      n_b=n_b, calls_b=calls_b, n_1=n_1, calls_1=calls_1)
        totals["sec_b"] += sec_b
        totals["sec_1"] += sec_1
        tv = {who: tv_distance(choice_counts(task.hash, a_progs), choice_counts(task.hash, rand[: args.per_task]),
                               args.min_count)[0]
              for who, a_progs in (("model", samples), ("untrained", untrained), ("random", rand[args.per_task :]))}
        rows.append({"workload": wl, "task": task.name, "kind": task.kind, "hash": task.hash,
                     "sampled": len(samples), "valid": len(valid), "distinct": len({g.sentence for g in samples}),
                     "words": sum(len(g.sentence.split()) for g in valid) / max(1, len(valid)),
                     "ms_per_program_batched": 1000 * sec_b / max(1, n_b), "ms_per_program_b1": 1000 * sec_1 / max(1, n_1),
                     "passes_per_program_batched": calls_b / max(1, n_b), "passes_per_program_b1": calls_1 / max(1, n_1),
                     "word_tv_model": _mean(exact["model"]), "word_tv_untrained": _mean(exact["untrained"]),
                     "tv_model": tv["model"], "tv_untrained": tv["untrained"], "tv_random": tv["random"],
                     "seconds": time.perf_counter() - t0})
        r = rows[-1]
        print(f"[{i + 1}/{len(tasks)}] {wl} {task.name}: {r['valid']}/{r['sampled']} valid, "
              f"{r['ms_per_program_batched']:.1f} / {r['ms_per_program_b1']:.1f} ms per program (batched / 1), "
              f"word TV {_f(r['word_tv_model'])} (untrained {_f(r['word_tv_untrained'])}), "
              f"empirical TV {_f(r['tv_model'])} (untrained {_f(r['tv_untrained'])}, noise {_f(r['tv_random'])})", flush=True)

    val_loss, val_source = recorded_val_loss(model_dir, args.data, lm, args.max_val)
    task_loss = mean_word_loss(lm, random_sentences)
    tv = {who: tv_distance(a, b, args.min_count) for who, (a, b) in dist.items()}
    return {
        "model": str(model_dir), "preset": lm.meta.get("preset"), "step": lm.meta.get("step"),
        "parameters": sum(p.numel() for p in lm.model.parameters()), "vocab": len(lm.vocab),
        "workloads": held_out, "tasks": len(tasks), "per_task": args.per_task, "timing_programs": args.timing,
        "batch_size": args.batch_size, "threads": args.threads, "device": args.device,
        "host": {"machine": platform.machine(), "python": platform.python_version(), "torch": torch.__version__,
                 "target": target.config if target else None},
        "validity": totals["valid"] / max(1, totals["sampled"]), "sampled": totals["sampled"], "valid": totals["valid"],
        "validity_untrained": totals["ref_valid"] / max(1, totals["ref_sampled"]),
        "passes_per_program_batched": totals["calls_b"] / max(1, totals["n_b"]),
        "passes_per_program_b1": totals["calls_1"] / max(1, totals["n_1"]),
        "ms_per_program_batched": 1000 * totals["sec_b"] / max(1, totals["n_b"]),
        "ms_per_program_b1": 1000 * totals["sec_1"] / max(1, totals["n_1"]),
        "val_loss": val_loss, "val_perplexity": math.exp(val_loss) if val_loss is not None else None,
        "val_source": val_source,
        "task_loss": task_loss, "task_perplexity": math.exp(task_loss) if task_loss is not None else None,
        "word_tv_model": _mean(words_tv["model"]), "word_tv_untrained": _mean(words_tv["untrained"]),
        "word_tv_words": len(words_tv["model"]),
        "tv_model": tv["model"][0], "tv_untrained": tv["untrained"][0], "tv_random_noise": tv["random"][0],
        "tv_points": tv["model"][1], "min_count": args.min_count,
        "rows": rows,
    }


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _f(x, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def markdown(res: dict) -> str:
    wl = ", ".join(f"{k}{'' if v else ' (not a test workload)'}" for k, v in res["workloads"].items())
    lines = [
        "# Language-model benchmark",
        "",
        f"Model `{res['model']}` (preset {res['preset']}, step {res['step']}, {res['parameters'] / 1e6:.2f} M parameters, "
        f"vocabulary {res['vocab']}) on {res['tasks']} tasks of {wl}; {res['per_task']} sampled programs per task, "
        f"{res['timing_programs']} timed; {res['device']}, {res['threads']} torch thread(s). `python bench/lm.py` writes this file.",
        "",
        "| metric | value |",
        "|---|---|",
        f"| validity (sampled programs valid and round-tripping) | {100 * res['validity']:.1f}% ({res['valid']}/{res['sampled']}) |",
        f"| model passes per valid program, batch {res['batch_size']} | {_f(res['passes_per_program_batched'], 2)} |",
        f"| model passes per valid program, batch 1 | {_f(res['passes_per_program_b1'], 2)} |",
        f"| ms per program, batch {res['batch_size']} | {_f(res['ms_per_program_batched'], 1)} |",
        f"| ms per program, batch 1 | {_f(res['ms_per_program_b1'], 1)} |",
        f"| validation perplexity ({res['val_source']}) | {_f(res['val_perplexity'], 3)} |",
        f"| perplexity on random programs of these tasks | {_f(res['task_perplexity'], 3)} |",
        f"| choice distribution vs the random sampler, exact per-word TV: model | {_f(res['word_tv_model'])} |",
        f"| ... untrained model of the same size | {_f(res['word_tv_untrained'])} |",
        f"| empirical per-decision TV: model | {_f(res['tv_model'])} |",
        f"| ... untrained model of the same size | {_f(res['tv_untrained'])} |",
        f"| ... a second random sample (noise floor) | {_f(res['tv_random_noise'])} |",
        "",
        "Total-variation distances: 0 is identical, 1 disjoint. Exact per-word TV: the mean over "
        f"{res['word_tv_words']} value words with several valid continuations in the model's samples of the distance "
        "between the model's next-word distribution over the valid words and the random sampler's (uniform over "
        "the valid choices). Empirical TV: the mean over "
        f"{res['tv_points']} decision points seen at least {res['min_count']} times in both samples; it is biased "
        "upwards at small samples, so compare it with the noise floor.",
        "",
        "| workload | task | kind | valid | distinct | words | ms/prog batched | ms/prog b1 | passes/prog batched | "
        "passes/prog b1 | word TV model | word TV untrained | TV model | TV untrained | TV noise |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in res["rows"]:
        lines.append(f"| {r['workload']} | {r['task']} | {r['kind']} | {r['valid']}/{r['sampled']} | {r['distinct']} | "
                     f"{r['words']:.0f} | {r['ms_per_program_batched']:.1f} | {r['ms_per_program_b1']:.1f} | "
                     f"{r['passes_per_program_batched']:.2f} | {r['passes_per_program_b1']:.2f} | "
                     f"{_f(r['word_tv_model'])} | {_f(r['word_tv_untrained'])} | {_f(r['tv_model'])} | "
                     f"{_f(r['tv_untrained'])} | {_f(r['tv_random'])} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    import warnings

    warnings.filterwarnings("ignore")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="model directory (tlm pretrain --out)")
    p.add_argument("--data", default=None, help="sampling directory for the validation perplexity if not recorded")
    p.add_argument("--workloads", nargs="+", default=["mobilenet_v2", "bert_tiny"])
    p.add_argument("--tasks-per-workload", type=int, default=3)
    p.add_argument("--per-task", type=int, default=32, help="programs sampled per task (validity, distributions)")
    p.add_argument("--timing", type=int, default=16, help="distinct programs generated per task and batch size")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--min-count", type=int, default=8, help="samples a decision point needs in both for its TV")
    p.add_argument("--max-val", type=int, default=500, help="held-out sentences of --data at most")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1: steadiest on a shared CPU)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = p.parse_args(argv)
    res = run(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "lm.json").write_text(json.dumps(res, indent=1) + "\n")
    (out / "lm.md").write_text(markdown(res))
    print(markdown(res))
    if res["validity"] < 1.0:
        print(f"error: only {100 * res['validity']:.1f}% of the sampled programs are valid", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
