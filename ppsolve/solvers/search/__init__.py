"""The large-neighbourhood search, for problems whose whole model does not fit the time limit:
``window`` (a neighbourhood of a timed schedule, and putting a solved window back), ``lns`` (the
makespan, one window at a time) and ``overhead`` (the least overhead at a makespan, one window at
a time). ``ppsolve.solvers.phases`` runs them; each window is solved by a backend's ``run_phase``."""
