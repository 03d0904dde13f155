"""Starting one process per device, and making a failure anywhere end the run.

``launch`` spawns the ranks itself on one machine; ``run_in_torchrun`` is the
same worker when ``torchrun`` (or any launcher setting RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT) started this process, also across nodes. Rank 0
gathers every rank's record over the process group. A rank that raises writes one
line to the run's error folder and exits; the parent stops the other ranks at
once and reports that line. Every wait has a timeout, so a lost peer is an error,
never a hang. The backend is the rank's ``Device``'s: gloo on CPU, NCCL on
``cuda:LOCAL_RANK`` (the rank index for spawned ranks).
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import tempfile
import time
import traceback
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from ppsolve.errors import PpsolveError
from ppsolve.executor.device import make_device
from ppsolve.executor.runtime import Job, RankResult, run_rank

STARTUP_S = 60.0  # extra time for the processes to start and import torch


class ExecutionError(PpsolveError):
    """A rank failed, the run timed out, or the gradient check failed."""

    exit_code = 1


def in_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def _rank_main(job: Job | list[Job], rank: int, world: int, init_method: str, local_rank: int) -> list | None:
    jobs = job if isinstance(job, list) else [job]
    torch.set_num_threads(1)
    device = make_device(jobs[0].device, local_rank)
    dist.init_process_group(device.backend, init_method=init_method, rank=rank, world_size=world,
                            timeout=timedelta(seconds=max(j.timeout_s for j in jobs)), **device.init_options())
    try:
        results = []
        for one in jobs:  # several jobs (``api.execute_all``): one after another, all ranks in step
            if one.runtime == "torch":
                from ppsolve.executor.torch_runtime import run_rank_torch
                results.append(run_rank_torch(one, rank, device))
            else:
                results.append(run_rank(one, rank, device))
            dist.barrier()
        result = results if isinstance(job, list) else results[0]
        gathered = [None] * world if rank == 0 else None
        dist.gather_object(result, gathered, dst=0)
        dist.barrier()
        return gathered
    finally:
        dist.destroy_process_group()


def _child(job: Job, rank: int, world: int, init_method: str, folder: str) -> None:
    try:
        gathered = _rank_main(job, rank, world, init_method, rank)
        if rank == 0:
            torch.save(gathered, Path(folder) / "results.pt")
    except BaseException as exc:  # noqa: BLE001 - reported to the parent as one line
        line = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
        (Path(folder) / f"error-{rank}.txt").write_text(f"{time.time()}\n{line}\n{traceback.format_exc()}")
        os._exit(1)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch(job: Job | list[Job], world: int) -> list:
    """Run ``job`` on ``world`` spawned ranks; return every rank's result (rank order); for a
    list of jobs, every rank's list of results (one per job)."""
    context = multiprocessing.get_context("spawn")
    init_method = f"tcp://127.0.0.1:{_free_port()}"
    with tempfile.TemporaryDirectory(prefix="ppsolve-run-") as folder:
        procs = [context.Process(target=_child, args=(job, rank, world, init_method, folder), daemon=True)
                 for rank in range(world)]
        for proc in procs:
            proc.start()
        budget = sum(j.timeout_s * max(1, j.steps) for j in (job if isinstance(job, list) else [job]))
        deadline = time.monotonic() + STARTUP_S + budget
        try:
            while any(p.exitcode is None for p in procs):
                failed = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
                if failed:
                    raise ExecutionError(_first_failure(folder, failed, procs))
                if time.monotonic() > deadline:
                    raise ExecutionError(f"timed out after {budget + STARTUP_S:.0f} s "
                                         f"with rank(s) {[r for r, p in enumerate(procs) if p.exitcode is None]} "
                                         "still running")
                time.sleep(0.05)
            failed = [r for r, p in enumerate(procs) if p.exitcode != 0]
            if failed:
                raise ExecutionError(_first_failure(folder, failed, procs))
        finally:
            for proc in procs:
                if proc.exitcode is None:
                    proc.terminate()
            for proc in procs:
                proc.join(5)
                if proc.exitcode is None:
                    proc.kill()
                    proc.join(5)
        return torch.load(Path(folder) / "results.pt", weights_only=False)


def _first_failure(folder: str, failed: list[int], procs) -> str:
    """The error line of the rank that failed first (others often fail because of it)."""
    time.sleep(0.2)  # let the failing rank finish writing
    reports = []
    for rank in range(len(procs)):
        path = Path(folder) / f"error-{rank}.txt"
        if path.exists():
            lines = path.read_text().splitlines()
            if len(lines) >= 2:
                reports.append((float(lines[0]), rank, lines[1]))
    if reports:
        _, rank, line = min(reports)
        return f"rank {rank} failed: {line}"
    rank = failed[0]
    return f"rank {rank} exited with code {procs[rank].exitcode}"


def run_in_torchrun(job: Job) -> list[RankResult] | None:
    """This process is one rank started by torchrun; rank 0 gets every result, others None."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    return _rank_main(job, rank, world, "env://", local_rank())


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", os.environ.get("RANK", "0")))


def local_ranks(world: int) -> int:
    """Ranks on this machine: all of them when spawned, LOCAL_WORLD_SIZE under torchrun."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", world)) if in_torchrun() else world
