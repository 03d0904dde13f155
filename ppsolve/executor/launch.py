"""Starting one process per device, and making a failure anywhere end the run.

``launch`` spawns the ranks itself on one machine; ``run_in_torchrun`` is the
same worker when ``torchrun`` (or any launcher setting RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT) started this process, also across nodes. Rank 0
gathers every rank's record over the process group. A rank that raises writes one
line to the run's error folder and exits; the parent stops the other ranks at
once and reports that line, with where each rank still running is (a rank that hung,
or the ranks waiting for it: each dumps its stack when asked). Every wait has a
timeout, so a lost peer is an error, never a hang; the run's own clock starts when
every rank has joined the process group, so a slow start does not eat it. The backend is the rank's ``Device``'s: gloo on CPU, NCCL on
``cuda:LOCAL_RANK`` (the rank index for spawned ranks).
"""

from __future__ import annotations

import faulthandler
import multiprocessing
import os
import signal
import socket
import sys
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

STARTUP_S = 120.0  # for the processes to start and import torch (a loaded machine takes a minute), then
# ``timeout_s`` more to join the process group; the run's own limit counts from there
STACK_WAIT_S = 1.0  # how long the parent waits for a rank still running to write its stack
GRACE_S = 5.0  # past the run's own limit, so that a rank's own timeout (counted from its wait) is what reports


class ExecutionError(PpsolveError):
    """A rank failed, the run timed out, or the gradient check failed."""

    exit_code = 1


def in_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def _rank_main(job: Job | list[Job], rank: int, world: int, init_method: str, local_rank: int,
               ready: Path | None = None) -> list | None:
    jobs = job if isinstance(job, list) else [job]
    torch.set_num_threads(1)
    device = make_device(jobs[0].device, local_rank)
    dist.init_process_group(device.backend, init_method=init_method, rank=rank, world_size=world,
                            timeout=timedelta(seconds=max(j.timeout_s for j in jobs)), **device.init_options())
    if ready is not None:
        ready.touch()
    try:
        results = []
        for one in jobs:  # several jobs (``api.execute_all``): one after another, all ranks in step
            if one.runtime == "torch":
                from ppsolve.executor.torch_runtime import run_rank_torch
                results.append(run_rank_torch(one, rank, device))
            elif one.runtime == "torchtitan":
                from ppsolve.executor.torchtitan_runtime import run_rank_torchtitan
                results.append(run_rank_torchtitan(one, rank, device))
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


def run_child(job: Job | list[Job], rank: int, world: int, init_method: str, folder: str) -> None:
    if hasattr(signal, "SIGUSR1"):  # the parent asks a rank still running where it is
        faulthandler.register(signal.SIGUSR1, file=open(Path(folder) / f"stack-{rank}.txt", "w"), all_threads=True)
    try:
        gathered = _rank_main(job, rank, world, init_method, rank, Path(folder) / f"ready-{rank}")
        if rank == 0:
            torch.save(gathered, Path(folder) / "results.pt")
    except BaseException as exc:  # noqa: BLE001 - reported to the parent as one line
        line = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
        (Path(folder) / f"error-{rank}.txt").write_text(f"{time.time()}\n{line}\n{traceback.format_exc()}")
        os._exit(1)
    # The work is done and its results written: leave without the interpreter's teardown, where a thread
    # torch left behind can abort the process ("terminate called without an active exception", exit -6,
    # about 1 run in 50 of the torch runtime's offload plans) after a run that succeeded.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch(job: Job | list[Job], world: int) -> list:
    """Run ``job`` on ``world`` spawned ranks; return every rank's result (rank order); for a
    list of jobs, every rank's list of results (one per job)."""
    context = multiprocessing.get_context("spawn")
    init_method = f"tcp://127.0.0.1:{free_port()}"
    with tempfile.TemporaryDirectory(prefix="ppsolve-run-") as folder:
        procs = [context.Process(target=run_child, args=(job, rank, world, init_method, folder), daemon=True,
                                 name=f"ppsolve-rank-{rank}") for rank in range(world)]
        for proc in procs:
            proc.start()
        jobs = job if isinstance(job, list) else [job]
        budget = sum(j.timeout_s * max(1, j.steps) for j in jobs)  # every job, one after another
        started = time.monotonic()
        deadline = started + STARTUP_S + max(j.timeout_s for j in jobs)  # until every rank has joined
        ready = False
        try:
            while any(p.exitcode is None for p in procs):
                failed = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
                if failed:
                    raise ExecutionError(_first_failure(folder, failed, procs) + still_running(folder, procs))
                if not ready and all((Path(folder) / f"ready-{r}").exists() for r in range(world)):
                    ready = True
                    deadline = time.monotonic() + budget + GRACE_S
                if time.monotonic() > deadline:
                    waited = time.monotonic() - started
                    what = "" if ready else (
                        f" before rank(s) {[r for r in range(world) if not (Path(folder) / f'ready-{r}').exists()]} "
                        "joined the process group")
                    raise ExecutionError(f"timed out after {waited:.0f} s{what}" + still_running(folder, procs))
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


