"""This machine's part of a training on several machines whose train stage runs on another one.

With ``train.nnodes`` > 1 one machine runs the train stage (``dvc repro train@<task>-<mechanism>``):
it opens the MLflow run, launches its torchrun agent and writes the stage's outputs and dvc.lock.
Every other machine runs::

    python -m pipeline.stages.train_node --task T --mechanism M [--params params.yaml]

which launches this machine's ``train.nproc`` processes into the same rendezvous
(``train.rdzv_endpoint``, the job id ``<task>-<mechanism>``) and writes nothing: no checkpoint, no
learning curve, no MLflow run, no DVC record. It needs the same commit, the same params.yaml and
the vocab stage's output ``data/vocab/<task>`` (``dvc pull``); the job checks that every machine
has the same settings and data before the first step. A resumed run needs nothing here either: the
machine that runs the stage sends its step checkpoint to all.
"""

from __future__ import annotations

import argparse
import sys

from pipeline.config.params import load_params, project_root
from pipeline.config.paths import TaskPaths
from pipeline.config.rows import stage_params
from pipeline.config.validation import InputError, SettingsError
from pipeline.stages.train import check_before_work, launch, worker_args
from pipeline.training.job import TrainJob


def join(task: str, mechanism: str, params_path: str | None = None) -> None:
    """Run this machine's processes of the job until it ends (raises ``TrainingJobFailed`` if it fails)."""
    params = stage_params(load_params(params_path), task, mechanism)
    train = check_before_work(params, hosts_rendezvous=False)  # the stage's machine hosts the rendezvous
    if train.nnodes < 2:
        raise SettingsError(
            f"train.nnodes is {train.nnodes} for {task}/{mechanism}: there is no other machine's job to "
            "join; run the stage itself (dvc repro) instead"
        )
    job = TrainJob(TaskPaths(task, project_root(params_path)), mechanism, params)
    launch(job, worker_args(job, params_path, None), owner=False)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", required=True)
    parser.add_argument("--mechanism", required=True)
    parser.add_argument("--params", default=None, help="params file (default: the repository's params.yaml)")
    args = parser.parse_args(argv)
    try:
        join(args.task, args.mechanism, args.params)
    except (InputError, FileNotFoundError) as err:  # as flows.cli: the message alone, last, exit 2
        print(f"error: {err}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
