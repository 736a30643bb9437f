"""A Dask cluster on this machine's loopback, as separate processes started the way a real cluster's
machines start them (docs/corpora.md): one ``dask scheduler`` and ``workers`` ``dask worker``
processes (one thread each, no nanny, so a killed worker stays dead). The prepare flow reaches it
through ``parallel.dask_address``. Shared by the flow's Dask test (tests/flows/test_prepare_dask.py)
and benchmarks/bench_distributed.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


class LoopbackCluster:
    """``with LoopbackCluster(2, workdir) as cluster: ... cluster.address ...``; every process is
    stopped on exit. ``cwd``: where the workers run (they import the project, as the flow does)."""

    def __init__(self, workers: int, workdir: Path, cwd: Path | None = None, start_timeout: float = 120.0) -> None:
        self.n_workers = workers
        self.workdir = Path(workdir)
        self.cwd = cwd
        self.start_timeout = start_timeout
        self.scheduler: subprocess.Popen | None = None
        self.workers: dict[str, subprocess.Popen] = {}
        self.address = ""

    def _spawn(self, module: str, args: list[str], log: str) -> subprocess.Popen:
        out = open(self.workdir / log, "w")  # noqa: SIM115 - the process holds it; closed here after the fork
        try:
            env = {**os.environ, "OMP_NUM_THREADS": "1"}
            return subprocess.Popen(
                [sys.executable, "-m", module, *args],
                cwd=self.cwd,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            out.close()

    def __enter__(self) -> LoopbackCluster:
        self.workdir.mkdir(parents=True, exist_ok=True)
        scheduler_file = self.workdir / "scheduler.json"
        scheduler_file.unlink(missing_ok=True)
        try:
            self.scheduler = self._spawn(
                "distributed.cli.dask_scheduler",
                ["--host", "127.0.0.1", "--port", "0", "--no-dashboard", "--scheduler-file", str(scheduler_file)],
                "scheduler.log",
            )
            deadline = time.monotonic() + self.start_timeout
            while not scheduler_file.exists():
                self._check_alive(deadline)
                time.sleep(0.1)
            self.address = json.loads(scheduler_file.read_text())["address"]
            for i in range(self.n_workers):
                name = f"worker-{i}"
                self.workers[name] = self._spawn(
                    "distributed.cli.dask_worker",
                    [self.address, "--name", name, "--nthreads", "1", "--no-nanny", "--no-dashboard",
                     "--memory-limit", "0"],
                    f"{name}.log",
                )  # fmt: skip
            self.wait_for_workers(self.n_workers, deadline)
        except BaseException:
            self.close()
            raise
        return self

    def _check_alive(self, deadline: float) -> None:
        for name, proc in [("scheduler", self.scheduler), *self.workers.items()]:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"dask {name} exited with {proc.returncode}: {self.log(name)[-2000:]}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"the loopback Dask cluster did not start within {self.start_timeout} s")

    def wait_for_workers(self, n: int, deadline: float) -> None:
        from distributed import Client

        with Client(self.address, timeout=self.start_timeout) as client:
            while len(client.scheduler_info(n_workers=-1)["workers"]) < n:
                self._check_alive(deadline)
                time.sleep(0.1)

    def log(self, name: str) -> str:
        path = self.workdir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def kill_worker(self, name: str) -> None:
        """SIGKILL one worker process, as a machine lost mid-way (no goodbye to the scheduler)."""
        proc = self.workers[name]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def close(self) -> None:
        procs = [*self.workers.values(), *([self.scheduler] if self.scheduler else [])]
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def __exit__(self, *exc) -> None:
        self.close()
