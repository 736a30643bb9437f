"""train@<task>-<mechanism>: train one mechanism on one task; the learning curve to MLflow and to DVC's
plots (``flows/train.py`` runs :func:`run` as a Prefect flow).

With ``train.nproc`` > 1 or ``train.nnodes`` > 1 the training itself runs under torchrun: every
process runs this module (``python -m pipeline.stages.train --task ... --mechanism ...``,
:func:`worker_main`; :func:`pipeline.training.distributed.torchrun_command` builds the line), rank 0
writes the checkpoint directory and logs the learning curve to the stage's MLflow run. The stage
itself stays one process that opens the MLflow run, launches the job and writes the outputs.
"""

from __future__ import annotations

import argparse
import csv
import faulthandler
import io
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from pipeline.config.params import load_params, project_root
from pipeline.config.paths import TaskPaths
from pipeline.config.rows import stage_params
from pipeline.decoding.validation import job_scorer
from pipeline.io.files import sha256_file, write_text_atomic
from pipeline.io.shards import read_manifest
from pipeline.runtime.device import check_device, compute_settings, resolve_device
from pipeline.tracking.handoff import RunRecord
from pipeline.tracking.runs import (
    RunLogger,
    parent_run,
    pipeline_params,
    provenance_tags,
    run_metric_logger,
    task_manifests,
)
from pipeline.tracking.settings import TrackingConfig
from pipeline.training.distributed import (
    OWNER_ENV,
    check_rdzv_endpoint,
    init_from_env,
    lost_contact,
    shutdown,
    torchrun_command,
)
from pipeline.training.job import TrainJob
from pipeline.training.loop import without_wall_clock
from pipeline.training.settings import TrainConfig

WORKER = "pipeline.stages.train"  # the module every torchrun process runs (worker_main)


def curve_csv(history: list[dict]) -> str:
    """The learning curve for DVC's plots, without the wall-clock figures (pipeline.training.loop.WALL_CLOCK):
    the same training writes the same bytes (tokens/s goes to MLflow)."""
    history = without_wall_clock(history)
    buf = io.StringIO()
    columns = list(dict.fromkeys(key for row in history for key in row)) or ["step"]  # every row's keys, in order
    writer = csv.DictWriter(buf, fieldnames=columns)
    writer.writeheader()
    writer.writerows(history)
    return buf.getvalue()


def fit(
    paths: TaskPaths, mechanism: str, params: dict, params_path: str | None = None, key_params: dict | None = None
) -> dict:
    """Train ``mechanism`` on ``paths.task`` under its MLflow run (a child of the pipeline run); the last
    learning-curve row. ``key_params``: the task's pipeline params (:func:`pipeline_params` of the raw
    params), which name the parent run; default: from ``params``, which holds ``mechanism``'s own
    overrides (task_settings.<task>.mechanisms, a variant's sections) and so would name a parent of
    its own when it has any."""
    task_name = paths.task
    job = TrainJob(paths, mechanism, params)
    model_cfg, train_cfg = job.model_cfg, job.train_cfg
    manifests = {s: read_manifest(paths.split(s)) for s in ("train", "valid")}
    ckpt_dir = paths.checkpoints(mechanism)
    _, sizes = job.build_model()

    # Reopen the MLflow run only when resuming an interrupted run of the same configuration
    # (pipeline.tracking.handoff: run.json, which the evaluate stage reads to reopen the run and check model.pt).
    record = RunRecord.of(paths.train_state(mechanism))
    identity = {"model": vars(model_cfg), "train": vars(train_cfg), "data": job.data_hash}
    previous = record.resumable(identity)
    experiment = TrackingConfig.from_params(params).experiment(task_name)
    # One parent run per pipeline run of this task (same commit, task params and data); each
    # mechanism's run is its child, found again by the evaluate stage through run.json.
    key = key_params if key_params is not None else pipeline_params(params, task_name)
    parent = parent_run(experiment, task_name, key, task_manifests(paths.shards), root=paths.root)
    with RunLogger(
        experiment,
        mechanism,
        previous,
        tags={
            **provenance_tags(manifests, task_name, mechanism, paths.root),
            "task": task_name,
            "mechanism": mechanism,  # the row: a mechanism or a variant (params.yaml variants)
            "base_mechanism": job.base,  # what was built (the mechanism itself unless a variant)
        },
        parent_run_id=parent,
    ) as run:
        record.started(run.run_id, identity)
        run.datasets(task_name, {s: paths.split(s) for s in manifests}, stage="train")  # the data version it saw
        if previous != run.run_id:
            run.params({"model": vars(model_cfg), "train": vars(train_cfg), **sizes})
        compute = compute_settings(train_cfg.threads, train_cfg.deterministic)  # what fixes the results
        run.tags({f"train.compute.{k}": str(v) for k, v in compute.items()})
        if job.distributed:
            # This machine owns the outputs: its local rank 0 writes them, wherever torchrun numbers it.
            launch(job, worker_args(job, params_path, run.run_id), owner=True)
            history = json.loads((ckpt_dir / "history.json").read_text())
        else:
            history = job.run(
                run_key=run.run_id,
                on_validate=lambda row: run.metrics(row, step=row["step"]),
                on_step=lambda row: run.metrics({"step_loss": row["loss"], "step_lr": row["lr"]}, step=row["step"]),
                score_valid=job_scorer(job),
            )
        write_text_atomic(paths.learning_curve(mechanism), curve_csv(history))
        model_sha256 = sha256_file(ckpt_dir / "model.pt")  # the model this run wrote (evaluate checks it)
        record.completed(run.run_id, identity, model_sha256)
        row_run = run.run_id
    for seed in job.seeds[1:]:
        fit_seed(job, seed, experiment, identity, row_run)
    remove_other_seeds(job)
    return history[-1] if history else {}


