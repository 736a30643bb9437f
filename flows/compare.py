"""compare: per task, a table shaped like the paper's (ours beside the published rows) + a bar chart."""
from __future__ import annotations

import json

import flows  # quiet, local settings before Prefect loads; cli
from prefect import flow, task

from models import DISPLAY_NAMES
from pipeline.compare import PAPER_TABLES, accuracy_rows, comparison_markdown
from pipeline.params import load_params, project_root, section
from pipeline.paths import TaskPaths
from pipeline.plots import grouped_bars
from pipeline.shards import write_text_atomic
from pipeline.tracking import RunLogger


@task
def compare_task(paths: TaskPaths, mechanisms: list[str], cfg: dict, tracking: dict) -> str:
    task_name = paths.task
    metrics = {}
    for mech in mechanisms:
        path = paths.evaluation(mech) / "metrics.json"
        if not path.exists():
            raise FileNotFoundError(f"{path}: no metrics for {task_name}/{mech}; run its evaluate stage first")
        metrics[mech] = json.loads(path.read_text())
    paper = PAPER_TABLES.get(cfg.get("paper_tables", {}).get(task_name, ""))
    columns = cfg.get("columns", paper["columns"] if paper else [])
    splits, topk = cfg.get("splits", ["test"]), cfg.get("topk", 10)
    text = comparison_markdown(task_name, metrics, splits, columns, DISPLAY_NAMES, topk, paper)
    md = paths.comparison / f"{task_name}.md"
    write_text_atomic(md, text)

    bars = {f"{DISPLAY_NAMES.get(m, m)} (test)": v for m, v in accuracy_rows(metrics, "test", columns, "top1").items()}
    if paper:
        bars.update({f"{DISPLAY_NAMES.get(m, m)} (paper)": dict(zip(paper["columns"], vals))
                     for m, vals in paper["rows"].items() if m in metrics})
    for split in splits[1:]:
        bars.update({f"{DISPLAY_NAMES.get(m, m)} ({split})": v
                     for m, v in accuracy_rows(metrics, split, columns, "top1").items()})
    png = paths.comparison / f"{task_name}.png"
    grouped_bars(bars, columns + ["all"], png, f"{task_name}: top-1 exact match (%)", "accuracy (%)")

    with RunLogger(f"{tracking['experiment_prefix']}{task_name}", "comparison",
                   tags={"task": task_name, "kind": "comparison"}) as run:
        run.artifact(md)
        run.artifact(png)
    return text


@flow(name="compare")
def compare_flow(params_path: str | None = None) -> dict:
    params = load_params(params_path)
    cfg, tracking = section(params, "compare"), section(params, "tracking")
    root = project_root(params_path)
    out = {t: compare_task(TaskPaths(t, root), list(params["mechanisms"]), cfg, tracking) for t in params["tasks"]}
    for text in out.values():
        print(text)
    return out


if __name__ == "__main__":
    flows.cli(compare_flow, __doc__)
