"""``--time-limit`` counts from the start of the command's own work, not from the creation of the process:
work done before in the same process (a job script's ``sleep``, then ``exec``) does not eat it, and the
schedule file's ``seconds`` is the command's own duration."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers import ROOT

SLEEP = 6  # seconds the process spends before ppsolve starts, twice the time limit


def test_work_before_exec_does_not_eat_the_time_limit(tmp_path):
    out = tmp_path / "s.json"
    script = (f"sleep {SLEEP}; exec {sys.executable} -m ppsolve solve instances/example.json -o {out} "
              f"--time-limit 3 --quiet")
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    method = json.loads(out.read_text())["method"]
    # counted from the process's creation, seconds would be at least SLEEP and the solve would have no time
    assert method["seconds"] < SLEEP
    assert "could not be built within the time limit" not in " ".join(method["notes"])
