"""train@<task>-<mechanism>: train one mechanism on one task; learning curve to MLflow and DVC plots."""
from __future__ import annotations

import csv
import io
import json

import flows  # quiet, local settings before Prefect loads; cli
from prefect import flow, task

from models.config import ModelConfig
from models.param_count import output_layer_parameters
from pipeline.params import load_params, project_root, section
from pipeline.paths import TaskPaths
from pipeline.shards import read_manifest, read_split, write_json_atomic, write_text_atomic
from pipeline.tasks import effective_params
from pipeline.tracking import RunLogger, parent_run, provenance_tags, task_manifests, task_params
from pipeline.train import TrainConfig, build_seeded_model, train
from pipeline.vocab import Vocab


def curve_csv(history: list[dict]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(history[0]) if history else ["epoch"])
    writer.writeheader()
    writer.writerows(history)
    return buf.getvalue()


@task
def fit(paths: TaskPaths, mechanism: str, params: dict) -> dict:
    task_name = paths.task
    src_vocab = Vocab.load(paths.vocab / "src.vocab")
    tgt_vocab = Vocab.load(paths.vocab / "tgt.vocab")
    model_cfg = ModelConfig.from_dict(section(params, "model"), mechanism, src_vocab=len(src_vocab), tgt_vocab=len(tgt_vocab))
    train_cfg = TrainConfig.from_dict(section(params, "train"))
    manifests = {s: read_manifest(paths.split(s)) for s in ("train", "valid")}
    data_hash = "".join(m["content_sha256"] for m in manifests.values())
    ckpt_dir = paths.checkpoints(mechanism)
    model = build_seeded_model(mechanism, model_cfg, train_cfg.seed)
    n_params = sum(p.numel() for p in model.parameters())
    n_output = output_layer_parameters(model)  # WEAN Table 5's quantity, for every mechanism

    # Reopen the MLflow run only when resuming an interrupted run of the same configuration.
    run_file = ckpt_dir / "run.json"
    identity = {"model": vars(model_cfg), "train": vars(train_cfg), "data": data_hash}
    previous = None
    if run_file.exists():
        recorded = json.loads(run_file.read_text())
        unfinished = recorded.get("identity") == identity and not recorded.get("completed")
        previous = recorded.get("run_id") if unfinished else None
    tracking = section(params, "tracking")
    experiment = f"{tracking['experiment_prefix']}{task_name}"
    # One parent run per pipeline run of this task (same commit, task params and data); each
    # mechanism's run is its child, found again by the evaluate stage through run.json.
    parent = parent_run(experiment, task_name, task_params(params, task_name), task_manifests(paths.shards),
                        root=paths.root)
    with RunLogger(experiment, mechanism, previous,
                   tags={**provenance_tags(manifests, task_name, mechanism, paths.root), "task": task_name,
                         "mechanism": mechanism}, parent_run_id=parent) as run:
        write_json_atomic(run_file, {"run_id": run.run_id, "identity": identity})
        if previous != run.run_id:
            run.params({"model": vars(model_cfg), "train": vars(train_cfg), "n_parameters": n_params,
                        "output_layer_parameters": n_output})
        history = train(model, read_split(paths.split("train")), read_split(paths.split("valid")), src_vocab,
                        tgt_vocab, train_cfg, ckpt_dir, model_config=vars(model_cfg), data_hash=data_hash,
                        on_epoch=lambda row: run.metrics(row, step=row["epoch"]))
        write_text_atomic(paths.learning_curve(mechanism), curve_csv(history))
        write_json_atomic(run_file, {"run_id": run.run_id, "identity": identity, "completed": True})
    return history[-1] if history else {}


@flow(name="train")
def train_flow(task_name: str, mechanism: str, params_path: str | None = None) -> dict:
    params = effective_params(load_params(params_path), task_name)
    last = fit(TaskPaths(task_name, project_root(params_path)), mechanism, params)
    print(f"{task_name}/{mechanism}: " + ", ".join(f"{k} {v:.4g}" for k, v in last.items()))
    return last


if __name__ == "__main__":
    flows.cli(train_flow, __doc__, "task", "mechanism")
