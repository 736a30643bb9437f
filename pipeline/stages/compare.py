"""compare: per task, tables shaped like the papers' (ours beside the published rows), a bar chart, a
CSV that `dvc plots show` draws, the registry's ``champion`` moved to the best version; all logged to
the task's MLflow experiment (``flows/compare.py`` runs :func:`run` as a Prefect flow)."""

from __future__ import annotations

import csv
import io
import json
import time
from collections.abc import Callable
from pathlib import Path

from models.registry import DISPLAY_NAMES, MECHANISMS
from pipeline.config.params import load_params, project_root
from pipeline.config.paths import TaskPaths
from pipeline.config.tasks import effective_params, selection_metric, task_names
from pipeline.config.variants import check_variants, display_names
from pipeline.data.corpora import resample_column
from pipeline.decoding.settings import EvalConfig
from pipeline.io.files import read_jsonl, write_json_atomic, write_text_atomic
from pipeline.io.shards import first_rows, read_split
from pipeline.reporting.baselines import baseline_names, lead_metrics, lead_name, lead_records
from pipeline.reporting.compare import (
    PAPER_TABLES,
    CompareConfig,
    comparison_markdown,
    plot_rows,
    ranking_line,
    table_cells,
)
from pipeline.reporting.plots import interval_dots
from pipeline.reporting.uncertainty import split_intervals
from pipeline.tracking.registry import model_name, promote_best, version_tags
from pipeline.tracking.runs import (
    describe_experiment,
    git_commit,
    log_to_run,
    parent_run,
    pipeline_params,
    task_manifests,
)
from pipeline.tracking.settings import TrackingConfig


def plot_csv(rows: dict[str, dict], columns: list[str], display: dict[str, str], cells: dict[str, dict]) -> str:
    """Long format (one row per mechanism and metric, with the 95% interval) for a `dvc plots` chart."""
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["label", "mechanism", "metric", "value", "low", "high"])
    for mech, values in rows.items():
        for col in columns:
            if values.get(col) is not None:
                cell = (cells.get(col) or {}).get(mech) or {}
                bounds = [f"{cell[k]:.4f}" if k in cell else "" for k in ("low", "high")]
                writer.writerow([f"{display.get(mech, mech)} {col}", mech, col, f"{values[col]:.4f}", *bounds])
    return buf.getvalue()


def choose_champion(paths: TaskPaths, params: dict, manifests: dict, metrics: dict) -> tuple[str | None, str]:
    """Move ``champion`` to the best registered version by the task's metric (on validation) among
    those scored on the current validation data (versions scored on other data are not comparable);
    a line for the page. A row trained with several seeds (``train.seeds``; ``metrics``: the rows'
    metrics.json) registered its best seed by that metric, and the line names it."""
    prefix = TrackingConfig.from_params(params).registry_prefix
    split, key, higher = selection_metric(params, paths.task)
    same_data = {f"data.{split}.content_sha256": manifests[split]["content_sha256"]} if split in manifests else None
    champ = promote_best(paths.task, f"{split}.{key}", higher, prefix, where=same_data)
    if champ is None:
        return None, ""
    # The page names the champion's mechanism, not its version number: every rerun registers new
    # versions, and the page (a DVC output) must be the same bytes for the same results.
    name = model_name(paths.task, prefix)
    tags = version_tags(name, champ)
    mechanism = tags.get("mechanism", "?")
    several = "seeds" in ((metrics.get(mechanism) or {}).get(split) or {})
    model = f"the {mechanism} model" + (f", seed {tags['seed']}" if several and "seed" in tags else "")
    return champ, f"\nMLflow registry: `models:/{name}@champion` is {model} (best {split} {key}).\n"


