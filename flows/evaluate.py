"""evaluate@<task>-<mechanism>: beam search on the test splits, exact-match metrics, heat map.

Writes predictions (JSONL per split), metrics.json (read by DVC) and a CopyNet Figure 3-style
heat map, and logs the same metrics dict and files to the mechanism's MLflow run.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

import flows  # cli (the package itself set quiet, local tool defaults before Prefect loaded)
from pipeline.checkpoints import CheckpointError, load_model
from pipeline.config.params import load_params, project_root, section
from pipeline.config.paths import TaskPaths
from pipeline.config.tasks import effective_params
from pipeline.data.corpora.raw_input import detokenize
from pipeline.evaluate import EvalConfig, copy_trace, decode_table, score_records
from pipeline.io.files import write_json_atomic, write_jsonl_atomic
from pipeline.io.shards import first_rows, read_split
from pipeline.plots import copy_heatmap
from pipeline.tracking.registry import metric_tags, register
from pipeline.tracking.runs import RunLogger, git_commit, task_manifests
from pipeline.tracking.serving import ServingConfig, log_pyfunc_model
from pipeline.train import compute_settings, nondeterministic_ops_named, resolve_device
from pipeline.vocab.vocabulary import Vocab


@task(cache_policy=NO_CACHE)
def evaluate_split(
    model, paths: TaskPaths, mechanism: str, split: str, vocabs: tuple[Vocab, Vocab], cfg: EvalConfig, device
) -> dict:
    start = time.perf_counter()
    table = first_rows(read_split(paths.split(split)), cfg.max_examples)
    records = decode_table(model, table, *vocabs, cfg, device, desc=f"{mechanism} {split}")
    seconds = time.perf_counter() - start
    print(
        f"{paths.task}/{mechanism}/{split}: decoded {len(records)} examples in {seconds:.1f}s "
        f"({len(records) / max(seconds, 1e-9):.1f} sentences/s, beam {cfg.beam_size})"
    )
    write_jsonl_atomic(paths.evaluation(mechanism) / "predictions" / f"{split}.jsonl", records)
    return score_records(records, cfg, split)


@task(cache_policy=NO_CACHE)
def heatmap(
    model, paths: TaskPaths, mechanism: str, where: dict, vocabs: tuple[Vocab, Vocab], cfg: EvalConfig, device
) -> Path:
    """CopyNet Figure 3 for the first row of ``where['split']`` whose columns match ``where['match']``."""
    split = where.get("split", cfg.splits[0])
    table = read_split(paths.split(split))
    rows = table.select(list(where.get("match", {}))).to_pydict()
    matches = [i for i in range(table.num_rows) if all(rows[c][i] == v for c, v in where.get("match", {}).items())]
    row = matches[0] if matches else 0
    trace = copy_trace(model, table, row, *vocabs, cfg.max_len, device)
    out = paths.evaluation(mechanism) / "heatmap.png"
    copy_heatmap(trace, out, f"{mechanism} on {paths.task}/{split} (row {row}): {trace['kind']}")
    return out


def training_run(paths: TaskPaths, mechanism: str) -> tuple[str | None, str | None]:
    """``(run id, model sha256)`` of the training that wrote the checkpoint (the train state's
    run.json): evaluation reopens that MLflow run, registers the model under it, and refuses a
    model.pt that is not the file that run wrote. ``(None, None)`` without run.json (a model pulled
    from a DVC remote, trained elsewhere): evaluation then opens a run of its own."""
    run_file = paths.train_state(mechanism) / "run.json"
    if not run_file.exists():
        return None, None
    recorded = json.loads(run_file.read_text())
    if not recorded.get("completed"):
        raise CheckpointError(
            f"{run_file}: the training run {recorded.get('run_id')} did not complete; "
            "rerun the train stage before evaluating"
        )
    return recorded["run_id"], recorded.get("model_sha256")


def register_model(run, paths: TaskPaths, mechanism: str, params: dict, ev: dict, metrics: dict, split: str) -> str:
    """Log the model as an MLflow pyfunc (raw text in, output text out) and register it as a new
    version of the task's model, tagged with its metrics and data hashes (compare picks the champion)."""
    task_name = paths.task
    prepare = params["prepare"][task_name]
    subword = paths.shards / "subword.model" if prepare.get("subword") else None
    serving = ServingConfig.from_params(task_name, mechanism, prepare, ev, params.get("serving"))
    example = None  # entity-anonymised input cannot be typed as raw text (raw_input refuses it)
    if prepare.get("reader") != "gigaword_pointers" or prepare.get("mode") != "entity":
        first_src = read_split(paths.split(split)).column("src")[0].as_py()
        example = [detokenize(first_src, prepare, subword)]
    uri = log_pyfunc_model(
        run.run_id, paths.checkpoints(mechanism), paths.vocab, serving, input_example=example, subword_model=subword
    )
    data = {f"data.{s}.content_sha256": m["content_sha256"] for s, m in task_manifests(paths.shards).items()}
    tracking = section(params, "tracking")
    return register(
        uri,
        task_name,
        {
            "mechanism": mechanism,
            "run_id": run.run_id,
            "git_commit": git_commit(paths.root),
            **data,
            **metric_tags(metrics),
        },
        prefix=tracking.get("registry_prefix", ""),
    )