def remove_other_seeds(job: TrainJob) -> None:
    """The checkpoint folder is persistent (a resumable output): a seed of an earlier run with more
    train.seeds than this one's must not be evaluated as one of this run's."""
    folder = job.paths.checkpoints(job.mechanism) / "seeds"
    keep = {str(seed) for seed in job.seeds[1:]}
    for stale in folder.iterdir() if folder.is_dir() else []:
        if stale.name in keep:
            continue
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale)
        else:  # anything else placed there (a stray file, a link): not a seed of this run either
            stale.unlink()
    if folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()


def fit_seed(job: TrainJob, seed: int, experiment: str, identity: dict, row_run: str) -> None:
    """One more training of the row with ``seed`` (train.seeds > 1) into :meth:`TrainJob.checkpoints`
    of it, under an MLflow run of its own nested in the row's run."""
    if job.distributed:
        raise ValueError("train.seeds > 1 with torchrun (train.nproc or nnodes > 1) is not supported: run one seed")
    record = RunRecord.of(job.state(seed))
    identity = {**identity, "seed": seed}
    with RunLogger(
        experiment,
        f"{job.mechanism} seed {seed}",
        record.resumable(identity),
        tags={"task": job.paths.task, "mechanism": job.mechanism, "seed": str(seed)},
        parent_run_id=row_run,
    ) as run:
        record.started(run.run_id, identity)
        run.params({"train.seed": seed})
        job.run(
            run_key=run.run_id,
            on_validate=lambda row: run.metrics(row, step=row["step"]),
            score_valid=job_scorer(job),
            seed=seed,
        )
        record.completed(run.run_id, identity, sha256_file(job.checkpoints(seed) / "model.pt"))


def run(task_name: str, mechanism: str, params_path: str | None = None, step: Callable = lambda fn: fn) -> dict:
    """The stage: the task's effective params for ``mechanism``, then :func:`fit` (as ``step(fit)``:
    the flow makes it a Prefect task); the last learning-curve row."""
    raw = load_params(params_path)
    params = stage_params(raw, task_name, mechanism)  # the row's slice: data/settings/<task>/<row>.json
    check_before_work(params, hosts_rendezvous=True)
    # every mechanism's run under the one parent of the task's pipeline run (the compare stage's):
    # keyed by the task's params, not by this mechanism's overrides
    key = pipeline_params(raw, task_name)
    last = step(fit)(TaskPaths(task_name, project_root(params_path)), mechanism, params, params_path, key)
    print(f"{task_name}/{mechanism}: " + ", ".join(f"{k} {v:.4g}" for k, v in last.items()))
    return last


def check_before_work(params: dict, hosts_rendezvous: bool) -> TrainConfig:
    """What torch and torchrun would refuse only late (deep inside, after a wait, or blaming a good
    checkpoint), refused as one line before any data is read: ``train.device`` on this machine and,
    with several machines, ``train.rdzv_endpoint`` (this machine's own address when it
    ``hosts_rendezvous``: the one that runs the stage). The train settings."""
    cfg = TrainConfig.from_dict(params.get("train") or {})
    check_device(cfg.device, "train.device", cfg.nproc)
    check_rdzv_endpoint(cfg.rdzv_endpoint, cfg.nnodes, host=hosts_rendezvous)
    return cfg


# --------------------------------------------------------------------------- #
# A torchrun job: its launch on one machine, and one of its processes
# --------------------------------------------------------------------------- #


class TrainingJobFailed(RuntimeError):
    """A process of a torchrun job failed (on this machine or another); the job stopped on every machine."""


