"""The child process that runs HiGHS for the MILP backend (see ``highs_process``).

Why a process: OR-Tools bundles its own, older ``libhighs.so.1``. One process
can load only one library of that name, so after CP-SAT has run ``import
highspy`` fails, and after HiGHS has run CP-SAT fails to load. This file is run
by path with nothing of ppsolve imported; it reads one request from stdin and
writes messages to stdout, each a pickled tuple:

    ("solution", values, objective, dual_bound)   an improving solution
    ("bound", dual_bound)                          now and then
    ("done", status, objective, dual_bound, values, stopped_by, work)

``status`` is the name of HiGHS' model status (e.g. "kOptimal"); ``values`` the
final solution (None without one); ``stopped_by`` "work" (the deterministic work
limit), "stop" (the parent asked, or went away) or None; ``work`` the count of
HiGHS' interrupt checks, the deterministic measure of work done.

The request (a dict): ``lp`` (col_cost, col_lower, col_upper, integer (column
indices), row_lower, row_upper, and the row-wise matrix start, index, value),
``options`` (HiGHS options), ``start`` (column values, or None), ``work_limit``
(interrupt checks, or None), ``until`` (``time.monotonic()``, the same clock in
every process) and ``time_share``: HiGHS' own time limit is that share of the
time left when it starts. A line on stdin after the request, or its end, stops
the search.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import threading
import time


def _model(highspy, lp: dict):
    model = highspy.HighsLp()
    n = len(lp["col_cost"])
    model.num_col_, model.num_row_ = n, len(lp["row_lower"])
    model.col_cost_, model.col_lower_, model.col_upper_ = lp["col_cost"], lp["col_lower"], lp["col_upper"]
    model.row_lower_, model.row_upper_ = lp["row_lower"], lp["row_upper"]
    model.offset_ = lp.get("offset", 0.0)
    matrix = model.a_matrix_
    matrix.format_ = highspy.MatrixFormat.kRowwise
    matrix.num_col_, matrix.num_row_ = n, len(lp["row_lower"])
    matrix.start_, matrix.index_, matrix.value_ = lp["start"], lp["index"], lp["value"]
    integrality = [highspy.HighsVarType.kContinuous] * n
    for j in lp["integer"]:
        integrality[j] = highspy.HighsVarType.kInteger
    model.integrality_ = integrality
    return model


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it asks us to stop
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything HiGHS prints goes to stderr, never into the message stream
    request = pickle.load(sys.stdin.buffer)
    import highspy

    lock = threading.Lock()

    def send(message) -> None:
        with lock:
            pickle.dump(message, out, protocol=pickle.HIGHEST_PROTOCOL)
            out.flush()

    stop = threading.Event()

    def watch() -> None:  # a line, or the end of stdin (the parent went away), stops the search
        sys.stdin.buffer.readline()
        stop.set()

    threading.Thread(target=watch, daemon=True).start()
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.passModel(_model(highspy, request["lp"]))
    for key, value in request["options"].items():
        h.setOptionValue(key, value)
    if request.get("start") is not None:
        solution = highspy.HighsSolution()
        solution.col_value = request["start"]
        h.setSolution(solution)
    work_limit = request.get("work_limit")
    state = {"work": 0, "stopped_by": None}

    def improving(event) -> None:
        data = event.data_out
        send(("solution", [float(x) for x in data.mip_solution], data.objective_function_value, data.mip_dual_bound))

    def interrupt(event) -> None:
        state["work"] += 1
        if state["work"] % 64 == 0:
            send(("bound", event.data_out.mip_dual_bound))
        if work_limit is not None and state["work"] >= work_limit:
            state["stopped_by"] = "work"
            event.interrupt()
        elif stop.is_set():
            state["stopped_by"] = "stop"
            event.interrupt()

    h.cbMipImprovingSolution.subscribe(improving)
    h.cbMipInterrupt.subscribe(interrupt)
    if request.get("until") is not None:  # from now: starting this process took time
        left = request["until"] - time.monotonic()
        h.setOptionValue("time_limit", max(0.01, request.get("time_share", 1.0) * left))
    h.run()
    info = h.getInfo()
    values = [float(x) for x in h.getSolution().col_value] if info.primal_solution_status == 2 else None
    send(("done", h.getModelStatus().name, info.objective_function_value, info.mip_dual_bound, values,
          state["stopped_by"], state["work"]))
    return 0


if __name__ == "__main__":
    # Leave without the interpreter's shutdown: the thread that watches stdin holds its lock, and
    # finalisation waited a second for it (then aborted) on every run. Every message is flushed.
    code = main()
    sys.stderr.flush()
    os._exit(code)
