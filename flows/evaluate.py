"""evaluate@<task>-<mechanism>: beam search on the test splits, exact-match metrics, heat map.

Writes predictions (JSONL per split), metrics.json (read by DVC) and a CopyNet Figure 3-style
heat map, and logs the same metrics dict and files to the mechanism's MLflow run.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import flows  # quiet, local settings before Prefect loads; cli
from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from pipeline.evaluate import EvalConfig, copy_trace, decode_table, load_checkpoint, score_records, write_jsonl_atomic
from pipeline.params import load_params, project_root, section
from pipeline.paths import TaskPaths
from pipeline.plots import copy_heatmap
from pipeline.shards import read_split, write_json_atomic
from pipeline.tracking import RunLogger
from pipeline.train import resolve_device
from pipeline.vocab import Vocab


@task(cache_policy=NO_CACHE)
def evaluate_split(model, paths: TaskPaths, mechanism: str, split: str, vocabs: tuple[Vocab, Vocab],
                   cfg: EvalConfig, device) -> dict:
    start = time.perf_counter()
    records = decode_table(model, read_split(paths.split(split)), *vocabs, cfg, device, desc=f"{mechanism} {split}")
    seconds = time.perf_counter() - start
    print(f"{paths.task}/{mechanism}/{split}: decoded {len(records)} examples in {seconds:.1f}s "
          f"({len(records) / max(seconds, 1e-9):.1f} sentences/s, beam {cfg.beam_size})")
    write_jsonl_atomic(paths.evaluation(mechanism) / "predictions" / f"{split}.jsonl", records)
    return score_records(records, cfg)


@task(cache_policy=NO_CACHE)
def heatmap(model, paths: TaskPaths, mechanism: str, where: dict, vocabs: tuple[Vocab, Vocab],
            cfg: EvalConfig, device) -> Path:
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


@flow(name="evaluate")
def evaluate_flow(task_name: str, mechanism: str, params_path: str | None = None) -> dict:
    params = load_params(params_path)
    ev = section(params, "evaluate")
    cfg = EvalConfig.from_dict({k: v for k, v in ev.items() if k != "heatmap"})
    paths = TaskPaths(task_name, project_root(params_path))
    device = resolve_device(cfg.device)
    model, _ = load_checkpoint(paths.checkpoints(mechanism) / "model.pt", mechanism, device)
    vocabs = (Vocab.load(paths.vocab / "src.vocab"), Vocab.load(paths.vocab / "tgt.vocab"))
    metrics = {split: evaluate_split(model, paths, mechanism, split, vocabs, cfg, device) for split in cfg.splits}
    write_json_atomic(paths.evaluation(mechanism) / "metrics.json", metrics)
    plot = heatmap(model, paths, mechanism, ev.get("heatmap", {}), vocabs, cfg, device)

    run_file = paths.checkpoints(mechanism) / "run.json"
    run_id = json.loads(run_file.read_text())["run_id"] if run_file.exists() else None
    tracking = section(params, "tracking")
    with RunLogger(f"{tracking['experiment_prefix']}{task_name}", mechanism, run_id) as run:
        run.metrics(metrics)
        run.artifact(plot)
        run.artifact(paths.evaluation(mechanism) / "metrics.json")
        for split in cfg.splits:
            run.artifact(paths.evaluation(mechanism) / "predictions" / f"{split}.jsonl", "predictions")
    for split, m in metrics.items():
        print(f"{task_name}/{mechanism}/{split}: top1 {m['top1']:.1f} top{cfg.topk} {m[f'top{cfg.topk}']:.1f} (n={m['n']})")
    return metrics


if __name__ == "__main__":
    flows.cli(evaluate_flow, __doc__, "task", "mechanism")
