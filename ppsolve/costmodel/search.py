"""``--partition auto``: the layer partition as a decision.

Two steps. First a beam search over partitions, moving one block at a time (a
stage boundary shifted, or a block taken off the stage with the most work),
scored by the makespan lower bound of the resulting problem
(``bounds.makespan_lower_bound``: device loads, the critical path, memory caps),
ties broken by the device loads from the heaviest down. Then the solver
(method ``cpsat`` of the registry, a short time limit each) on the best few
partitions; the shortest schedule wins. Every partition the search scores is
built through the cost model, so embedding, head, memory caps and p2p count.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ppsolve.bounds import makespan_lower_bound
from ppsolve.costmodel.partition import Partition
from ppsolve.errors import PpsolveError
from ppsolve.methods import RunOptions, get_method, run_and_check
from ppsolve.problem import Problem
from ppsolve.schedule import Schedule
from ppsolve.solvers import DEFAULT_SOLVER


@dataclass(frozen=True)
class Candidate:
    """A partition, its problem and the score the search ranks it by."""

    partition: Partition
    problem: Problem
    score: tuple

    @property
    def bound(self) -> float:
        return self.score[0]


@dataclass
class Trial:
    """A candidate the solver ran on: its schedule, or why there is none."""

    candidate: Candidate
    schedule: Schedule | None
    error: str | None = None

    @property
    def makespan(self) -> float:
        return self.schedule.makespan if self.schedule is not None else float("inf")


@dataclass
class SearchResult:
    best: Trial
    trials: list[Trial]
    scored: int = 0
    ranked: list[Candidate] = field(default_factory=list)


def score(problem: Problem) -> tuple:
    """(makespan lower bound, device loads from the heaviest down): smaller is better."""
    bound = makespan_lower_bound(problem).value
    loads = sorted((problem.device_load(d) for d in range(problem.devices)), reverse=True)
    return (round(bound, 9), *(round(x, 9) for x in loads))


def _moves(candidate: Candidate) -> list[Partition]:
    """Partitions one block away: a stage boundary shifted by one block, or a block moved
    from the stage with the most work to any other (2S + S moves, not S^2)."""
    layers, problem = candidate.partition.layers, candidate.problem
    last = len(layers) - 1
    work = [problem.stage_load(s) for s in range(len(layers))]
    heaviest = max(range(len(layers)), key=lambda s: (work[s], layers[s]))
    pairs = {(a, a + step) for a in range(len(layers)) for step in (-1, 1) if 0 <= a + step <= last}
    pairs |= {(heaviest, b) for b in range(len(layers)) if b != heaviest}
    out = []
    for a, b in sorted(pairs):
        if layers[a] > (0 if a in (0, last) else 1):
            moved = list(layers)
            moved[a] -= 1
            moved[b] += 1
            out.append(Partition(tuple(moved)))
    return out


def rank_partitions(make: Callable[[Partition], Problem], start: Partition, beam: int = 4,
                    patience: int = 2, max_rounds: int = 200) -> tuple[list[Candidate], int]:
    """Every partition the beam search scored, best first, and how many it scored.

    ``make`` builds the problem of a partition (it may raise PpsolveError for a
    partition that cannot exist, e.g. weights that do not fit: such are skipped)."""
    seen: dict[tuple[int, ...], Candidate | None] = {}

    def visit(partition: Partition) -> Candidate | None:
        if partition.layers not in seen:
            try:
                problem = make(partition)
                seen[partition.layers] = Candidate(partition, problem, score(problem))
            except PpsolveError:
                seen[partition.layers] = None
        return seen[partition.layers]

    frontier = [c for c in [visit(start)] if c is not None]
    best = frontier[0].score if frontier else None
    stale = 0
    for _ in range(max_rounds):
        fresh = {p.layers: p for c in frontier for p in _moves(c) if p.layers not in seen}
        scored = [c for c in map(visit, fresh.values()) if c is not None]
        if not scored:
            break
        frontier = sorted(frontier + scored, key=lambda c: c.score)[:beam]
        if best is None or frontier[0].score < best:
            best, stale = frontier[0].score, 0
        else:
            stale += 1
            if stale >= patience:
                break
    ranked = sorted((c for c in seen.values() if c is not None), key=lambda c: c.score)
    return ranked, len(seen)


def search_partition(make: Callable[[Partition], Problem], start: Partition, *, top: int = 3,
                     time_limit: float = 10.0, threads: int | None = None, seed: int = 0,
                     beam: int = 4) -> SearchResult:
    """Rank partitions by bound, run the solver on the ``top`` best, return the shortest schedule."""
    ranked, scored = rank_partitions(make, start, beam=beam)
    if not ranked:
        raise PpsolveError("no partition gives a problem that can exist (see `layout.capacity`)")
    options = RunOptions(time_limit=time_limit, threads=threads, seed=seed)
    trials = []
    for candidate in ranked[:max(1, top)]:
        outcome = run_and_check(get_method(DEFAULT_SOLVER), candidate.problem, options, checked=False)  # solve checks
        trials.append(Trial(candidate, outcome.schedule, None if outcome.schedule is not None else outcome.note))
    best = min(trials, key=lambda t: (t.makespan, t.candidate.score))
    if best.schedule is None:
        raise PpsolveError(f"the solver found no schedule for the {len(trials)} best partitions: {trials[0].error}")
    return SearchResult(best, trials, scored, ranked)
