"""Exact choice sets of MetaSchedule's sampling instructions, computed on the live schedule.

TVM repairs invalid decisions silently (a wrong tile is replaced, a non-candidate compute
location snaps to another one), so the valid choices have to be enumerated here.
"""

from __future__ import annotations

from functools import lru_cache

# Sampling instructions of the default rules, and the short kind names used everywhere else.
KINDS = {
    "SamplePerfectTile": "tile",
    "SampleCategorical": "cat",
    "SampleComputeLocation": "loc",
}
INLINE, ROOT = -2, -1


@lru_cache(maxsize=4096)
def tile_choices(extent: int, n: int, max_innermost: int) -> tuple[tuple[int, ...], ...]:
    """All ordered factorizations of `extent` into `n` factors, innermost <= max_innermost.

    This is exactly the set SamplePerfectTile draws from (a non-positive limit means none).
    """
    if n == 1:
        ok = max_innermost <= 0 or extent <= max_innermost
        return ((extent,),) if ok else ()
    divisors = [d for d in range(1, extent + 1) if extent % d == 0]
    out: list[tuple[int, ...]] = []
    for d in divisors:
        for rest in tile_choices(extent // d, n - 1, max_innermost):
            out.append((d,) + rest)
    return tuple(out)


def location_choices(sch, block_rv) -> tuple[int, ...]:
    """Candidate compute locations of `block_rv` (-2 inline, -1 root, loop indices), ascending:
    the set TVM's SampleComputeLocation draws from (its `CollectComputeLocation`, which no API
    exposes), computed by its own rules with TVM's own checks:
    - inline if `compute_inline` succeeds on a copy of the schedule (TVM's CanComputeInline runs
      the same checks), root always;
    - no consumer, or consumers whose lowest common ancestor is no loop: nothing more;
    - else the loops around the first consumer down to that ancestor, skipping unit loops,
      stopping at a data-parallel loop after a non-data-parallel one and at the non-data-parallel
      loops after the last data-parallel one (TVM's GetLoopIterType), each kept if `compute_at`
      with unit loops preserved succeeds on a copy (TVM's CanComputeAt runs the same checks).
    One check per loop, where probing TVM's repair rule (`probed_location_choices`, which gives
    the same set: tests/space) costs one whole analysis per candidate: 5-9x less time on convs."""
    from tvm.s_tir.schedule import _ffi_api as api

    found = [ROOT]
    if _succeeds(lambda t: api.ScheduleComputeInline(t, block_rv), sch):
        found.append(INLINE)
    # TVM's own functions, not Schedule's methods: their Python argument checks cost more than
    # these calls (about 0.3 ms each; a location decision makes dozens)
    consumers = list(api.ScheduleGetConsumers(sch, block_rv))
    if not consumers:
        return tuple(sorted(found))
    srefs = [api.ScheduleGetSRef(sch, c) for c in consumers]
    boundary = _common_ancestor(srefs) if len(srefs) > 1 else srefs[0].parent
    if boundary is None or type(boundary.stmt).__name__ != "For":
        return tuple(sorted(found))
    loops = list(api.ScheduleGetLoops(sch, consumers[0]))
    pos = next((i for i, lp in enumerate(loops) if api.ScheduleGetSRef(sch, lp).same_as(boundary)), None)
    if pos is None:
        raise RuntimeError("compute location: the consumers' common loop is not around the first consumer")
    loops = loops[: pos + 1]
    types = [str(api.GetLoopIterType(sch, lp)) for lp in loops]  # "S" data parallel, "R" reduction, "O" other
    last_datapar = max((i for i, t in enumerate(types) if t == "S"), default=-1)
    visited_reduce = False
    for i, lp in enumerate(loops):
        extent = api.ScheduleGet(sch, lp).extent
        if hasattr(extent, "value") and int(extent.value) == 1:
            continue
        if types[i] == "S":
            if visited_reduce:
                break
        else:
            visited_reduce = True
            if i > last_datapar:
                break
        if _succeeds(lambda t, lp=lp: api.ScheduleComputeAt(t, block_rv, lp, True, -1), sch):
            found.append(i)
    return tuple(sorted(found))


def _succeeds(primitive, sch) -> bool:
    """Whether a schedule primitive succeeds on a copy of `sch` (the copy is dropped)."""
    from tvm.s_tir.schedule import _ffi_api as api

    try:
        primitive(api.ScheduleCopy(sch))
    except Exception:  # a ScheduleError: TVM's check failed
        return False
    return True


def _common_ancestor(srefs):
    """The lowest common ancestor of srefs (TVM's GetSRefLowestCommonAncestor)."""
    def chain(s):
        out = []
        while s is not None:
            out.append(s)
            s = s.parent
        return out

    others = [chain(s) for s in srefs[1:]]
    for p in chain(srefs[0]):
        if all(any(p.same_as(q) for q in c) for c in others):
            return p
    return None


def probed_location_choices(sch, block_rv) -> tuple[int, ...]:
    """The same set as `location_choices`, read from TVM itself: its repair rule (a decision that
    is not a candidate becomes the largest candidate below it, or root) reveals every candidate
    by probing from the top down, one whole analysis per candidate. Slow; the reference for tests."""
    found: list[int] = []
    probe = 1 << 20
    while True:
        got = probe_location(sch, block_rv, probe)
        if got == ROOT:
            break
        found.append(got)
        probe = got - 1
    found.append(ROOT)
    if probe_location(sch, block_rv, INLINE) == INLINE:
        found.append(INLINE)
    return tuple(sorted(found))


def probe_location(sch, block_rv, decision: int) -> int:
    """The location TVM keeps for `decision`: itself if it is a candidate."""
    trial = sch.copy()
    trial.sample_compute_location(block_rv, decision=decision)
    trace = trial.trace
    return int(trace.get_decision(trace.insts[-1]))


def _attr_str(value) -> str:
    return str(value.value) if hasattr(value, "value") else str(value)


def static_contexts(trace) -> list[dict]:
    """Per sampling instruction of a design-space trace: the parts of its context that do not
    depend on decisions (block, axis, attributes, what a categorical value is used for)."""
    cut = next((k for k, i in enumerate(trace.insts) if i.kind.name == "EnterPostproc"), len(trace.insts))
    insts = list(trace.insts)[:cut]
    names: dict = {}  # rv -> block name (blocks) or (block, axis) (loops)
    out: list[dict] = []
    for k, inst in enumerate(insts):
        kind = inst.kind.name
        ins, outs, attrs = list(inst.inputs), list(inst.outputs), list(inst.attrs)
        if kind == "GetSBlock":
            names[outs[0]] = str(attrs[0])
        elif kind == "GetLoops" and ins:
            for a, loop in enumerate(outs):
                names[loop] = (names.get(ins[0], "?"), str(a))
        elif kind == "Split" and ins:
            block, axis = names.get(ins[0], ("?", "?"))
            for j, loop in enumerate(outs):
                names[loop] = (block, f"{axis}.{j}")
        elif kind == "Fuse" and ins:
            first = names.get(ins[0], ("?", "?"))
            names[outs[0]] = (first[0], "f")
        elif kind in ("CacheRead", "CacheWrite", "ReindexCacheRead", "ReindexCacheWrite") and ins:
            names[outs[0]] = f"{names.get(ins[0], '?')}.{'w' if 'Write' in kind else 'r'}"
        if kind not in KINDS:
            if kind.startswith("Sample"):
                out.append({"kind": kind})  # unsupported; the walker reports it as an error
            continue
        ctx: dict = {"kind": KINDS[kind]}
        if kind == "SamplePerfectTile":
            block, axis = names.get(ins[0], ("?", "?")) if ins else ("?", "?")
            ctx.update(block=block, axis=axis, n=int(attrs[0]), max_innermost=int(attrs[1]))
        elif kind == "SampleCategorical":
            ctx["candidates"] = tuple(int(c) for c in attrs[0])
            ctx["use"] = _categorical_use(insts[k + 1 :], outs[0])
        else:
            ctx["block"] = names.get(ins[0], "?")
        out.append(ctx)
    return out


def _categorical_use(rest, rv) -> str:
    """What a categorical decision feeds: an annotation key (unroll_explicit, ...) or a kind."""
    for inst in rest:
        if any(i.same_as(rv) for i in inst.inputs if hasattr(i, "same_as")):
            if inst.kind.name == "Annotate":
                return _attr_str(inst.attrs[0]).replace("meta_schedule.", "")
            return inst.kind.name.lower()
    return "none"