def launch(job: TrainJob, args: list[str], owner: bool) -> None:
    """This machine's part of ``job`` under torchrun: ``train.nproc`` processes joining the job's
    rendezvous (one machine: a standalone one). ``owner``: this machine holds the stage's outputs
    (the train stage); a machine that only joins (:mod:`pipeline.stages.train_node`) writes nothing.
    A failed job raises :class:`TrainingJobFailed`, saying what to do."""
    cfg = job.train_cfg
    cmd = torchrun_command(
        WORKER,
        args,
        cfg.nproc,
        cfg.nnodes,
        cfg.rdzv_endpoint,
        rdzv_id=f"{job.paths.task}-{job.mechanism}",
        rdzv_timeout=cfg.rdzv_timeout,
        rdzv_host=owner,  # the machine that runs the stage hosts the rendezvous: rdzv_endpoint is its address
    )
    env = {**os.environ, OWNER_ENV: "1" if owner else "0"}
    started = time.monotonic()
    done = subprocess.run(cmd, cwd=job.paths.root, env=env)
    if done.returncode == 0:
        return
    stage = f"train@{job.paths.task}-{job.mechanism}"
    last = job.paths.train_state(job.mechanism) / "last.pt"
    where = (
        f"its step checkpoint {last} is kept, so running it again resumes"
        if owner and last.exists()
        else "the machine that runs the stage keeps its step checkpoint (last.pt), so running it again resumes"
    )
    several = (
        f" With {cfg.nnodes} machines this is also what a machine that stopped or lost contact looks like "
        "(its own log names the cause); start the job again on every machine: `dvc repro "
        f"{stage}` where the outputs live, `python -m pipeline.stages.train_node --task {job.paths.task} "
        f"--mechanism {job.mechanism}` on the others."
        if cfg.nnodes > 1
        else ""
    )
    raise TrainingJobFailed(
        f"{stage}: the torchrun job failed on this machine after {time.monotonic() - started:.0f} s "
        f"(exit code {done.returncode}; the processes' errors are above); {where}.{several}"
    )


def worker_args(job: TrainJob, params_path: str | None, mlflow_run_id: str | None) -> list[str]:
    """The command-line arguments of :func:`worker_main` that rerun ``job`` in another process."""
    args = ["--task", job.paths.task, "--mechanism", job.mechanism]
    if params_path:
        args += ["--params", str(Path(params_path).resolve())]
    if mlflow_run_id:
        args += ["--mlflow-run-id", mlflow_run_id, "--run-key", mlflow_run_id]
    return args


def worker_main(argv: list[str] | None = None) -> None:
    """``python -m pipeline.stages.train --task T --mechanism M [--params F] [--mlflow-run-id ID]``:
    one process of a torchrun job (rank 0 logs the learning curve to the run ``ID``)."""
    # A native crash (SIGSEGV, or SIGABRT from a collective library's threads) prints every thread's
    # Python stack before the process dies, so a failed node's log says where it was.
    faulthandler.enable()
    parser = argparse.ArgumentParser(description="Train one mechanism on one task (one process of a torchrun job).")
    parser.add_argument("--task", required=True)
    parser.add_argument("--mechanism", required=True)
    parser.add_argument("--params", default=None, help="params file (default: the repository's params.yaml)")
    parser.add_argument("--mlflow-run-id", default=None, help="rank 0 logs the learning curve to this run")
    parser.add_argument(
        "--run-key", default="", help="the training run's identity (a last.pt of another is not resumed)"
    )
    args = parser.parse_args(argv)
    params = stage_params(load_params(args.params), args.task, args.mechanism)
    job = TrainJob(TaskPaths(args.task, project_root(args.params)), args.mechanism, params)
    ctx = init_from_env(resolve_device(job.train_cfg.device).type, job.train_cfg.rdzv_timeout)
    if ctx.enabled and ctx.is_main:
        print(
            f"rank {ctx.rank} of {ctx.world} (node {os.environ.get('GROUP_RANK', '?')}) writes the outputs",
            file=sys.stderr,
        )
    on_validate = on_step = None
    if ctx.is_main and args.mlflow_run_id:
        log = run_metric_logger(args.mlflow_run_id)
        on_validate = lambda row: log(row, row["step"])  # noqa: E731
        on_step = lambda row: log({"step_loss": row["loss"], "step_lr": row["lr"]}, row["step"])  # noqa: E731
    completed = False
    try:
        # the validation metric on the machine that owns the outputs (its shards), sent to every rank
        job.run(ctx, on_validate, on_step, run_key=args.run_key, score_valid=job_scorer(job) if ctx.is_main else None)
        completed = True
    except RuntimeError as err:
        if lost_contact(err):  # say what happened before the traceback
            print(
                f"rank {ctx.rank} (node {os.environ.get('GROUP_RANK', '?')}) lost contact with the job: another "
                "process or machine of it stopped, or the network between them failed; this process stops too",
                file=sys.stderr,
            )
        raise
    finally:
        shutdown(ctx, completed)


if __name__ == "__main__":
    worker_main()
