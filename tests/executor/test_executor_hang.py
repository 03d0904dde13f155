"""A rank that hangs is named: the run fails with the ranks still running and where each one is."""

from __future__ import annotations

import multiprocessing
import os
import signal
import tempfile
import threading
import time

import pytest

torch = pytest.importorskip("torch")

from ppsolve.executor import launch  # noqa: E402
from ppsolve.executor.api import execute  # noqa: E402
from ppsolve.executor.runtime import Job  # noqa: E402
from tests.executor.helpers import MODELS, make, pipelined_orders, problem  # noqa: E402

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs POSIX signals")


def _stop_rank_when_started(folder, rank: int, stopped: list) -> None:
    """Stop (SIGSTOP) the spawned rank ``rank`` once it runs ppsolve's code (its stack file exists):
    it hangs from then on."""
    ends = time.monotonic() + 600
    while time.monotonic() < ends:
        started = list(folder.glob(f"ppsolve-run-*/stack-{rank}.txt"))
        for child in multiprocessing.active_children():
            if started and child.name == f"ppsolve-rank-{rank}" and child.pid:
                os.kill(child.pid, signal.SIGSTOP)
                stopped.append(child.pid)
                return
        time.sleep(0.01)


@pytest.mark.slow
def test_a_stopped_rank_is_named(tmp_path, monkeypatch):
    # rank 1 stops: rank 0's wait for it times out; the error names rank 1 as the one still running
    # (a stopped process writes no stack)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the run's folder goes
    prob = problem(2, 2)
    schedule = make(prob, pipelined_orders(prob, lag=1), "1f1b-order")
    stopped = []
    watcher = threading.Thread(target=_stop_rank_when_started, args=(tmp_path, 1, stopped), daemon=True)
    watcher.start()
    with pytest.raises(launch.ExecutionError) as error:
        execute(schedule, MODELS / "mlp-tiny.json", timeout_s=5, device="cpu")
    watcher.join(5)
    assert stopped
    message = str(error.value)
    assert message.startswith("rank 0 failed: ")
    assert message.endswith("; still running: rank 1 (no stack: stopped, or stuck outside Python)"), message


@pytest.mark.slow
def test_a_waiting_rank_says_where_it_waits(tmp_path):
    # one rank of two started: it waits in init_process_group for the other; asked, it names that frame
    prob = problem(2, 2)
    schedule = make(prob, pipelined_orders(prob, lag=1), "1f1b-order")
    job = Job(schedule=schedule.to_dict(), model={}, timeout_s=120)
    context = multiprocessing.get_context("spawn")
    init = f"tcp://127.0.0.1:{launch.free_port()}"
    proc = context.Process(target=launch.run_child, args=(job, 0, 2, init, str(tmp_path)), daemon=True)
    proc.start()
    try:
        stack = tmp_path / "stack-0.txt"
        ends = time.monotonic() + 300
        text = ""
        while time.monotonic() < ends and "_rank_main" not in text and proc.exitcode is None:
            time.sleep(1)  # until it has imported torch and waits for its peer
            if stack.exists():
                text = launch.still_running(str(tmp_path), [proc])
                stack.write_text("")  # a fresh dump next time
    finally:
        proc.kill()
        proc.join(10)
    assert text.startswith("; still running: rank 0 at ppsolve/executor/launch.py:")
    assert text.endswith(" in _rank_main")