@flow(name="evaluate")
def evaluate_flow(task_name: str, mechanism: str, params_path: str | None = None) -> dict:
    params = effective_params(load_params(params_path), task_name, mechanism)
    ev = section(params, "evaluate")
    cfg = EvalConfig.from_dict({k: v for k, v in ev.items() if k != "heatmap"})
    paths = TaskPaths(task_name, project_root(params_path))
    device = resolve_device(cfg.device)
    compute = compute_settings(cfg.threads, cfg.deterministic)  # recorded on the run below
    vocabs = (Vocab.load(paths.vocab / "src.vocab"), Vocab.load(paths.vocab / "tgt.vocab"))
    run_id, model_sha256 = training_run(paths, mechanism)
    model, _ = load_model(paths.checkpoints(mechanism) / "model.pt", mechanism, device, vocabs, sha256=model_sha256)
    splits = [s for s in cfg.splits if s not in cfg.optional_splits or paths.split(s).is_dir()]
    skipped = {s: {"skipped": f"no shards at {paths.split(s)} (optional split)"} for s in cfg.splits if s not in splits}
    with nondeterministic_ops_named(device, "evaluate.deterministic"):
        metrics = {split: evaluate_split(model, paths, mechanism, split, vocabs, cfg, device) for split in splits}
    write_json_atomic(paths.evaluation(mechanism) / "metrics.json", {**metrics, **skipped})
    plot = heatmap(model, paths, mechanism, ev.get("heatmap", {}), vocabs, cfg, device)

    tracking = section(params, "tracking")
    with RunLogger(f"{tracking['experiment_prefix']}{task_name}", mechanism, run_id) as run:
        run.metrics(metrics)
        run.mlflow.set_tags({f"evaluate.compute.{k}": str(v) for k, v in compute.items()})
        run.artifact(plot)
        run.artifact(paths.evaluation(mechanism) / "metrics.json")
        for split in splits:
            run.artifact(paths.evaluation(mechanism) / "predictions" / f"{split}.jsonl", "predictions")
        version = register_model(run, paths, mechanism, params, ev, metrics, splits[0])
        run.mlflow.set_tag("registered_version", version)
    for split, m in metrics.items():
        shown = ", ".join(f"{k} {v:.2f}" for k, v in m.items() if isinstance(v, float))
        print(f"{task_name}/{mechanism}/{split}: {shown} (n={m['n']})")
    for split, m in skipped.items():
        print(f"{task_name}/{mechanism}/{split}: {m['skipped']}")
    return metrics


if __name__ == "__main__":
    flows.cli(evaluate_flow, __doc__, "task", "mechanism")
