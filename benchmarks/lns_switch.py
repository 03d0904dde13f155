"""Where the whole model gives way to large-neighbourhood search: both, per problem, in one run.

    PYTHONPATH=. python benchmarks/lns_switch.py [--time-limit 20] [--threads 1] [--configs whole,both,search]
        problem.json ...

Each problem is solved three times through ``ppsolve.solvers.solve`` with the size thresholds of
``ppsolve.solvers.phases`` forced: the whole model alone, the whole model then the search (the
split used between LNS_AFTER_OPS and WHOLE_MODEL_OPS), and the search alone (``--configs``: some
of them). Prints the makespan, the status and the CPU seconds of each (docs/solver.md has runs).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ppsolve.problem import load_problem  # noqa: E402
from ppsolve.solvers import SolveOptions, phases, solve  # noqa: E402
from ppsolve.solvers.settings import PhaseSettings, Settings  # noqa: E402

CONFIGS = {"whole model": (10**12, 10**12), "whole then search": (10**12, 0), "search alone": (0, 0)}
SHORT = {"whole": "whole model", "both": "whole then search", "search": "search alone"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", nargs="+")
    parser.add_argument("--time-limit", type=float, default=20.0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--configs", default=",".join(SHORT), help="which of whole, both, search (default: all)")
    args = parser.parse_args(argv)
    try:
        configs = {SHORT[c]: CONFIGS[SHORT[c]] for c in args.configs.split(",")}
    except KeyError as exc:
        parser.error(f"--configs: unknown {exc.args[0]!r} (whole, both or search)")
    print("| problem | ops | " + " | ".join(configs) + " |")
    print("|---|---|" + "---|" * len(configs))
    for path in args.problems:
        problem = load_problem(path)
        cells = [Path(path).stem, str(phases.model_ops(problem, True))]
        for whole, after in configs.values():
            knobs = Settings(phases=PhaseSettings(whole_model_ops=whole, lns_after_ops=after))
            began = time.process_time()
            r = solve(problem, SolveOptions(time_limit=args.time_limit, threads=args.threads, settings=knobs))
            cells.append(f"{r.schedule.makespan:g} ({r.status}, {time.process_time() - began:.0f} CPU s)")
        print("| " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
