"""The time budget of one solve: ``--time-limit`` is the whole run's wall clock.

The run starts the clock; the warm start gets a share and is cut short at its
end; model building calls :meth:`Budget.check`, which raises :class:`TimeUp`
once building would eat the time kept for the end; each search phase gets a
:class:`Limit`; a reserve at the end pays for realising and checking the answer.

Deterministic mode (``--threads 1``): a wall-clock limit stops a search at a
different point on every run, so the warm start and the searches get
*deterministic* limits as well (never read off the clock): the warm start a
number of candidates sized by the problem, each search ``deterministic_share``
of its share of the time limit in seconds of deterministic work (CP-SAT's
deterministic time, HiGHS' interrupt checks weighted by the model's size; each
backend's rate is calibrated on the bench machine). Those end well inside the wall clock there, and the wall
clock at the time limit stays the hard guard: when it fires first (a loaded
or slower machine, a huge problem), the result says so, since that run may not
be reproducible.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ppsolve.solvers.settings import BudgetSettings

MIN_SEARCH = 0.05  # seconds: a search is never given less


class TimeUp(Exception):
    """Model building ran out of its time (caught by the solve; never reaches the user)."""


@dataclass(frozen=True)
class Limit:
    """How long a search may run: until ``until`` (``time.monotonic()``; model building counts,
    so a backend asks :meth:`seconds` when its search starts), and, in deterministic mode,
    ``deterministic`` (seconds of deterministic work; a backend maps it to its own measure)."""

    until: float
    deterministic: float | None = None

    def seconds(self) -> float:
        """Wall-clock seconds left for the search, from now."""
        return max(MIN_SEARCH, self.until - time.monotonic())


class Budget:
    """Deadlines of one run, all measured from ``t0`` (the call of ``solve``; the CLI passes the start of
    the command, after Python's start-up: what ran in the process before it does not eat the limit); the
    solve ends ``keep_after`` seconds before the time limit (the caller's share)."""

    def __init__(self, time_limit: float, deterministic: bool, t0: float | None = None, keep_after: float = 0.0,
                 settings: BudgetSettings = BudgetSettings()):
        self.knobs = settings
        self.time_limit = float(time_limit)
        self.deterministic = deterministic
        self.t0 = time.monotonic() if t0 is None else t0
        self.deadline = self.t0 + self.time_limit - min(keep_after, 0.5 * self.time_limit)
        self.reserve = max(settings.reserve_share * self.time_limit, 0.05)

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> float:
        """Seconds until the deadline, less the reserve for the end."""
        return max(0.0, self.deadline - self.reserve - time.monotonic())

    def remaining(self) -> float:
        """Seconds until the run must end (what the progress line shows)."""
        return max(0.0, self.deadline - time.monotonic())

    def note_check_seconds(self, seconds: float) -> None:
        """One check of a schedule took ``seconds``: keep room for a few at the end (at most 30%)."""
        self.reserve = min(0.3 * (self.deadline - self.t0), max(self.reserve, self.knobs.reserve_checks * seconds))

    def lean_reserve(self, check_seconds: float) -> None:
        """What is left after the search needs no model solution realised and checked (its every answer
        is a checked schedule): keep ``lean_reserve_share`` of the time limit, or ``reserve_checks`` times
        ``check_seconds`` if more, for writing the answer (at a 300 s limit: 3 s instead of 24 s)."""
        knobs = self.knobs
        self.reserve = min(self.reserve, max(knobs.lean_reserve_share * self.time_limit,
                                             knobs.reserve_checks * check_seconds, MIN_SEARCH))

    def warm_start_deadline(self) -> float:
        """When the warm start, starting now, stops trying candidates (monotonic clock).

        Its share from now (what came before, such as starting Python and importing the backend,
        does not eat it), at most until 60% of the time limit unless that leaves it less than half
        its share. Deterministic mode: which candidates are tried must not depend on the clock
        (:meth:`warm_start_candidates` decides), so only the guard stops it: the deadline.
        """
        if self.deterministic:
            return self.deadline - self.reserve
        share, now = self.knobs.warm_start_share * self.time_limit, time.monotonic()
        return min(now + share, max(self.t0 + 0.6 * self.time_limit, now + 0.5 * share))

    def baseline_seconds(self) -> float:
        """The time limit each baseline of the warm start is given (its share of the run, at least 1 s)."""
        return max(1.0, self.knobs.warm_start_share * self.time_limit)

    def warm_start_candidates(self, ops: int) -> int | None:
        """Deterministic mode: how many acceptable warm-start candidates to collect for a problem of
        ``ops`` ops (at least one); None otherwise (the clock decides)."""
        if not self.deterministic:
            return None
        knobs = self.knobs
        work = knobs.deterministic_share * knobs.warm_start_share * self.time_limit * knobs.warm_start_ops_per_second
        return max(1, int(work // max(1, ops)))

    def check(self) -> None:
        """Raise TimeUp when the run has no time left but its reserve (called while building models)."""
        if time.monotonic() > self.deadline - self.reserve:
            raise TimeUp()

    def search(self, share: float, keep: float = 0.0) -> Limit:
        """The limit of a search phase.

        ``share`` is the phase's fraction of the time limit and ``keep`` the fraction kept for the
        phases after it: the phase may run until the deadline less the reserve and what is kept
        (so it inherits time the warm start did not use). Deterministic mode adds
        ``deterministic_share * share * time_limit`` seconds of deterministic work.
        """
        until = self.deadline - self.reserve - keep * self.time_limit
        if self.deterministic:
            return Limit(until, max(MIN_SEARCH, self.knobs.deterministic_share * share * self.time_limit))
        return Limit(until)
