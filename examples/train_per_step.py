"""A plan per training step on 2 CPU ranks: draw a batch of documents, pack it, plan it, run it, check it.

    python examples/train_per_step.py --steps 3                    # spawns 2 ranks (gloo, CPU)
    torchrun --nproc_per_node 2 examples/train_per_step.py --steps 3

Every step draws documents of long-tailed lengths, packs them in the loader's order into microbatches of a
fixed token budget (32 tokens: the count of microbatches and every document mask change from step to step),
builds the step's problem from the document lengths (``problem_for_batch``: the costs of llama-1b-like at
4096 tokens a microbatch, each token of the shrunk model run here standing for 128) and plans it on rank 0
with ``ppsolve.Planner`` (step k + 1 is planned while step k runs). Every rank gets rank 0's schedule in
memory and runs the step through ppsolve's runtime and through PyTorch's (export's actions and side plan
handed over in memory), each token attending only to its own document. Each time, every rank's gradients
(and the loss) are compared with one process that runs each document alone: exit 1 above 1e-5.
"""

from __future__ import annotations

import argparse
import os
import random
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import ppsolve
from ppsolve.costmodel import Layout, hardware_of_gpu, load_transformer, problem_for_batch
from ppsolve.costmodel.descriptions import shrink
from ppsolve.costmodel.packing import pack_sequential
from ppsolve.executor import models
from ppsolve.executor.reference import documents_reference
from ppsolve.executor.spec import spec_of_transformer
from ppsolve.executor.training import PipelineRank, StepBatch, compare_step, share_schedule

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLANNED = load_transformer(os.path.join(ROOT, "models/transformers/llama-1b-like.json"))  # the costs planned
RUN = shrink(PLANNED, "hidden=32,sequence=32,vocabulary=64")  # the model run: the same layers, narrower
SCALE = PLANNED.sequence // RUN.sequence  # real tokens per token run here
TOLERANCE = 1e-5


def draw_batch(step: int, seed: int, documents: int = 10) -> StepBatch:
    """The step's documents (long-tailed lengths, 1 to 32 tokens), packed in order to the token budget."""
    rng = random.Random(seed * 1000 + step)
    lengths = [min(RUN.sequence, max(1, round(rng.lognormvariate(1.8, 0.9)))) for _ in range(documents)]
    tokens = torch.Generator().manual_seed(seed * 1000 + step)
    docs = iter([torch.randint(RUN.vocabulary, (n + 1,), generator=tokens) for n in lengths])
    packed = pack_sequential(lengths, RUN.sequence)
    return StepBatch(tuple(tuple(next(docs) for _ in microbatch) for microbatch in packed), RUN.sequence)


def problem_of(batch: StepBatch, devices: int) -> ppsolve.Problem:
    """The step's problem: its microbatches' document lengths at the planned model's scale."""
    lengths = [[n * SCALE for n in microbatch] for microbatch in batch.lengths]
    return problem_for_batch(PLANNED, hardware_of_gpu("H100"), Layout(devices=devices, microbatches=1), lengths,
                             tokens_per_microbatch=PLANNED.sequence)


def plan_text(schedule: ppsolve.Schedule) -> str:
    """Each device's compute ops in planned order: what differs between steps."""
    return " | ".join(" ".join(str(op.op) for op in schedule.ops_of_device(d) if op.kind.is_compute)
                      for d in range(schedule.problem.devices))


def train(rank: int, world: int, steps: int, seed: int, time_limit: float, runtimes: list[str]) -> None:
    spec = spec_of_transformer(RUN)
    batches = [draw_batch(k, seed) for k in range(steps)]
    pipe = PipelineRank(spec, problem_of(batches[0], world), rank)
    optimizer = torch.optim.SGD(pipe.parameters(), lr=0.1)
    whole = models.build_full(spec)  # the reference, trained alongside
    whole_optimizer = torch.optim.SGD(whole.parameters(), lr=0.1)
    planner = ppsolve.Planner(time_limit=time_limit, threads=1) if rank == 0 else None
    future = planner.submit(problem_of(batches[0], world)) if planner else None
    failed = False
    for k, batch in enumerate(batches):
        schedule = share_schedule(future.result() if planner else None)
        if planner and k + 1 < steps:
            future = planner.submit(problem_of(batches[k + 1], world))  # planned while this step runs
        reference = documents_reference(whole, batch.documents)
        if rank == 0:
            print(f"step {k}: {batch.microbatches} microbatches of {batch.budget} tokens, documents "
                  f"{batch.lengths}; plan {schedule.method.name}, makespan {schedule.makespan:.2f} ms: "
                  f"{plan_text(schedule)}", flush=True)
        for runtime in runtimes:
            optimizer.zero_grad(set_to_none=True)
            result = pipe.step(schedule, batch, runtime)
            comparison = compare_step(reference, result, pipe.modules)
            every = [None] * world
            dist.all_gather_object(every, (comparison.max_error, comparison.worst, comparison.missing))
            worst = max(every, key=lambda c: c[0])
            ok = worst[0] <= TOLERANCE and not any(c[2] for c in every)
            failed |= not ok
            if rank == 0:
                print(f"  {runtime} runtime: loss {reference.loss:.6f}; largest error {worst[0]:.2e} ({worst[1]}) "
                      f"over every rank's gradients: {'OK' if ok else 'MISMATCH'}", flush=True)
        optimizer.step()
        whole_optimizer.step()
    if planner:
        planner.close()
    if failed:
        raise SystemExit(1)


def _spawned(rank: int, world: int, port: int, options: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        train(rank, world, options.steps, options.seed, options.time_limit, options.runtimes.split(","))
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time-limit", type=float, default=0.3, help="seconds to plan each step")
    parser.add_argument("--runtimes", default="ppsolve,torch", help="ppsolve, torch or both")
    options = parser.parse_args(argv)
    if "RANK" in os.environ:  # torchrun
        dist.init_process_group("gloo")
        try:
            train(dist.get_rank(), dist.get_world_size(), options.steps, options.seed, options.time_limit,
                  options.runtimes.split(","))
        finally:
            dist.destroy_process_group()
        return 0
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    try:
        mp.spawn(_spawned, args=(2, port, options), nprocs=2)
    except mp.ProcessExitedException:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
