"""Which microbatches the solver models may put in index order: those whose costs are identical.

With per-microbatch costs (contract version 4) the order of microbatches is a decision: a long
microbatch first and a short one first are different schedules. Two microbatches j < j' are
*interchangeable* when every cost grid has column j equal to column j' (times, memory sizes, the
recompute block) and their p2p latencies are equal; then any schedule stays valid, with the same
makespan and the same memory, when their labels are swapped, and the models' symmetry breaking
(``constraints.symmetry`` of each backend) may order them. Microbatches of different costs are never
ordered. A problem whose costs do not vary per microbatch has one class: every microbatch.
"""

from __future__ import annotations

from ppsolve.problem import Problem


def identical_classes(problem: Problem) -> tuple[tuple[int, ...], ...]:
    """The microbatches grouped into classes of identical costs, each class in index order, the classes
    by their first member."""
    m = problem.microbatches
    if not problem.per_microbatch:
        return (tuple(range(m)),)
    classes: dict[tuple, list[int]] = {}
    for j, column in enumerate(problem.microbatch_signatures):
        classes.setdefault(column, []).append(j)
    return tuple(tuple(members) for members in sorted(classes.values()))


def uniform(problem: Problem) -> bool:
    """Whether every microbatch is in one class (the per-stage case the older cuts were made for)."""
    return len(identical_classes(problem)) == 1


def class_positions(problem: Problem) -> tuple[tuple[int, int, int], ...]:
    """Per microbatch: (the index of its class, its rank in the class, the class's size)."""
    out: dict[int, tuple[int, int, int]] = {}
    for c, members in enumerate(identical_classes(problem)):
        for rank, j in enumerate(members):
            out[j] = (c, rank, len(members))
    return tuple(out[j] for j in range(problem.microbatches))
