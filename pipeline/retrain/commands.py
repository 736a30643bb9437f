"""Refreshing the data (:func:`refresh_data`): ``dvc pull`` and ``dvc repro`` through
:func:`run_command`, each a subprocess in its own process group with a timeout (the whole group is
killed: dvc starts children), whose stderr goes into the :class:`CommandError`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from pipeline.retrain.settings import RetrainConfig

DVC = [sys.executable, "-m", "dvc"]  # the dvc of this environment, whatever PATH holds


class CommandError(RuntimeError):
    """A command that could not start, failed or timed out; ``stderr``: what it wrote there."""

    def __init__(self, message: str, stderr: str = ""):
        super().__init__(message)
        self.stderr = stderr

    @property
    def summary(self) -> str:
        """One line: the command's failure and the last line it wrote to stderr."""
        last = next((line for line in reversed(self.stderr.splitlines()) if line.strip()), "")
        return str(self).splitlines()[0].removesuffix("; stderr:") + (f": {last.strip()}" if last else "")


def run_command(cmd: list[str], cwd: Path, timeout_s: float) -> str:
    """Run ``cmd`` in its own process group; its stdout, or CommandError with the exit status and
    the tail of its stderr. On timeout the whole group is killed (dvc starts children)."""
    shown = " ".join(cmd)
    try:
        proc = subprocess.Popen(
            cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
    except OSError as err:
        raise CommandError(f"`{shown}` could not start in {cwd}: {err}") from err
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise CommandError(f"`{shown}` timed out after {timeout_s:g}s in {cwd}; stderr:\n{err[-4000:]}", err) from None
    if proc.returncode != 0:
        raise CommandError(f"`{shown}` failed with exit status {proc.returncode} in {cwd}; stderr:\n{err[-4000:]}", err)
    return out


def refresh_data(root: Path, cfg: RetrainConfig) -> dict:
    """`dvc pull` (optional) and `dvc repro` of the task's data stages; what happened.

    A failed pull is fatal only with ``cfg.pull_required``; otherwise it is reported and skipped."""
    targets = [t.format(task=cfg.task) for t in cfg.repro_targets]
    report: dict = {"pull": "off", "repro": targets}
    if cfg.pull:
        try:
            run_command([*DVC, "pull", *(["--with-deps", *targets] if targets else [])], root, cfg.command_timeout_s)
            report["pull"] = "ok"
        except CommandError as err:
            if cfg.pull_required:
                raise
            report["pull"] = f"failed, continuing (pull_required: false): {err.summary}"
            print(f"retrain {cfg.task}: {report['pull']}", file=sys.stderr)
    if targets:
        run_command([*DVC, "repro", *targets], root, cfg.command_timeout_s)
    return report
