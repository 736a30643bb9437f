"""train@<task>-<mechanism>: train one mechanism on one task; learning curve to MLflow and DVC plots.

With ``train.nproc`` > 1 or ``train.nnodes`` > 1 the training itself runs under torchrun
(pipeline.train_job on every process, DistributedDataParallel); this flow stays one process that
opens the MLflow run, launches the job and writes the stage's outputs.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess

from prefect import flow, task

import flows  # cli (the package itself set quiet, local tool defaults before Prefect loaded)
from pipeline.config.params import load_params, project_root, section
from pipeline.config.paths import TaskPaths
from pipeline.config.tasks import effective_params
from pipeline.distributed import torchrun_command
from pipeline.io.files import sha256_file, write_json_atomic, write_text_atomic
from pipeline.io.shards import read_manifest
from pipeline.tracking.runs import (
    RunLogger,
    parent_run,
    provenance_tags,
    task_manifests,
    task_params,
)
from pipeline.train import compute_settings, without_wall_clock
from pipeline.train_job import TrainJob, worker_args


def curve_csv(history: list[dict]) -> str:
    """The learning curve for DVC's plots, without the wall-clock figures (pipeline.train.WALL_CLOCK):
    the same training writes the same bytes (tokens/s goes to MLflow)."""
    history = without_wall_clock(history)
    buf = io.StringIO()
    columns = list(dict.fromkeys(key for row in history for key in row)) or ["step"]  # every row's keys, in order
    writer = csv.DictWriter(buf, fieldnames=columns)
    writer.writeheader()
    writer.writerows(history)
    return buf.getvalue()


@task
def fit(paths: TaskPaths, mechanism: str, params: dict, params_path: str | None = None) -> dict:
    task_name = paths.task
    job = TrainJob(paths, mechanism, params)
    model_cfg, train_cfg = job.model_cfg, job.train_cfg
    manifests = {s: read_manifest(paths.split(s)) for s in ("train", "valid")}
    ckpt_dir = paths.checkpoints(mechanism)
    _, sizes = job.build_model()

    # Reopen the MLflow run only when resuming an interrupted run of the same configuration. run.json
    # sits beside last.pt in the train state, outside the stage's DVC output (its run id differs
    # from run to run); the evaluate stage reads it to reopen the run and to check model.pt.
    run_file = paths.train_state(mechanism) / "run.json"
    identity = {"model": vars(model_cfg), "train": vars(train_cfg), "data": job.data_hash}
    previous = None
    if run_file.exists():
        recorded = json.loads(run_file.read_text())
        unfinished = recorded.get("identity") == identity and not recorded.get("completed")
        previous = recorded.get("run_id") if unfinished else None
    tracking = section(params, "tracking")
    experiment = f"{tracking['experiment_prefix']}{task_name}"
    # One parent run per pipeline run of this task (same commit, task params and data); each
    # mechanism's run is its child, found again by the evaluate stage through run.json.
    parent = parent_run(
        experiment, task_name, task_params(params, task_name), task_manifests(paths.shards), root=paths.root
    )
    with RunLogger(
        experiment,
        mechanism,
        previous,
        tags={
            **provenance_tags(manifests, task_name, mechanism, paths.root),
            "task": task_name,
            "mechanism": mechanism,
        },
        parent_run_id=parent,
    ) as run:
        write_json_atomic(run_file, {"run_id": run.run_id, "identity": identity})
        if previous != run.run_id:
            run.params({"model": vars(model_cfg), "train": vars(train_cfg), **sizes})
        compute = compute_settings(train_cfg.threads, train_cfg.deterministic)  # what fixes the results
        run.mlflow.set_tags({f"train.compute.{k}": str(v) for k, v in compute.items()})
        if job.distributed:
            cmd = torchrun_command(
                "pipeline.train_job",
                worker_args(job, params_path, run.run_id),
                train_cfg.nproc,
                train_cfg.nnodes,
                train_cfg.rdzv_endpoint,
                rdzv_id=f"{task_name}-{mechanism}",
            )
            subprocess.run(cmd, check=True, cwd=paths.root)
            history = json.loads((ckpt_dir / "history.json").read_text())
        else:
            history = job.run(
                run_key=run.run_id,
                on_validate=lambda row: run.metrics(row, step=row["step"]),
                on_step=lambda row: run.metrics({"step_loss": row["loss"], "step_lr": row["lr"]}, step=row["step"]),
            )
        write_text_atomic(paths.learning_curve(mechanism), curve_csv(history))
        model_sha256 = sha256_file(ckpt_dir / "model.pt")  # the model this run wrote (evaluate checks it)
        write_json_atomic(
            run_file, {"run_id": run.run_id, "identity": identity, "completed": True, "model_sha256": model_sha256}
        )
    return history[-1] if history else {}


@flow(name="train")
def train_flow(task_name: str, mechanism: str, params_path: str | None = None) -> dict:
    params = effective_params(load_params(params_path), task_name, mechanism)
    last = fit(TaskPaths(task_name, project_root(params_path)), mechanism, params, params_path)
    print(f"{task_name}/{mechanism}: " + ", ".join(f"{k} {v:.4g}" for k, v in last.items()))
    return last


if __name__ == "__main__":
    flows.cli(train_flow, __doc__, "task", "mechanism")
