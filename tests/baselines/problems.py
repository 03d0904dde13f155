"""Problems the baseline tests share: uniform or uneven costs on any placement."""

from __future__ import annotations

from ppsolve.problem import Problem, problem_from_dict

PLACEMENT_OF = {"linear": ("linear", 1), "interleaved": ("interleaved", 2), "vshape": ("vshape", 2)}


def make_problem(d: int, m: int, placement: str = "linear", backward: str = "split", costs: str = "uniform",
                 capacity=None, offload: dict | None = None, chunks: int | None = None,
                 F: float = 1.0, B: float = 1.0, W: float = 1.0) -> Problem:
    spec, v = PLACEMENT_OF[placement]
    v = chunks or v
    S = d * v
    data = {"format": "ppsolve/problem@1", "devices": d, "microbatches": m, "chunks": v, "placement": spec,
            "backward": backward,
            "time": {"forward": F, "backward_input": B, "backward_weight": W},
            "memory": {"activation": 1.0, "capacity": capacity}}
    if costs == "uneven":
        # a light first stage, a heavy last one (embedding and LM head), odd sizes in between
        data["time"] = {"forward": [0.5 + (s * 7 % 5) * 0.4 for s in range(S - 1)] + [3.0],
                        "backward_input": [0.8 + (s * 3 % 4) * 0.5 for s in range(S - 1)] + [3.5],
                        "backward_weight": [0.6 + (s * 5 % 3) * 0.3 for s in range(S)],
                        "p2p": 0.25}
        data["memory"] = {"activation": [1.0 + (s * 2 % 3) * 0.5 for s in range(S)],
                          "weight_hold": [0.2 * (1.0 + (s * 2 % 3) * 0.5) for s in range(S)],
                          "capacity": capacity}
    if offload is not None:
        data["offload"] = offload
    return problem_from_dict(data)



def with_multipliers(problem: Problem, multipliers) -> Problem:
    """``problem`` with every time and memory size of microbatch j times ``multipliers[j]``: a
    per-microbatch problem (contract version 4), as packed batches of different lengths give."""
    data = problem.to_dict()

    def scaled(grid) -> list[list[float]]:
        return [[grid.at(s, j) * k for j, k in enumerate(multipliers)] for s in range(problem.num_stages)]

    for block, name in (("time", "forward"), ("time", "backward_input"), ("time", "backward_weight"),
                        ("memory", "activation"), ("memory", "weight_hold")):
        data[block][name] = scaled(getattr(problem, name))
    if problem.recompute is not None:
        data["recompute"] = {"keep": scaled(problem.recompute.keep), "time": scaled(problem.recompute.time)}
    return problem_from_dict(data)
