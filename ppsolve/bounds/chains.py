"""One microbatch's dependency chains: the earliest start of each of its compute ops from its first
op (heads), and the least time that must pass after each ends (tails), latencies included.

With per-microbatch costs (contract version 4) every microbatch has its own chains; the bounds read
them through :class:`Chains`, per (stage, microbatch) of the microbatches that stand for all
(:func:`columns`). Transfers are left out (they only add waits, so every path stays a lower bound).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ppsolve.dependencies import dependency_table, depth
from ppsolve.ops import OpKind
from ppsolve.problem import Problem

Durations = Callable[[OpKind, int], float]
Lag = Callable[[float], float]


def columns(problem: Problem) -> tuple[tuple[int, ...], int]:
    """(the microbatches the bounds read, how many microbatches each stands for): microbatch 0 for all m
    when no cost differs between microbatches (every sum is then the per-stage one, float for float),
    else every microbatch for itself."""
    if problem.per_microbatch:
        return tuple(range(problem.microbatches)), 1
    return (0,), problem.microbatches


def one_microbatch(problem: Problem, duration: Durations | None = None, lag: Lag | None = None,
                    microbatch: int | None = None) -> tuple[list[tuple[OpKind, int]], dict, dict]:
    """The compute ops of one microbatch in dependency order, their durations and dependencies.

    Read from the one dependency table. ``microbatch``: that microbatch's durations and latencies;
    else the stage's one duration and the least latency. ``duration`` and ``lag`` map to other units
    (a solver model's); by default the problem's.
    """
    if duration is None:
        duration = problem.duration if microbatch is None else (lambda k, s: problem.duration(k, s, microbatch))
    lag = lag or (lambda x: x)
    lag_of = (lambda d: d.lag) if microbatch is None else (lambda d: d.lag_of(problem, microbatch))
    table = dependency_table(problem, problem.kinds)
    order = sorted(table, key=lambda key: depth(problem, *key))
    durations = {key: duration(*key) for key in order}
    deps = {key: [(d.kind, d.stage, lag(lag_of(d))) for d in table[key] if not d.optional] for key in order}
    return order, durations, deps


def longest_from(problem: Problem, source: tuple[OpKind, int] | None, microbatch: int | None = None,
                 duration: Durations | None = None, lag: Lag | None = None) -> dict:
    """Earliest start of every compute op of one microbatch relative to the start of ``source``
    (None: from time 0, every op reachable); ops that do not follow ``source`` are absent."""
    order, duration, deps = one_microbatch(problem, duration, lag, microbatch)
    start: dict = {}
    for key in order:
        if key == source or (source is None and not deps[key]):
            start[key] = max([0.0] + [start[(k, s)] + duration[(k, s)] + lag
                                      for k, s, lag in deps[key] if (k, s) in start])
            continue
        reached = [start[(k, s)] + duration[(k, s)] + lag for k, s, lag in deps[key] if (k, s) in start]
        if reached:
            start[key] = max(reached)
    return start


def _tails(problem: Problem, microbatch: int | None, duration: Durations | None, lag: Lag | None) -> dict:
    """For every compute op of one microbatch, the least time that must pass after it ends."""
    order, duration, deps = one_microbatch(problem, duration, lag, microbatch)
    tail = {key: 0.0 for key in order}
    for key in reversed(order):
        for k, s, lag in deps[key]:
            tail[(k, s)] = max(tail[(k, s)], lag + duration[key] + tail[key])
    return tail


def heads_and_tails(problem: Problem, duration: Durations | None = None, lag: Lag | None = None,
                    microbatch: int | None = None) -> tuple[dict, dict]:
    """Per (kind, stage) of the compute ops of one microbatch: the earliest start from the
    microbatch's first op, and the least time that must pass after it ends (``duration`` and
    ``lag`` as in :func:`one_microbatch`).

    ``microbatch``: that microbatch's chains. Without it: the stage's one duration and the least
    latency; for a problem whose costs differ per microbatch (and no ``duration`` given), the least
    over its microbatches of each figure, which holds for every microbatch.
    """
    if microbatch is None and duration is None and not problem.per_microbatch:
        microbatch = 0  # stands for every microbatch (its one duration, its one latency)
    if microbatch is not None or duration is not None:
        return longest_from(problem, None, microbatch, duration, lag), _tails(problem, microbatch, duration, lag)
    each = [heads_and_tails(problem, lag=lag, microbatch=j) for j in range(problem.microbatches)]
    return tuple({key: min(h[side][key] for h in each) for key in each[0][side]} for side in (0, 1))


def _path(problem: Problem, heads: dict, tails: dict, microbatch: int | None) -> float:
    return max(heads[key] + problem.duration(*key, microbatch) + tails[key] for key in heads)


def critical_path(problem: Problem, heads: dict | None = None, tails: dict | None = None) -> float:
    """The longest microbatch's path forward through every stage and backward to the first, with p2p
    latency (``heads`` and ``tails`` from :func:`heads_and_tails` when the caller has them; of a problem
    whose costs differ per microbatch, each microbatch's own are used)."""
    if heads is not None and tails is not None and not problem.per_microbatch:
        return _path(problem, heads, tails, 0)
    return max(_path(problem, *heads_and_tails(problem, microbatch=j), j) for j in columns(problem)[0])


@dataclass(frozen=True)
class Chains:
    """The chains of the microbatches the bounds read (``columns``, each standing for ``weight``
    microbatches: :func:`columns`), per (stage, microbatch): the earliest start of F(s, j) and of
    B(s, j) from the microbatch's first op, and the least time that must pass after F(s, j) and after
    B(s, j) end; and ``heads``/``tails``, per (kind, stage), the least over those microbatches."""

    columns: tuple[int, ...]
    weight: int
    f_head: dict[tuple[int, int], float]
    b_head: dict[tuple[int, int], float]
    f_tail: dict[tuple[int, int], float]
    b_tail: dict[tuple[int, int], float]
    heads: dict
    tails: dict
    path: float  # the critical path: the longest microbatch's

    def items(self, stages) -> list[tuple[int, int]]:
        """(stage, microbatch) of ``stages`` for every column, stage by stage."""
        return [(s, j) for s in stages for j in self.columns]


def microbatch_chains(problem: Problem) -> Chains:
    """The chains of every microbatch the bounds read (:class:`Chains`)."""
    cols, weight = columns(problem)
    each = {j: heads_and_tails(problem, microbatch=j) for j in cols}
    S = range(problem.num_stages)
    pick = lambda side, kind: {(s, j): each[j][side][(kind, s)] for s in S for j in cols}  # noqa: E731
    least = tuple({key: min(each[j][side][key] for j in cols) for key in each[cols[0]][side]} for side in (0, 1))
    return Chains(cols, weight, pick(0, OpKind.F), pick(0, OpKind.B), pick(1, OpKind.F), pick(1, OpKind.B),
                  *least, max(_path(problem, *each[j], j) for j in cols))
