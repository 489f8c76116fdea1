"""Space builder: MetaSchedule design spaces of a task, and a walk through their decisions.

A program is (design-space index, one decision per sampling instruction). Decisions are made in
trace order on the live schedule, because the valid choices depend on earlier ones (loop
extents after splits, compute locations after unit loops). The first decision is the space.

Two ways to walk: `walk(space, policy)` calls `policy(point)` at each decision in one replay
(fast: random sampling, or a language model as the policy); `Walker` is the step-by-step form
(`point`, `choose`, `finish`) that re-replays the prefix at each step.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tlm.errors import TlmError
from tlm.graph.target import TargetInfo, host_target
from tlm.graph.tasks import Task
from tlm.space.locations import location_choices, probe_location, static_contexts, tile_choices

Choice = int | tuple[int, ...]


class DecisionPoint:
    """One decision: kind ('space', 'tile', 'cat', 'loc'), its context, and the valid choices.

    Contexts: space {n}; tile {block, axis, extent, n, max_innermost}; cat {candidates, use};
    loc {block}. Choices are decision values as TVM stores them: the space index, a tuple of
    tile factors, a categorical candidate index, a compute location (-2 inline, -1 root, loop).
    Compute-location choices cost several TVM analyses, so they are computed on first access;
    read them while the point is pending (inside a policy call, or a Walker's current point).
    """

    __slots__ = ("index", "kind", "context", "_choices", "_probe")

    def __init__(self, index: int, kind: str, context: dict[str, Any], choices=None, probe=None):
        self.index, self.kind, self.context = index, kind, context
        self._choices: tuple[Choice, ...] | None = choices
        self._probe = probe  # (schedule, block) for lazy compute-location choices

    @property
    def choices(self) -> tuple[Choice, ...]:
        if self._choices is None:
            if self._probe is None:
                raise TlmError("the choices of this point were not computed while it was pending")
            self._choices = location_choices(*self._probe)
        return self._choices

    def accepts(self, choice: Choice) -> bool:
        """Whether `choice` is valid; for a compute location one TVM probe, not the full set."""
        if self._choices is None and self._probe is not None:
            return isinstance(choice, int) and probe_location(*self._probe, choice) == choice
        return choice in self.choices

    def seal(self) -> None:
        """Drop the live schedule reference (the schedule moves on after the decision)."""
        self._probe = None

    def __repr__(self) -> str:
        return f"DecisionPoint({self.index}, {self.kind!r}, {self.context})"


@dataclass
class Program:
    """A program of a task: the space, the decisions, the contexts seen, and the result."""

    task_hash: str
    space: int
    decisions: list[Choice]  # one per sampling instruction of the space, in trace order
    points: list[DecisionPoint] = field(default_factory=list, repr=False)  # [space point, ...]
    sch: Any = field(default=None, repr=False)  # s_tir.Schedule after postprocessing
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.sch is not None


class _Pause(Exception):
    """Raised inside TVM's decision callback to stop a replay at an undecided point."""


class TaskSpace:
    """The design spaces of one task on one target, with what a replay needs."""

    def __init__(self, task: Task, target: TargetInfo):
        self.task, self.target = task, target
        try:
            ctx = space_context(task, target, num_threads=1)
            spaces = ctx.generate_design_space()
        except Exception as err:  # TVM errors carry long C++ traces; keep one line
            raise TlmError(f"no design space for task {task.name}: {_line(err)}") from None
        if not spaces:
            raise TlmError(f"no design space for task {task.name}")
        self.mod = ctx.mod
        self.postprocs = list(ctx.space_generator.postprocs)
        self.traces = [s.trace for s in spaces]
        self.statics = [static_contexts(t) for t in self.traces]
        self._ctx = ctx  # postprocessors keep a reference to it

    def __len__(self) -> int:
        return len(self.traces)

    @property
    def one_program(self) -> bool:
        """One design space without decisions: the task has exactly one program."""
        return len(self.traces) == 1 and not self.statics[0]

    def space_point(self) -> DecisionPoint:
        return DecisionPoint(0, "space", {"n": len(self.traces)}, tuple(range(len(self.traces))))


# (task hash, target key, task IR) -> spaces. The hash ignores block names, which legalization
# takes from the model's variable numbering (`lv57_sum`): the same layer norm imported in another
# model (or import) has other names, and a space of the first would write programs that the
# second's IR does not replay (its compile then ran TVM's default schedule).
_CACHE: dict[tuple[str, str, str], TaskSpace] = {}


def space_generator(target: TargetInfo):
    """MetaSchedule's space generator for a target, as tlm's spaces use it (and its baseline)."""
    if target.kind != "cuda":
        return "post-order-apply"
    from tvm.s_tir import meta_schedule as ms

    # The tensor-core rules need the CUDA intrinsics (a 25 s import); plain CUDA rules give the
    # SIMT spaces with thread binding.
    return ms.space_generator.PostOrderApply(sch_rules="cuda", postprocs="cuda", mutator_probs="cuda")


def space_context(task: Task, target: TargetInfo, **kwargs):
    """MetaSchedule's TuneContext of a task's design spaces, the same for every tuner (tlm's,
    random, MetaSchedule's): CPU spaces compute costly math that two blocks read once
    (tlm.space.inline) and a task of little work has no parallel loop unless, on several cores,
    it writes enough that another core would have to fetch it (tlm.space.serial)."""
    from tvm.s_tir import meta_schedule as ms

    from tlm.space.inline import space_mod
    from tlm.space.intrin import light_tensor_intrin
    from tlm.space.serial import is_serial, serial_generator

    light_tensor_intrin()  # the spaces' tensor intrinsics, registered once per process
    mod, gen = space_mod(task, target), space_generator(target)
    if is_serial(task, target):  # the target's default rules, resolved by a context of their own
        gen = serial_generator(ms.TuneContext(mod=mod, target=target.tvm(), space_generator=gen, task_name=task.name))
    return ms.TuneContext(mod=mod, target=target.tvm(), space_generator=gen, task_name=task.name, **kwargs)


def task_space(task: Task, target: TargetInfo | None = None) -> TaskSpace:
    """The design spaces of a task, cached per (task hash, target key, IR with its names) in this process."""
    target = target or host_target()
    key = (task.hash, target.key, task.mod_json)
    if key not in _CACHE:
        _CACHE[key] = TaskSpace(task, target)
    return _CACHE[key]


Policy = Callable[[DecisionPoint], Choice]


def walk(space: TaskSpace, policy: Policy, postproc: bool = True) -> Program:
    """Build one program, asking `policy` for every decision (the space first).

    A choice outside the point's choices, a TVM failure or a failed postprocessor gives a
    Program with `error` set (never an exception), so one bad candidate never stops a batch.
    """
    first = space.space_point()
    points: list[DecisionPoint] = [first]
    decisions: list[Choice] = []
    idx = -1
    # A policy that leaves decisions to TVM (random_policy: compute locations) seeds TVM's
    # sampler, so that one seed gives one program in every process.
    tvm_seed = getattr(policy, "tvm_seed", None)
    try:
        idx = _checked(policy, first)
        sch = _replay(space, idx, lambda p: _checked(policy, p), points, decisions,
                      tvm_seed() if tvm_seed else None)
    except _Pause:
        raise
    except Exception as err:  # invalid choice or a TVM error inside the replay
        return Program(space.task.hash, idx, decisions, points, error=_line(err))
    prog = Program(space.task.hash, idx, decisions, points, sch)
    if postproc:
        _finish(space, prog)
    return prog


def _checked(policy: Policy, point: DecisionPoint) -> Choice | None:
    choice = policy(point)
    if choice is None:  # let TVM sample it (its own distribution; uniform for locations)
        return None
    if isinstance(choice, list):
        choice = tuple(choice)
    # A compute location is checked after the replay: TVM would have snapped an invalid one.
    if point.kind == "loc" and point._choices is None:
        return choice
    if choice not in point.choices:
        raise TlmError(f"invalid choice {choice} for {point.kind} {point.context}")
    return choice


def _replay(space: TaskSpace, idx: int, decide: Callable[[DecisionPoint], Choice | None], points: list, decisions: list,
            seed: int | None = None):
    """Apply design space `idx` to a fresh schedule; `decide` picks each decision (None: TVM
    samples it, from `seed`, or from a random seed when None)."""
    from tvm.s_tir import Schedule

    sch = Schedule(space.mod, seed=seed, debug_mask=0)
    statics = space.statics[idx]
    failure: list[BaseException] = []

    def provider(inst, inputs, attrs, old):
        if not inst.kind.name.startswith("Sample"):
            return old
        if failure:  # stop asking after the first error, whatever TVM does with it
            raise RuntimeError("aborted")
        try:
            point = _point(sch, len(decisions) + 1, statics[len(decisions)], inputs)
            points.append(point)
            choice = decide(point)
        except BaseException as err:
            failure.append(err)
            raise
        point.seal()
        decisions.append(choice)
        return list(choice) if isinstance(choice, tuple) else choice

    try:
        space.traces[idx].apply_to_schedule(sch, remove_postproc=True, decision_provider=provider)
    except Exception:
        if failure:
            raise failure[0] from None
        raise
    if failure:
        raise failure[0]
    got = _trace_decisions(sch.trace)
    for k, (want, have) in enumerate(zip(decisions, got)):
        if want is None:
            decisions[k] = have
        elif want != have:  # TVM repaired it: the choice was not valid
            point = points[k + 1] if len(points) > k + 1 else None
            what = f"{point.kind} {point.context}" if point else f"decision {k}"
            raise TlmError(f"invalid choice {want} for {what} (TVM made it {have})")
    return sch


def _point(sch, index: int, static: dict, inputs) -> DecisionPoint:
    from tvm.s_tir.schedule import _ffi_api as api  # Schedule.get's argument checks cost more than the call

    kind = static["kind"]
    if kind == "tile":
        extent = api.ScheduleGet(sch, inputs[0]).extent
        if not hasattr(extent, "value"):
            raise TlmError("dynamic loop extent")
        ctx = dict(static, extent=int(extent.value))
        del ctx["kind"]
        return DecisionPoint(index, kind, ctx, tile_choices(ctx["extent"], ctx["n"], ctx["max_innermost"]))
    if kind == "cat":
        ctx = {k: v for k, v in static.items() if k != "kind"}
        return DecisionPoint(index, kind, ctx, tuple(range(len(ctx["candidates"]))))
    if kind == "loc":
        name = api.ScheduleGet(sch, inputs[0]).name_hint  # the live name: rfactor/cache blocks have none in the trace
        return DecisionPoint(index, kind, {"block": str(name)}, probe=(sch, inputs[0]))
    raise TlmError(f"unsupported decision kind {kind}")


def _trace_decisions(trace) -> list[Choice]:
    out: list[Choice] = []
    for inst in trace.insts:
        if inst.kind.name.startswith("Sample"):
            d = trace.get_decision(inst)
            out.append(tuple(int(x) for x in d) if inst.kind.name == "SamplePerfectTile" else int(d))
    return out


def _finish(space: TaskSpace, prog: Program) -> None:
    try:
        for proc in space.postprocs:
            if not proc.apply(prog.sch):
                prog.error = f"postprocessor {type(proc).__name__} rejected the program"
                return
    except Exception as err:
        prog.error = f"postprocessing failed: {_line(err)}"


def _line(err: BaseException) -> str:
    lines = [ln for ln in str(err).strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else type(err).__name__)[:300]


def replay(space: TaskSpace, space_index: int, decisions: list[Choice], postproc: bool = True) -> Program:
    """Rebuild a program from (space index, decisions), checking every decision is valid."""
    it = iter(decisions)

    def policy(point: DecisionPoint) -> Choice:
        if point.kind == "space":
            return space_index
        try:
            return next(it)
        except StopIteration:
            raise TlmError("too few decisions") from None

    prog = walk(space, policy, postproc)
    if prog.error is None and next(it, None) is not None:
        prog.error = "too many decisions"
    return prog


def plain_json(obj: Any) -> Any:
    """A trace's `as_json()` as plain JSON data (it may hold IntImm/FloatImm/ffi strings)."""
    if isinstance(obj, (bool, int, float, str)) or obj is None:
        return obj
    if isinstance(obj, (list, tuple)) or type(obj).__name__ in ("Array", "List"):
        return [plain_json(x) for x in obj]
    if isinstance(obj, dict) or type(obj).__name__ in ("Map", "Dict"):
        return {str(k): plain_json(v) for k, v in obj.items()}
    if hasattr(obj, "value"):  # IntImm, FloatImm, ffi boxed scalars
        return obj.value
    return str(obj)


def random_policy(rng: random.Random) -> Policy:
    """Uniform choice among the valid choices at every point.

    Compute locations are left to TVM, which draws them uniformly from the same candidate set
    in one analysis (enumerating them first costs one analysis per candidate).
    """

    def policy(point: DecisionPoint) -> Choice | None:
        if point.kind == "loc":
            return None
        return point.choices[rng.randrange(len(point.choices))]

    policy.tvm_seed = lambda: rng.randrange(1, 2**31 - 1)  # TVM's draws come from the same stream
    return policy


def random_program(task: Task, target: TargetInfo | None = None, rng: random.Random | int | None = None) -> Program:
    """One uniformly random valid program of a task (check `.error`)."""
    rng = rng if isinstance(rng, random.Random) else random.Random(rng)
    return walk(task_space(task, target), random_policy(rng))


class Walker:
    """Step-by-step decisions: read `point`, `choose` one of its choices, then `finish()`."""

    def __init__(self, space: TaskSpace):
        self.space = space
        self.space_index: int | None = None
        self.decisions: list[Choice] = []
        self.points: list[DecisionPoint] = [space.space_point()]
        self._sch = None
        self._advance()

    @property
    def point(self) -> DecisionPoint | None:
        """The pending decision, or None when all decisions are made."""
        return None if self._sch is not None else self.points[-1]

    @property
    def done(self) -> bool:
        return self._sch is not None

    def choose(self, choice: Choice) -> None:
        point = self.point
        if point is None:
            raise TlmError("all decisions are already made")
        choice = tuple(choice) if isinstance(choice, list) else choice
        if not point.accepts(choice):
            raise TlmError(f"invalid choice {choice} for {point.kind} {point.context}")
        if point.kind == "space":
            self.space_index = choice
        else:
            self.decisions.append(choice)
        self._advance()

    def _advance(self) -> None:
        if self.space_index is None:
            return
        known = list(self.decisions)
        points: list[DecisionPoint] = []
        decided: list[Choice] = []

        def decide(point: DecisionPoint) -> Choice:
            if len(decided) < len(known):
                return known[len(decided)]
            raise _Pause(point)

        try:
            self._sch = _replay(self.space, self.space_index, decide, points, decided)
        except _Pause:
            pass
        self.points = self.points[:1] + points

    def finish(self) -> Program:
        """Run the postprocessors; the result carries `error` if one rejects the program."""
        if self._sch is None:
            raise TlmError("decisions are not complete")
        prog = Program(self.space.task.hash, self.space_index, list(self.decisions), list(self.points), self._sch)
        _finish(self.space, prog)
        return prog
