"""The MILP backend (PuLP + HiGHS, CBC when highspy is missing): ``variables``, ``constraints``
(one function per family), ``objective`` and ``backend`` (``run_phase``). Chosen with
``SolveOptions(solver="milp")``; the entry point is ``ppsolve.solvers.solve`` (in ``ppsolve.solvers.phases``)."""
