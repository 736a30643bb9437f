"""Tables of experiments that collect several pipeline runs: seeds (mean and spread) and training
sizes (a learning curve with a log-linear fit). The inputs are the metrics files the evaluate stage
writes (``metrics.json``, one per mechanism and run), so these tables are generated like the
comparison pages (``scripts/render_results.py``), never typed.

Layouts read by :func:`load_runs` (``docs/experiments/<name>/``)::

    <run>/<mechanism>.json      run = seed<K> (seeds) or the number of training pairs (sizes)
    <run>/<mechanism>.csv       optional: the run's learning curve (data/plots/learning_curves/...)
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

from pipeline.reporting.baselines import baseline_names
from pipeline.reporting.compare import accuracy_rows, metric_rows
from pipeline.reporting.paper_results import PAPER_TABLES


def load_runs(folder: Path) -> dict[str, dict[str, dict]]:
    """``{run: {mechanism: metrics}}`` of an experiment folder, runs and mechanisms sorted by name."""
    runs = {}
    for run in sorted(p for p in folder.iterdir() if p.is_dir()):
        found = {p.stem: read_metrics(p) for p in sorted(run.glob("*.json"))}
        if found:
            runs[run.name] = found
    if not runs:
        raise FileNotFoundError(f"{folder}: no <run>/<mechanism>.json metrics files")
    return runs


def read_metrics(path: Path) -> dict:
    """One run's metrics file; a ValueError naming it when it is not a JSON object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: cannot be read as JSON ({err})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object {{split: metrics}}, got {type(data).__name__}")
    return data


