"""OMP_WAIT_POLICY=PASSIVE (math_pins.sleep_idle_openmp_threads, called where the pipeline loads) for
every stage process: idle OpenMP threads sleep instead of spinning, so a machine shared with other
jobs costs time in proportion
(benchmarks/bench_process_settings.py --setting omp-wait-policy); the work each thread does is the same, and so are the bits."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.helpers import REPO
from tests.pipeline.runtime.test_math_pins import _run


def test_the_openmp_wait_policy_changes_no_bit_and_every_stage_sleeps_idle_threads(tmp_path):
    spinning = _run(tmp_path, "active", True, {"OMP_WAIT_POLICY": "ACTIVE"}, one_core=False)
    sleeping = _run(tmp_path, "passive", True, {"OMP_WAIT_POLICY": "PASSIVE"}, one_core=False)
    for mechanism in ("copynet", "wean"):
        assert spinning[mechanism] == sleeping[mechanism], mechanism  # weights, losses, beam scores, metrics
        assert sleeping[mechanism]["valid_loss"][-1] < sleeping[mechanism]["valid_loss"][0]  # it trained
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    for package in ("flows", "pipeline"):  # the stage flows, and `python -m pipeline.*` (a second machine's train_node)
        probe = f"import {package}, os; print(os.environ['OMP_WAIT_POLICY'])"
        proc = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env={**env, "PYTHONPATH": str(REPO)},
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert proc.stdout.strip() == "PASSIVE", (package, proc.stderr[-2000:])