def write_plots(
    paths: TaskPaths, metrics: dict, cfg: CompareConfig, kinds: dict, display: dict[str, str], intervals: dict
) -> Path:
    """The chart (ours with intervals and the paper's rows on the first compared split) and the DVC plot CSV."""
    split = cfg.splits[0]
    kind = kinds.get(split, "exact_match")
    columns = list(cfg.columns) + (["all"] if kind == "exact_match" else [])
    rows = plot_rows(metrics, split, list(cfg.columns), kind)
    cells = table_cells(intervals.get(split), columns, "top1" if kind == "exact_match" else None)
    bars = {f"{display.get(m, m)} (ours)": v for m, v in rows.items()}
    whiskers = {f"{display.get(m, m)} (ours)": {c: cells[c][m] for c in cells if m in cells[c]} for m in rows}
    for table_id, table_split in cfg.paper_tables.items():
        paper = PAPER_TABLES[table_id]
        if table_split == split:
            bars.update(
                {
                    f"{display.get(m, m)} (paper)": dict(zip(paper["columns"], vals))
                    for m, vals in paper["rows"].items()
                    if m in metrics
                }
            )
    png = paths.comparison / f"{paths.task}.png"
    unit = "accuracy (%), top-1" if kind == "exact_match" else kind
    interval_dots(bars, whiskers, columns, png, f"{paths.task} ({split}): {unit}", unit)
    write_text_atomic(paths.comparison_plot(paths.task), plot_csv(rows, columns, display, cells))
    return png


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def comparison_metrics(metrics: dict[str, dict]) -> dict[str, float]:
    """``<mechanism>.<split>.<key>`` for every number a mechanism's metrics.json has per split
    (groups too: ``copynet.test.x->xx.top1``), and its copy analysis: the outputs' as
    ``<mechanism>.<split>.copy.<key>``, the references' once per split as
    ``references.<split>.copy.<key>`` (the same for every mechanism)."""
    flat = {}
    for mech, per_split in metrics.items():
        for split, values in per_split.items():
            if not isinstance(values, dict):
                continue
            for key, value in values.items():
                if _number(value) and key != "n":
                    flat[f"{mech}.{split}.{key}"] = value
            for group, group_values in (values.get("groups") or {}).items():
                for key, value in group_values.items():
                    if _number(value) and key != "n":
                        flat[f"{mech}.{split}.{group}.{key}"] = value
            copy = values.get("copy") or {}
            for side, prefix in (("outputs", f"{mech}.{split}"), ("references", f"references.{split}")):
                for key, value in (copy.get(side) or {}).items():
                    if _number(value):
                        flat[f"{prefix}.copy.{key}"] = value
    return flat


def split_records(paths: TaskPaths, mechanisms: list[str], split: str, cfg: CompareConfig, ev: EvalConfig) -> dict:
    """Row -> its prediction records of ``split``, one list per seed (the first seed's first), for the
    rows evaluated on it; the lead-N rows' records (one 'seed')."""
    rows = {}
    for mech in mechanisms:
        if paths.predictions(mech, split).is_file():
            seeds = [None, *paths.seed_predictions(mech)]
            rows[mech] = [read_jsonl(paths.predictions(mech, split, seed)) for seed in seeds]
    if paths.split(split).is_dir():
        for n in cfg.lead:
            rows[lead_name(n)] = [lead_records(first_rows(read_split(paths.split(split)), ev.max_examples), n)]
    return rows


def resample_groups(paths: TaskPaths, split: str, records: list[dict], column: str | None) -> list | None:
    """Each record's resampling group: ``column`` of the split's shard rows it was decoded from (None:
    examples are resampled). The records are the shard's first rows in order; a ValueError if not."""
    if column is None:
        return None
    table = first_rows(read_split(paths.split(split)), len(records))
    if column not in table.column_names:
        raise ValueError(f"{paths.split(split)}: no column {column!r} to resample by (compare.resample_by)")
    ids = table.column("id").to_pylist()
    if ids != [r["id"] for r in records]:
        raise ValueError(f"{paths.split(split)}: the predictions are not its first {len(records)} rows in order")
    return table.column(column).to_pylist()


def comparison_intervals(paths: TaskPaths, mechanisms: list[str], params: dict) -> dict:
    """Every compared split's intervals and paired tests (pipeline.reporting.uncertainty)."""
    cfg, ev = CompareConfig.from_params(params), EvalConfig.from_params(params)
    column = cfg.resample_by or resample_column((params.get("prepare") or {}).get(paths.task) or {})
    out = {}
    for split in cfg.splits:
        rows = split_records(paths, mechanisms, split, cfg, ev)
        if rows:
            groups = resample_groups(paths, split, next(iter(rows.values()))[0], column)
            out[split] = {"resample_by": column, **split_intervals(rows, ev, split, cfg.columns, groups)}
    return out