def mean_sd(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (n - 1; 0.0 for one value)."""
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return mean, sd


def seed_rows(runs: dict[str, dict[str, dict]], split: str, columns: list[str], key: str = "top1") -> dict:
    """``{mechanism: {column: [value per seed]}}`` of exact-match runs (columns = rule types + all)."""
    out: dict[str, dict[str, list[float]]] = {}
    for per_mech in runs.values():
        for mech, values in accuracy_rows(per_mech, split, columns, key).items():
            for col, v in values.items():
                out.setdefault(mech, {}).setdefault(col, []).append(v)
    return out


def seed_markdown(rows: dict, columns: list[str], display: dict[str, str], paper: dict | None = None) -> str:
    """Mean ± sample sd over seeds (n seeds in the model cell), then the paper's rows."""
    lines = ["| model | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
    for mech, per_col in rows.items():
        n = len(next(iter(per_col.values())))
        cells = []
        for c in columns:
            mean, sd = mean_sd(per_col[c]) if c in per_col else (None, None)
            cells.append("-" if mean is None else f"{mean:.1f} ± {sd:.1f}" if n > 1 else f"{mean:.1f}")
        seeds = f"{n} seed{'s' if n > 1 else ''}"
        lines.append(f"| {display.get(mech, mech)} (ours, {seeds}) | " + " | ".join(cells) + " |")
    if paper:
        for mech, values in paper["rows"].items():
            if mech in rows:
                named = dict(zip(paper["columns"], values))
                cells = [f"{named[c]:.1f}" if c in named else "-" for c in columns]
                lines.append(f"| {display.get(mech, mech)} (paper) | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def log_linear_fit(sizes: list[float], values: list[float]) -> tuple[float, float]:
    """Least-squares ``value = a + b * ln(size)``; returns (a, b). Needs two distinct sizes."""
    if len(sizes) != len(values) or len(set(sizes)) < 2:
        raise ValueError(f"log_linear_fit: need values at two or more distinct sizes, got {sizes}")
    xs = [math.log(s) for s in sizes]
    mx, my = sum(xs) / len(xs), sum(values) / len(values)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, values)) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


def curve_rows(runs: dict[str, dict[str, dict]], split: str, columns: list[str]) -> dict:
    """``{mechanism: {column: {size: value}}}`` of text-metric runs named by their training size."""
    out: dict[str, dict[str, dict[int, float]]] = {}
    for size, per_mech in runs.items():
        for mech, values in metric_rows(per_mech, split, columns).items():
            for col, v in values.items():
                if v is not None:
                    out.setdefault(mech, {}).setdefault(col, {})[int(size)] = v
    return out


def curve_markdown(
    rows: dict, columns: list[str], display: dict[str, str], target: int, paper: dict | None = None, paper_rows=None
) -> str:
    """One row per mechanism and metric: the metric at each measured size, the fitted slope per
    doubling of the data, the fit's value at ``target`` pairs (an extrapolation, marked as such)
    and, with ``paper`` and ``paper_rows`` ({mechanism: the paper's row it is set beside}), the
    paper's figure."""
    sizes = sorted({s for per_col in rows.values() for by_size in per_col.values() for s in by_size})
    head = ["model", "metric", *[f"{s:,} pairs" for s in sizes], "per doubling", f"fit at {target:,} (extrapolated)"]
    paper_rows = paper_rows or {}
    if paper:
        head.append("paper")
    lines = ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * (len(head) - 2)]
    for mech, per_col in rows.items():
        for col in columns:
            by_size = per_col.get(col, {})
            cells = [f"{by_size[s]:.2f}" if s in by_size else "-" for s in sizes]
            if len(by_size) >= 2:
                a, b = log_linear_fit(list(by_size), list(by_size.values()))
                cells += [f"{b * math.log(2):+.2f}", f"{a + b * math.log(target):.2f}"]
            else:
                cells += ["-", "-"]
            if paper:
                named = dict(zip(paper["columns"], paper["rows"][paper_rows[mech]])) if mech in paper_rows else {}
                label = paper.get("labels", {}).get(paper_rows.get(mech), paper_rows.get(mech))
                cells.append(f"{named[col]:.2f} ({label})" if col in named else "-")
            lines.append(f"| {display.get(mech, mech)} | {col} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def validation_curves(folder: Path, mechanism: str) -> str:
    """Validation loss and learning rate at each validation of every run's ``<mechanism>.csv``
    (the train stage's learning curve), one column pair per run; '' when no run has one."""
    curves = {}
    for run in sorted(p for p in folder.iterdir() if (p / f"{mechanism}.csv").exists()):
        with open(run / f"{mechanism}.csv", encoding="utf-8") as f:
            curves[run.name] = {int(r["epoch"]): r for r in csv.DictReader(f) if r["valid_loss"]}
    if not curves:
        return ""
    epochs = sorted({e for c in curves.values() for e in c})
    head = ["epoch", *[f"{run} valid loss | {run} lr" for run in curves]]
    lines = ["| " + " | ".join(head) + " |", "|---:|" + "---:|---:|" * len(curves)]
    for e in epochs:
        cells = []
        for c in curves.values():
            r = c.get(e)
            cells += [f"{float(r['valid_loss']):.4f}", f"{float(r['lr']):.2g}"] if r else ["-", "-"]
        lines.append(f"| {e} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def render_experiment(folder: Path, display: dict[str, str]) -> str:
    """The table of one experiment folder, as its ``experiment.yaml`` describes it::

    kind: seeds | sizes         # mean ± sd over <run> = seed folders | a learning curve over sizes
    split: test
    columns: [...]              # rule types (seeds: plus "all") or metric keys (sizes)
    paper_table: copynet_table1 # the published rows beside ours (pipeline/reporting/paper_results.yaml)
    curves: [copynet]           # seeds: the validation curves of these mechanisms (<run>/<mech>.csv)
    target: 3800000             # sizes: the training size the fit is extrapolated to
    paper_rows: {read_again: read_again}  # sizes: the paper_table row set beside each mechanism
    """
    import yaml

    spec = yaml.safe_load((folder / "experiment.yaml").read_text(encoding="utf-8"))
    runs = load_runs(folder)
    display = {**display, **baseline_names({m for per_mech in runs.values() for m in per_mech})}
    order = list(display)  # the mechanisms' order (models/), then the baselines

    def in_order(per_mech: dict) -> dict:
        return dict(sorted(per_mech.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)))

    runs = {run: in_order(per_mech) for run, per_mech in runs.items()}
    columns = list(spec["columns"])
    if spec["kind"] == "seeds":
        paper = PAPER_TABLES[spec["paper_table"]] if spec.get("paper_table") else None
        table = seed_markdown(seed_rows(runs, spec["split"], columns), [*columns, "all"], display, paper)
        for mech in spec.get("curves") or []:  # learning curves shown under the table
            curve = validation_curves(folder, mech)
            if curve:
                table += f"\n{display.get(mech, mech)}, validation loss (best epoch kept) and learning rate:\n\n{curve}"
        return table
    if spec["kind"] == "sizes":
        paper = PAPER_TABLES[spec["paper_table"]] if spec.get("paper_table") else None
        rows = in_order(curve_rows(runs, spec["split"], columns))  # a row measured at one size only comes in late
        return curve_markdown(rows, columns, display, int(spec["target"]), paper, spec.get("paper_rows"))
    raise ValueError(f"{folder / 'experiment.yaml'}: kind must be seeds or sizes, got {spec['kind']!r}")
