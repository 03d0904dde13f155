"""The one definition of SPEC.md's ordering rules 1-5 and 9: what an op waits for, and with which lag.

Every op of microbatch ``j`` waits only for ops of the same microbatch, so the
rules are a table per (kind, stage): :func:`stage_dependencies` gives, for an op
kind on a stage, the ops it waits for as :class:`Dependency` entries, and
``end(dependency) + lag <= start(op)`` must hold. The simulator, the checker,
the bounds, the list schedulers and the solvers' constraints all read this
table; none of them spells the rules out again.

A dependency marked ``optional`` holds only when its op is in the schedule:
a B waits for its RELOAD when (s, j) is offloaded, and for its R when it is recomputed.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from ppsolve.ops import Op, OpKind
from ppsolve.problem import Problem

_F, _B, _W, _R, _OFF, _REL = OpKind.F, OpKind.B, OpKind.W, OpKind.R, OpKind.OFFLOAD, OpKind.RELOAD


class Dependency(NamedTuple):
    """``kind`` of ``stage`` (same microbatch) must end ``lag_of(problem, j)`` before the waiting op of
    microbatch j starts: the p2p latency of j when ``crosses`` (the two stages are on different devices),
    else 0. ``lag`` is the least of those over the microbatches: the lag itself when every microbatch has
    the same latency, and a valid lower bound otherwise."""

    kind: OpKind
    stage: int
    lag: float
    rule: str
    optional: bool = False
    crosses: bool = False

    def op(self, microbatch: int) -> Op:
        return Op(self.kind, self.stage, microbatch)

    def lag_of(self, problem: Problem, microbatch: int) -> float:
        """The lag for ``microbatch``."""
        return problem.p2p_times[microbatch] if self.crosses else 0.0


RULES = {
    "R1": "rule 1: F(s,j) starts after F(s-1,j) ends + p2p latency",
    "R2": "rule 2: B(S-1,j) starts after F(S-1,j) ends",
    "R3": "rule 3: B(s,j) starts after B(s+1,j) ends + p2p latency",
    "R4": "rule 4: W(s,j) starts after B(s,j) ends",
    "R5": "rule 5: OFFLOAD after F ends, RELOAD after OFFLOAD ends, RELOAD ends before B starts",
    "R9": "rule 9: R(s,j) starts after F(s,j) ends; B(s,j) starts after R(s,j) ends",
}


def _forward(p: Problem, s: int) -> tuple[Dependency, ...]:
    """Rule 1: F(s,j) after F(s-1,j) + lat(s-1,s)."""
    return (_message(p, _F, s - 1, s, "R1"),) if s > 0 else ()


def _backward(p: Problem, s: int) -> tuple[Dependency, ...]:
    """Rules 2, 3, 5 and 9: B(S-1,j) after F(S-1,j); B(s,j) after B(s+1,j) + lat(s,s+1); after
    RELOAD(s,j) and R(s,j) if any."""
    if s == p.num_stages - 1:
        upstream = Dependency(_F, s, 0.0, "R2")
    else:
        upstream = _message(p, _B, s + 1, s, "R3")
    return (upstream, Dependency(_REL, s, 0.0, "R5", optional=True), Dependency(_R, s, 0.0, "R9", optional=True))


def _message(p: Problem, kind: OpKind, sender: int, receiver: int, rule: str) -> Dependency:
    """A wait for ``kind`` of ``sender`` across the p2p link when the two stages are on different devices."""
    crosses = p.placement[sender] != p.placement[receiver]
    return Dependency(kind, sender, min(p.p2p_times) if crosses else 0.0, rule, crosses=crosses)


def _weight(p: Problem, s: int) -> tuple[Dependency, ...]:
    """Rule 4: W(s,j) after B(s,j)."""
    return (Dependency(_B, s, 0.0, "R4"),)


def _recompute(p: Problem, s: int) -> tuple[Dependency, ...]:
    """Rule 9: R(s,j) after F(s,j)."""
    return (Dependency(_F, s, 0.0, "R9"),)


def _offload(p: Problem, s: int) -> tuple[Dependency, ...]:
    """Rule 5: OFFLOAD(s,j) after F(s,j)."""
    return (Dependency(_F, s, 0.0, "R5"),)


def _reload(p: Problem, s: int) -> tuple[Dependency, ...]:
    """Rule 5: RELOAD(s,j) after OFFLOAD(s,j)."""
    return (Dependency(_OFF, s, 0.0, "R5"),)


_BY_KIND: dict[OpKind, Callable[[Problem, int], tuple[Dependency, ...]]] = {
    _F: _forward, _B: _backward, _W: _weight, _R: _recompute, _OFF: _offload, _REL: _reload,
}


def stage_dependencies(problem: Problem, kind: OpKind, stage: int) -> tuple[Dependency, ...]:
    """What an op of ``kind`` on ``stage`` waits for (any microbatch: the same one)."""
    try:
        rule = _BY_KIND[kind]
    except KeyError:
        raise ValueError(f"no dependency rule for op kind {kind!r}") from None
    return rule(problem, stage)


def dependencies(problem: Problem, op: Op) -> tuple[Dependency, ...]:
    """What ``op`` waits for."""
    return stage_dependencies(problem, op.kind, op.stage)


def dependency_table(problem: Problem, kinds=tuple(_BY_KIND)) -> dict[tuple[OpKind, int], tuple[Dependency, ...]]:
    """``stage_dependencies`` for every (kind, stage), computed once for a hot loop."""
    return {(kind, s): stage_dependencies(problem, kind, s) for kind in kinds for s in range(problem.num_stages)}


def dependents_table(problem: Problem, kinds=tuple(_BY_KIND)) -> dict[tuple[OpKind, int], tuple[tuple[OpKind, int, float], ...]]:
    """The inverse table: for (kind, stage), the (kind, stage, lag) of the ops that wait for it."""
    out: dict[tuple[OpKind, int], list[tuple[OpKind, int, float]]] = {}
    for (kind, s), deps in dependency_table(problem, kinds).items():
        for dep in deps:
            if dep.kind in kinds:
                out.setdefault((dep.kind, dep.stage), []).append((kind, s, dep.lag))
    return {key: tuple(value) for key, value in out.items()}


def depth(problem: Problem, kind: OpKind, stage: int) -> int:
    """A rank that grows along every dependency of one microbatch (F down, B back up, then W).

    Orders ops that start and end at the same instant so that none comes before one it waits for.
    """
    S = problem.num_stages
    if kind is _F:
        return 2 * stage
    if kind is _OFF:
        return 2 * stage + 1
    if kind is _REL or kind is _R:
        return 2 * S + 2 * (S - 1 - stage)
    if kind is _B:
        return 2 * S + 2 * (S - 1 - stage) + 1
    if kind is _W:
        return 4 * S + (S - 1 - stage)
    raise ValueError(f"no dependency rule for op kind {kind!r}")