def interval_metrics(intervals: dict) -> dict[str, float]:
    """``<row>.<split>.<cell>.{low,high,sd,p_value}`` for MLflow, beside the figures themselves."""
    flat = {}
    for split, found in intervals.items():
        for cell, rows in found["cells"].items():
            for row, c in rows.items():
                for key in ("low", "high", "sd", "p_value"):
                    if c.get(key) is not None:
                        flat[f"{row}.{split}.{cell}.{key}"] = c[key]
    return flat


def compare_task(paths: TaskPaths, mechanisms: list[str], params: dict) -> str:
    """One task's comparison page, chart, CSV and champion; logged on the pipeline's parent run."""
    task_name = paths.task
    cfg, ev = CompareConfig.from_params(params), EvalConfig.from_params(params)
    metrics = {}
    for mech in mechanisms:
        path = paths.evaluation(mech) / "metrics.json"
        if not path.exists():
            raise FileNotFoundError(f"{path}: no metrics for {task_name}/{mech}; run its evaluate stage first")
        metrics[mech] = json.loads(path.read_text())
    for n in cfg.lead:  # model-free rows scored on the same shards (pipeline.reporting.baselines)
        present = {s: paths.split(s) for s in ev.splits if paths.split(s).is_dir()}
        metrics[lead_name(n)] = lead_metrics(present, n, ev)
    # variants (params.yaml variants) are rows of their own, labelled as such; the papers' rows stay
    # keyed by the base mechanisms, so a variant gets none
    display = {**DISPLAY_NAMES, **display_names(params, DISPLAY_NAMES), **baseline_names(metrics)}
    kinds = {split: ev.metric_for(split) for split in ev.splits}
    manifests = task_manifests(paths.shards)
    champ, champ_line = choose_champion(paths, params, manifests, metrics)
    intervals = comparison_intervals(paths, mechanisms, params)
    write_json_atomic(paths.intervals(task_name), intervals)
    text = comparison_markdown(task_name, metrics, cfg, display, kinds, intervals) + champ_line
    md = paths.comparison / f"{task_name}.md"
    write_text_atomic(md, text)
    # every row's metrics in one file (the mechanisms' metrics.json and the baselines'), for experiments
    # that collect runs (scripts/gigaword_curve.sh)
    write_json_atomic(paths.comparison / f"{task_name}.metrics.json", metrics)
    png = write_plots(paths, metrics, cfg, kinds, display, intervals)

    # The comparison goes on the pipeline's parent run itself, so the experiment's first screen (the
    # parent run with the mechanisms folded under it) compares them: one metric per mechanism and
    # split (e.g. copynet.test.top1), the table and the chart as artifacts.
    experiment = TrackingConfig.from_params(params).experiment(task_name)
    parent = parent_run(experiment, task_name, pipeline_params(params, task_name), manifests, root=paths.root)
    csv_path = paths.comparison_plot(task_name)
    log_to_run(
        parent,
        {**comparison_metrics(metrics), **interval_metrics(intervals)},
        [md, png, csv_path, paths.intervals(task_name)],
        finished_at_ms=int(time.time() * 1000),
        tags={"champion_version": str(champ)},
    )
    # The experiment's description is the first thing its page shows: the mechanisms ranked on one
    # line, the full tables when expanded. Each pipeline run replaces it with its own.
    _, key, higher = selection_metric(params, task_name)
    split = cfg.splits[0]  # the reported split, ranked by the metric the champion is chosen by (on valid)
    cells = ((intervals.get(split) or {}).get("cells") or {}).get(key)
    ranking = ranking_line(metrics, split, key, higher, display, digits=1, cells=cells)  # as the tables
    commit = git_commit(paths.root)[:7]
    describe_experiment(experiment, f"{ranking}\n\nPipeline run of commit {commit}.\n\n{text}")
    return text


def run(params_path: str | None = None, step: Callable = lambda fn: fn) -> dict[str, str]:
    """The stage over every task of params.yaml; ``step`` wraps each task's comparison (a Prefect task
    in the flow). The pages by task."""
    params = load_params(params_path)
    check_variants(params, MECHANISMS)
    root = project_root(params_path)
    out = {
        t: step(compare_task)(TaskPaths(t, root), list(params["mechanisms"]), effective_params(params, t))
        for t in task_names(params)
    }
    for text in out.values():
        print(text)
    return out
