"""Exceptions ppsolve raises, each rendered as one line for the user."""

from __future__ import annotations


class PpsolveError(Exception):
    """Base class of every error ppsolve reports to a user."""

    exit_code = 2


class InputError(PpsolveError):
    """A problem or schedule file that is unreadable or breaks the format.

    ``field`` is a dotted path such as ``problem.time.forward[3]``.
    """

    exit_code = 2

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}" if field else message)


class NotApplicableError(PpsolveError):
    """A method asked for a problem it cannot schedule (wrong placement, ...)."""

    exit_code = 2


class InvalidScheduleError(PpsolveError):
    """A schedule file that reads well but breaks a rule of the contract (what ``check`` exits 1 on)."""

    exit_code = 1


class InfeasibleError(PpsolveError):
    """No schedule can exist (e.g. a memory cap below the least that works)."""

    exit_code = 3


class DeadlockError(PpsolveError):
    """An order of actions that can never complete."""

    exit_code = 2
