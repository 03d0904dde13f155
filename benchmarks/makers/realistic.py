"""Write the realistic problems of the recompute issue to instances/realistic/ (deterministic).

    python -m benchmarks.makers.realistic [--out instances/realistic] [--check]

Two models from the cost model (models/transformers/: Llama-3-8B-like, Llama-2-13B-like) on
8 H100s, 32 microbatches, linear (v = 1) and interleaved (v = 2), each at three activation
budgets: 0.4, 0.55 and 0.75 of the peak of the same problem's 1F1B (interleaved 1F1B for v = 2)
without any memory lever, rounded to whole GiB. Every file is what

    ppsolve problem MODEL --gpu H100 --devices 8 --microbatches 32 --chunks V --placement P
        --partition LAYOUT --recompute decide --offload --capacity C -o FILE

writes (the script runs that command; the file's ``x-made-by`` repeats it). The partitions
are fixed (LAYOUT below), so nothing here runs a solver: the 8B linear one is what
``--partition auto`` chose; the others balance the blocks per device, the LM head on the last.
``--check`` writes nothing and exits 1 if a bundled file differs from what it would write.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from benchmarks import harness
from benchmarks.harness import ROOT
from ppsolve.cli import main as ppsolve_main
from ppsolve.costmodel import Layout, build_problem, hardware_of_gpu, load_transformer, parse_partition
from ppsolve.methods import RunOptions, get_method

GPU, DEVICES, MICROBATCHES = "H100", 8, 32
BUDGETS = (0.4, 0.55, 0.75)  # of the no-lever 1F1B peak


@dataclass(frozen=True)
class Case:
    stem: str  # file name before -cap{C}-decide.json
    model: str  # under models/transformers/
    chunks: int
    placement: str
    layout: str

    @property
    def baseline(self) -> str:
        return "1f1b" if self.placement == "linear" else "interleaved-1f1b"


CASES = (
    # --partition auto's choice (the LM head of a 128k vocabulary costs about 1.8 blocks)
    Case("llama8b-like-8x32", "llama-3-8b-like", 1, "linear", "Et*4|t*4|t*4|t*4|t*4|t*4|t*5|t*3L"),
    # the same blocks per device: device 6 five, device 7 three and the head
    Case("llama8b-like-8x32-interleaved-v2", "llama-3-8b-like", 2, "interleaved",
         "Et*2|t*2|t*2|t*2|t*2|t*2|t*3|t*2|t*2|t*2|t*2|t*2|t*2|t*2|t*2|t*1L"),
    # a 32k vocabulary's head costs under a tenth of a block: five blocks per device
    Case("llama13b-like-8x32", "llama-2-13b-like", 1, "linear", "Et*5|t*5|t*5|t*5|t*5|t*5|t*5|t*5L"),
    Case("llama13b-like-8x32-interleaved-v2", "llama-2-13b-like", 2, "interleaved",
         "Et*2|t*3|t*2|t*3|t*2|t*3|t*2|t*3|t*3|t*2|t*3|t*2|t*3|t*2|t*3|t*2L"),
)


def model_path(case: Case) -> Path:
    return ROOT / "models" / "transformers" / f"{case.model}.json"


def no_lever_peak(case: Case) -> float:
    """The heaviest device's peak of the case's 1F1B, no cap, no offload, no recompute."""
    model = load_transformer(model_path(case))
    layout = Layout(devices=DEVICES, microbatches=MICROBATCHES, chunks=case.chunks, placement=case.placement,
                    capacity=None)
    problem = build_problem(model, hardware_of_gpu(GPU), layout,
                            parse_partition(case.layout, model.layers, layout.stages))
    schedule = get_method(case.baseline).build(problem, RunOptions(time_limit=60, quiet=True))
    return max(schedule.peak_memory)


def budgets(case: Case) -> list[int]:
    peak = no_lever_peak(case)
    return [math.floor(share * peak + 0.5) for share in BUDGETS]


def command(case: Case, capacity: int, output: str) -> list[str]:
    return ["problem", str(model_path(case).relative_to(ROOT)), "--gpu", GPU, "--devices", str(DEVICES),
            "--microbatches", str(MICROBATCHES), "--chunks", str(case.chunks), "--placement", case.placement,
            "--partition", case.layout, "--recompute", "decide", "--offload", "--capacity", str(capacity),
            "-o", output]


def problem_file(case: Case, capacity: int, scratch: Path) -> dict:
    """What the command writes, with ``x-made-by`` naming it."""
    out = scratch / "problem.json"
    args = command(case, capacity, str(out))
    with contextlib.redirect_stdout(io.StringIO()):
        if ppsolve_main(args) != 0:
            raise SystemExit(f"ppsolve {' '.join(args)} failed")
    data = json.loads(out.read_text())
    shown = command(case, capacity, "FILE")
    data["x-made-by"] = {"script": "benchmarks/makers/realistic.py",
                         "command": "ppsolve " + " ".join(f"'{a}'" if "|" in a else a for a in shown),
                         "budget": f"{capacity} GiB: {BUDGETS} of the no-lever {case.baseline} peak, rounded"}
    return data


def files(scratch: Path) -> dict[str, dict]:
    out = {}
    for case in CASES:
        for capacity in budgets(case):
            out[f"{case.stem}-cap{capacity}-decide.json"] = problem_file(case, capacity, scratch)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__, out=ROOT / "instances" / "realistic")
    parser.add_argument("--check", action="store_true", help="compare with the bundled files, write nothing")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        made = files(Path(scratch))
    if not args.check:
        harness.write_problems(args.out, made)
        return 0
    stale = [name for name, data in made.items()
             if not (args.out / name).exists() or json.loads((args.out / name).read_text()) != data]
    if stale:
        print("differ from what benchmarks.makers.realistic writes: " + ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
