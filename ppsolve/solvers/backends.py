"""The solver backends: one record each (name, module, description, capabilities), read by the
method registry, the CLI's help and the phases.

A backend's module (a :class:`~ppsolve.solvers.api.Backend`) is imported only when chosen
(OR-Tools and highspy are heavy, and may not both load into one process); the backends import
:mod:`ppsolve.solvers.api`, never this registry.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from ppsolve.errors import InputError, NotApplicableError
from ppsolve.solvers.api import Backend


@dataclass(frozen=True)
class BackendRecord:
    """What the solve knows of a backend without importing it."""

    name: str
    module: str  # the module that is the backend
    model: str  # what it models with, a few words (the CLI's help)
    description: str  # one line (the method registry)
    continuous_amounts: bool  # an offload may move any amount (else multiples of the scaling's grid)
    whole_shares: bool  # PhaseTask.whole_shares is honoured (a quick first step of the OVERHEAD phase)
    windows: bool  # run_phase also solves a window of an incumbent (PhaseTask.window): the LNS


BACKENDS: dict[str, BackendRecord] = {record.name: record for record in (
    BackendRecord("cpsat", "ppsolve.solvers.cpsat.backend", "OR-Tools CP-SAT",
                  "OR-Tools CP-SAT model: optimal order, timing and selective offload; proves a lower bound",
                  continuous_amounts=False, whole_shares=True, windows=True),
    # the MILP's offloaded amounts are continuous variables (any amount in (0, fraction x activation], as
    # the contract allows): its proofs hold for the contract's problem
    BackendRecord("milp", "ppsolve.solvers.milp.backend", "PuLP + HiGHS",
                  "MILP (PuLP + HiGHS, CBC fallback): disjunctive order variables, selective offload; proves a "
                  "lower bound",
                  continuous_amounts=True, whole_shares=False, windows=False),
)}
# what a backend module must provide: the Protocol's members
_MEMBERS = tuple(name for name in vars(Backend) if not name.startswith("_"))


def backend_record(name: str) -> BackendRecord:
    """The record of the backend named ``name`` (InputError naming the field when unknown)."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise InputError("solver", f"must be one of {', '.join(BACKENDS)}, got {name!r}") from None


def load_backend(name: str) -> Backend:
    """The backend named ``name``; a clear refusal when unknown or not installed."""
    record = backend_record(name)
    try:
        module = importlib.import_module(record.module)
    except ImportError as exc:  # e.g. OR-Tools after highspy was loaded (see ppsolve.solvers.milp)
        clash = " (highspy was loaded into this process first; OR-Tools and highspy bundle incompatible " \
                "HiGHS libraries)" if "Highs" in str(exc) else ""
        raise NotApplicableError(f"solver {name} is not available: {exc}{clash}") from None
    if not isinstance(module, Backend):
        missing = [member for member in _MEMBERS if not hasattr(module, member)]
        raise TypeError(f"{record.module} is not a solver backend: it lacks {', '.join(missing)}")
    reason = module.why_not()
    if reason is not None:
        raise NotApplicableError(f"solver {name} is not available: {reason}")
    return module
