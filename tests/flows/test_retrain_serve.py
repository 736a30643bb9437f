"""`copyseq retrain serve` against a local Prefect server: it serves the deployment on the cron of
params.yaml, and a SIGTERM (`kill`, a container stop) stops it quietly with the schedule paused."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.helpers import REPO, tiny_params

pytestmark = pytest.mark.slow

DEPLOYMENT = "retrain/retrain-copy_rules"

# Serve in the background, wait until its runner has polled the server (its SIGTERM handler is then
# installed), stop it with SIGTERM, and record the deployment before and after.
DRIVER = r"""
set -u
python -m flows.retrain serve --params "$1/params.yaml" >"$1/serve.out" 2>"$1/serve.err" & pid=$!
for _ in $(seq 1 240); do
  prefect deployment inspect {deployment} -o json >"$1/before.json" 2>/dev/null \
    && grep -q '"last_polled": "' "$1/before.json" && break
  sleep 0.5
done
kill -TERM $pid
wait $pid; echo $? >"$1/rc"
prefect deployment inspect {deployment} -o json >"$1/after.json"
""".replace("{deployment}", DEPLOYMENT)


def deployment(path: Path) -> dict:
    """`prefect deployment inspect -o json`'s record."""
    return json.loads(path.read_text())


def test_serve_runs_the_cron_of_params_and_a_sigterm_pauses_it_quietly(tmp_path):
    params = tiny_params()
    params["retrain"]["cron"] = "0 3 1 1 *"  # January 1st: no scheduled run fires during the test
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    shutil.copy(REPO / "dvc.yaml", tmp_path / "dvc.yaml")  # serve accepts a project's params file only
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / ".prefect"), "PREFECT_LOGGING_LEVEL": "WARNING"}
    env.pop("PREFECT_API_URL", None)
    proc = subprocess.run(
        ["scripts/with_prefect_server.sh", "bash", "-c", DRIVER, "driver", str(tmp_path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    err = (tmp_path / "serve.err").read_text()
    before, after = deployment(tmp_path / "before.json"), deployment(tmp_path / "after.json")
    assert (tmp_path / "rc").read_text().strip() == "0", err
    assert "Traceback" not in err and "never awaited" not in err, err
    assert (
        (tmp_path / "serve.out")
        .read_text()
        .startswith("serving retrain/retrain-copy_rules on cron '0 3 1 1 *' (Ctrl-C stops it")
    )
    assert [s["schedule"]["cron"] for s in before["schedules"]] == ["0 3 1 1 *"]
    assert before["paused"] is False and before["last_polled"]
    assert after["paused"] is True
