"""Planning the next step while this one runs: :class:`Planner`, a background worker for ``ppsolve.solve``.

A training loop submits the problem of batch k+1 (``ppsolve.costmodel.problem_for_batch``) before it runs
step k, and asks for the schedule when step k is done::

    with ppsolve.Planner(time_limit=0.5, threads=1) as planner:
        plan = planner.submit(problem_for_batch(model, hardware, layout, batches[0]))
        for k, batch in enumerate(batches):
            schedule = plan.result()  # a checked Schedule (or the solve's exception)
            if k + 1 < len(batches):
                plan = planner.submit(problem_for_batch(model, hardware, layout, batches[k + 1]))
            run_step(batch, schedule)

A plan's time limit counts from when its worker starts it; a plan submitted while the workers are busy
waits its turn. Threads (the default) share the training process's interpreter: the quick path is
Python and takes the GIL while it runs, a CP-SAT search mostly does not. ``processes=True`` plans in
spawned processes instead (each imports ppsolve once; problems and schedules are pickled across; the
script needs multiprocessing's ``if __name__ == "__main__":`` guard).
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any

from ppsolve.errors import InputError
from ppsolve.planning import solve
from ppsolve.problem import Problem
from ppsolve.schedule import Schedule


class Planner:
    """``workers`` background planners (threads, or processes with ``processes=True``); ``defaults`` are
    keyword arguments of :func:`ppsolve.solve` for every plan (``submit`` may override them). Close it
    (or use it as a context manager) to end its workers."""

    def __init__(self, workers: int = 1, *, processes: bool = False, **defaults: Any):
        if workers < 1:
            raise InputError("workers", f"must be >= 1, got {workers}")
        self.processes = processes
        self.defaults = defaults
        self._check(defaults)
        self._pool: Executor = (
            ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) if processes
            else ThreadPoolExecutor(workers, thread_name_prefix="ppsolve-planner"))

    def _check(self, options: dict) -> None:
        if self.processes and options.get("progress") is not None:
            raise InputError("progress", "a stream cannot go to a planning process (use threads, or no progress)")

    def submit(self, problem: Problem, **options: Any) -> "Future[Schedule]":
        """Plan ``problem`` in the background: a Future of its checked Schedule (its ``result()`` raises what
        ``ppsolve.solve`` raised)."""
        merged = {**self.defaults, **options}
        self._check(merged)
        return self._pool.submit(solve, problem, **merged)

    def close(self, wait: bool = True, cancel: bool = False) -> None:
        """End the workers: after the plans submitted (``wait``), dropping those not started (``cancel``)."""
        self._pool.shutdown(wait=wait, cancel_futures=cancel)

    def __enter__(self) -> "Planner":
        return self

    def __exit__(self, *exc) -> None:
        self.close(cancel=exc[0] is not None)
