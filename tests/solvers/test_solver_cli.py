"""``ppsolve solve`` from the command line: output file, exit codes, JSON summary."""

from __future__ import annotations

import json

from ppsolve.checker import check
from ppsolve.cli import main
from ppsolve.schedule import load_schedule
from tests.helpers import problem_dict
from tests.helpers import ROOT


def _write(tmp_path, **overrides):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(problem_dict(**overrides)))
    return path


def test_solve_writes_a_checked_optimal_schedule(tmp_path, capsys):
    problem = _write(tmp_path, microbatches=2)
    out = tmp_path / "s.json"
    assert main(["solve", str(problem), "-o", str(out), "--time-limit", "5", "--quiet", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["status"] == "optimal" and summary["makespan"] == 7
    schedule = load_schedule(out)
    assert check(schedule).ok
    assert schedule.method.name == "cpsat" and schedule.method.status == "optimal"
    assert schedule.method.lower_bound == 7


def test_infeasible_capacity_exit_3(tmp_path, capsys):
    problem = _write(tmp_path, chunks=2, placement="vshape", memory_capacity=1)
    assert main(["solve", str(problem), "-o", str(tmp_path / "s.json"), "--quiet"]) == 3
    err = capsys.readouterr().err
    assert "needs at least 2" in err and err.count("\n") == 1
    assert not (tmp_path / "s.json").exists()


def test_progress_line_unless_quiet(tmp_path, capsys):
    problem = _write(tmp_path, devices=3, microbatches=4, memory_capacity=2)
    assert main(["solve", str(problem), "-o", str(tmp_path / "s.json"), "--time-limit", "5"]) == 0
    captured = capsys.readouterr()
    assert "cpsat" in captured.err and "makespan" in captured.err and "bound" in captured.err
    assert "makespan" in captured.out and "peak memory" in captured.out


def test_ctrl_c_writes_best_so_far(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    root = ROOT
    out = tmp_path / "s.json"
    # Tight memory with offload: not proven within seconds, so the search is still running.
    cmd = [sys.executable, "-m", "ppsolve", "solve", str(root / "instances/linear-offload-private-4x8.json"),
           "-o", str(out), "--time-limit", "60"]
    env = {**os.environ, "PYTHONPATH": str(root)}
    # SIGINT back to its default in the child: a test run started in the background by a
    # non-interactive shell has it ignored, and the child would inherit that and never see Ctrl-C
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        for line in proc.stderr:
            if line.startswith("cpsat makespan"):  # the makespan phase has started (from the warm start)
                break
        time.sleep(1.0)  # the search is running
        proc.send_signal(signal.SIGINT)
        try:
            stdout, stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
            raise AssertionError(f"no exit 30 s after Ctrl-C; stdout: {stdout[-2000:]!r} stderr: {stderr[-2000:]!r}")
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, (stdout, stderr)
    assert "interrupted" in stdout and "outside the search" not in stdout
    schedule = load_schedule(out)
    assert check(schedule).ok and schedule.method.extra.get("interrupted") is True


def test_no_solution_in_time_exit_4(tmp_path, capsys, monkeypatch):
    # a search that finds nothing, on any machine however fast: the backend answers no solution
    from ppsolve.solvers.api import PhaseAnswer, Status
    from ppsolve.solvers.cpsat import backend

    monkeypatch.setattr(backend, "run_phase", lambda task: PhaseAnswer(Status.UNKNOWN))
    out = tmp_path / "s.json"
    code = main(["solve", str(ROOT / "instances/example.json"), "-o", str(out), "--warm-start", "none",
                 "--time-limit", "2", "--threads", "1", "--quiet"])
    assert code == 4
    assert "no schedule found within the time limit" in capsys.readouterr().err
    assert not out.exists()


def test_warm_start_from_a_schedule_file_goes_on_from_it(tmp_path, capsys):
    problem = _write(tmp_path, devices=3, microbatches=6)
    serial = tmp_path / "gpipe.json"  # a slow valid start: every W waits for the last F
    assert main(["baseline", str(problem), "-m", "gpipe", "-o", str(serial)]) == 0
    given = load_schedule(serial)
    out = tmp_path / "s.json"
    capsys.readouterr()
    assert main(["solve", str(problem), "-o", str(out), "--time-limit", "10", "--warm-start", str(serial),
                 "--json"]) == 0
    captured = capsys.readouterr()
    assert f"warm start {given.method.name}: makespan {given.makespan:g}" in captured.err
    solved = load_schedule(out)
    assert check(solved).ok and solved.makespan < given.makespan
    assert solved.method.extra["warm_start"] == given.method.name
    assert json.loads(captured.out)["makespan"] == solved.makespan


def test_warm_start_file_for_another_problem_or_breaking_the_cap_is_refused(tmp_path, capsys):
    loose = _write(tmp_path, devices=3, microbatches=6)
    wide = tmp_path / "wide.json"
    assert main(["baseline", str(loose), "-m", "gpipe", "-o", str(wide)]) == 0  # holds 6 activations
    other = tmp_path / "other.json"
    other.write_text(json.dumps(problem_dict(devices=3, microbatches=6, time_forward=2)))
    capped = tmp_path / "capped.json"
    capped.write_text(json.dumps(problem_dict(devices=3, microbatches=6, memory_capacity=2)))
    out = tmp_path / "s.json"
    capsys.readouterr()
    for problem, expected in ((other, "for another problem: forward[0] is 1.0 in it, 2.0 in the problem"),
                              (capped, "breaks a rule on this problem")):
        code = main(["solve", str(problem), "-o", str(out), "--warm-start", str(wide), "--quiet"])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1, err
        assert "error: warm-start: " in err and expected in err, err
        assert not out.exists()
    # the same file is a fine start where the cap is wide enough
    assert main(["solve", str(loose), "-o", str(out), "--warm-start", str(wide), "--quiet", "--time-limit", "5"]) == 0
    assert main(["solve", str(capped), "-o", str(out), "--warm-start", str(tmp_path / "missing.json"),
                 "--quiet"]) == 2
    assert "warm-start: file not found" in capsys.readouterr().err