def still_running(folder: str, procs) -> str:
    """``; still running: rank 1 at ppsolve/executor/comm.py:109 in wait_recv, ...`` for each rank not yet
    ended: its innermost ppsolve frame, from the stack it dumps when sent SIGUSR1 (nothing where the
    platform has no such signal)."""
    running = [r for r, p in enumerate(procs) if p.exitcode is None]
    if not running or not hasattr(signal, "SIGUSR1"):
        return ""
    stacks = {r: Path(folder) / f"stack-{r}.txt" for r in running}
    asked = [r for r in running if stacks[r].exists()]  # the others have not started ppsolve's code yet
    for rank in asked:
        try:
            os.kill(procs[rank].pid, signal.SIGUSR1)
        except OSError:
            pass
    ends = time.monotonic() + STACK_WAIT_S
    places = {r: "(not started yet: importing)" for r in running if r not in asked}
    while time.monotonic() < ends and len(places) < len(running):
        time.sleep(0.05)
        places |= {r: where for r in asked if (where := _innermost_frame(stacks[r]))}
    return "; still running: " + ", ".join(
        f"rank {r} " + places.get(r, "(no stack: stopped, or stuck outside Python)") for r in running)


def _innermost_frame(path: Path) -> str | None:
    """'at ppsolve/x.py:12 in f' from a faulthandler dump: the main thread's innermost frame in ppsolve's
    code (else its innermost frame); None before the dump is written."""
    text = path.read_text() if path.exists() else ""
    blocks = [b for b in text.split("\n\n") if "File " in b]
    if not blocks:
        return None
    block = next((b for b in blocks if b.startswith("Current thread")), blocks[0])
    frames = [line.strip() for line in block.splitlines() if line.strip().startswith("File ")]
    frame = next((f for f in frames if f"{os.sep}ppsolve{os.sep}" in f), frames[0])
    # File "/path/to/ppsolve/executor/comm.py", line 120 in recv
    name, _, rest = frame[len('File "'):].partition('", line ')
    if f"{os.sep}ppsolve{os.sep}" in name:
        name = "ppsolve" + name.rsplit(f"{os.sep}ppsolve", 1)[1]
    line, _, function = rest.partition(" in ")
    return f"at {name}:{line} in {function}"


def run_in_torchrun(job: Job) -> list[RankResult] | None:
    """This process is one rank started by torchrun; rank 0 gets every result, others None."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    return _rank_main(job, rank, world, "env://", local_rank())


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", os.environ.get("RANK", "0")))


def local_ranks(world: int) -> int:
    """Ranks on this machine: all of them when spawned, LOCAL_WORLD_SIZE under torchrun."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", world)) if in_torchrun() else world
