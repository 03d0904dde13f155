"""The time budget of one solve: ``--time-limit`` is the whole run's wall clock.

The run starts the clock; the warm start gets a share and is cut short at its
end; model building calls :meth:`Budget.check`, which raises :class:`TimeUp`
once building would eat the time kept for the end; each search phase gets a
:class:`Limit`; a reserve at the end pays for realising and checking the answer.

Deterministic mode (``--threads 1``): a wall-clock limit stops a search at a
different point on every run, so the search phases get *deterministic* limits
instead (fractions of ``time_limit``, never read off the clock: CP-SAT's
deterministic time, HiGHS's node count), and the wall clock only guards the
promise ``2 * time_limit + 5`` s. What a run does then depends on the problem,
the seed and the limit only, as long as that guard does not fire.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

WARM_START_SHARE = 0.2  # of the time limit
RESERVE_SHARE = 0.08  # of the wall time (the limit, or the guard), at least, kept for realising and checking
RESERVE_CHECKS = 4  # the reserve is at least this many times one check of the warm start
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
    """Deadlines of one run, all measured from ``t0`` (the call of ``solve``; the CLI passes its process start)."""

    def __init__(self, time_limit: float, deterministic: bool, t0: float | None = None):
        self.time_limit = float(time_limit)
        self.deterministic = deterministic
        self.t0 = time.monotonic() if t0 is None else t0
        wall = 2 * self.time_limit + 5 if deterministic else self.time_limit
        self.deadline = self.t0 + wall
        self.reserve = max(RESERVE_SHARE * wall, 0.05)

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> float:
        """Seconds until the deadline, less the reserve for the end."""
        return max(0.0, self.deadline - self.reserve - time.monotonic())

    def remaining(self) -> float:
        """Seconds until the run must end (what the progress line shows): the time limit, or in
        deterministic mode the wall-clock guard."""
        return max(0.0, self.deadline - time.monotonic())

    def note_check_seconds(self, seconds: float) -> None:
        """One check of a schedule took ``seconds``: keep room for a few at the end (at most 30%)."""
        self.reserve = min(0.3 * (self.deadline - self.t0), max(self.reserve, RESERVE_CHECKS * seconds))

    def warm_start_deadline(self) -> float:
        """When the warm start, starting now, stops trying candidates (monotonic clock).

        Its share from now (what came before, such as starting Python and importing the backend,
        does not eat it), at most until 60% of the time limit unless that leaves it less than half
        its share. Deterministic mode: which candidates are tried must not depend on the clock, so
        only a guard stops it: half the time until the wall-clock guard.
        """
        if self.deterministic:
            return self.t0 + 0.5 * (self.deadline - self.t0)
        share, now = WARM_START_SHARE * self.time_limit, time.monotonic()
        return min(now + share, max(self.t0 + 0.6 * self.time_limit, now + 0.5 * share))

    def check(self) -> None:
        """Raise TimeUp when the run has no time left but its reserve (called while building models)."""
        if time.monotonic() > self.deadline - self.reserve:
            raise TimeUp()

    def search(self, share: float, keep: float = 0.0) -> Limit:
        """The limit of a search phase.

        ``share`` is the phase's fraction of the time limit and ``keep`` the fraction kept for the
        phases after it. Wall mode: until the deadline less the reserve and what is kept (so a phase
        inherits time the warm start did not use). Deterministic mode: ``share * time_limit`` of
        deterministic work, guarded by the wall clock until the deadline.
        """
        end = self.deadline - self.reserve
        if self.deterministic:
            return Limit(end, max(MIN_SEARCH, share * self.time_limit))
        return Limit(end - keep * self.time_limit)
