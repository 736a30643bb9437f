"""Comparison tables in the shape of the papers' tables: rows are mechanisms, ours and published.

Two shapes:

* exact match (CopyNet Table 1): per split, top-1 and top-k accuracy per group (rule type);
* text metrics (ROUGE, BLEU, SARI): per split, one column per metric key (``compare.columns``).

After them, per split, the copy analysis (:mod:`pipeline.metrics.copy_analysis`): one row per
mechanism whose metrics.json has it, and a references row; a page of metrics files written before
it existed simply has no such table.

Published rows come from ``pipeline.reporting.paper_results``; ``compare.paper_tables`` maps a paper table's
id to the split of ours it is printed under (e.g. ``readagain_duc2004: duc2004``). A paper row
shows the paper's own columns; a column we do not compute is '-' in our rows.
"""

from __future__ import annotations

import re

from pydantic.dataclasses import dataclass as pydantic_dataclass

from pipeline.config.params import section
from pipeline.config.schema import SETTINGS, CompareSettings, build
from pipeline.reporting.paper_results import PAPER_TABLES


@pydantic_dataclass(frozen=True, config=SETTINGS)
class CompareConfig(CompareSettings):
    """The ``compare`` section of params.yaml (a task's effective one; the schema's
    :class:`~pipeline.config.schema.CompareSettings`): what its comparison page shows."""

    def __post_init__(self) -> None:
        unknown = [t for t in self.paper_tables if t not in PAPER_TABLES]
        if unknown:
            raise ValueError(
                f"compare.paper_tables: no paper table {unknown[0]!r} "
                f"(pipeline/reporting/paper_results.yaml has {sorted(PAPER_TABLES)})"
            )

    @classmethod
    def from_dict(cls, d: dict, where: str = "compare") -> CompareConfig:
        return build(cls, d, where)

    @classmethod
    def from_params(cls, params: dict) -> CompareConfig:
        return cls.from_dict(section(params, "compare"))


def _fmt(v, digits: int = 1) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _cell(value, cell: dict | None, digits: int) -> str:
    """A figure with its uncertainty: ``mean ± sd [low, high]`` (sd with several seeds), bold when it is
    the column's best or not significantly different from it."""
    if cell is None:
        return _fmt(value, digits)
    mean = _fmt(cell["mean"], digits)
    if cell["best"] or not cell["significant"]:
        mean = f"**{mean}**"
    sd = f" ± {cell['sd']:.{digits}f}" if cell.get("sd") is not None else ""
    return f"{mean}{sd} [{cell['low']:.{digits}f}, {cell['high']:.{digits}f}]"


def interval_note(split_intervals: dict | None) -> str:
    """The line under a table saying what its intervals and bold figures mean."""
    if not split_intervals:
        return ""
    cells = split_intervals.get("cells") or {}
    seeds = max((c["seeds"] for rows in cells.values() for c in rows.values()), default=1)
    by = split_intervals.get("resample_by")
    unit = split_intervals["unit"] + (f" (`{by}`)" if by else "")
    over = f"the mean over {seeds} training seeds ± their sd, then " if seeds > 1 else "one training seed; "
    return (
        f"\nEach figure of ours: {over}its 95% interval from {split_intervals['resamples']:,} bootstrap resamples of "
        f"the test set's {unit}{' and of the seeds' if seeds > 1 else ''}. **Bold**: the column's best and every row "
        "not significantly different from it (paired bootstrap on the same resamples, p >= 0.05). "
        + ("" if seeds > 1 else "With one seed the interval leaves out training variance (train.seeds). ")
        + "Published rows carry no interval.\n"
    )


def ranking_line(
    metrics: dict[str, dict],
    split: str,
    key: str,
    higher: bool,
    names: dict[str, str],
    digits: int = 2,
    cells: dict[str, dict] | None = None,
) -> str:
    """One line ranking the mechanisms by ``split``.``key`` (the task's champion metric), best first:
    ``test top1: CopyNet 76.95 · Pointer Softmax 31.29 · ...``. Mechanisms without it are left out.
    ``cells``: row -> interval (pipeline.reporting.uncertainty), then each figure is shown as the tables
    show it (the seeds' mean, its interval, bold when not significantly different from the best)."""
    scores = {m: per[split][key] for m, per in metrics.items() if key in (per.get(split) or {})}
    if cells:
        scores = {m: cells[m]["mean"] if m in cells else v for m, v in scores.items()}
    ranked = sorted(scores.items(), key=lambda item: -item[1] if higher else item[1])
    shown = [f"{names.get(m, m)} {_cell(v, (cells or {}).get(m), digits)}" for m, v in ranked]
    return f"{split} {key}: " + " · ".join(shown)


def accuracy_rows(metrics: dict[str, dict], split: str, columns: list[str], key: str) -> dict[str, dict]:
    """{mechanism: {column: value}} from each mechanism's metrics.json (groups = rule types)."""
    rows = {}
    for mech, m in metrics.items():
        split_m = m.get(split)
        if not split_m or "skipped" in split_m:
            continue
        groups = split_m.get("groups", {})
        rows[mech] = {c: groups[c][key] for c in columns if c in groups}
        rows[mech]["all"] = split_m[key]
    return rows


def metric_rows(metrics: dict[str, dict], split: str, columns: list[str]) -> dict[str, dict]:
    """{mechanism: {metric: value}} for a text-metric split."""
    return {
        mech: {c: m[split].get(c) for c in columns}
        for mech, m in metrics.items()
        if m.get(split) and "skipped" not in m[split]
    }


def markdown_table(
    rows: dict[str, dict],
    columns: list[str],
    display: dict[str, str],
    paper: dict | None = None,
    digits: int = 1,
    cells: dict[str, dict] | None = None,
) -> str:
    """Our rows, then the paper's (only the mechanisms we ran, plus its other systems). ``cells``:
    column -> row -> interval (pipeline.reporting.uncertainty), shown with our figures where present."""
    cells = cells or {}
    lines = ["| model | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
    for mech, values in rows.items():
        shown = [_cell(values.get(c), (cells.get(c) or {}).get(mech), digits) for c in columns]
        lines.append(f"| {display.get(mech, mech)} (ours) | " + " | ".join(shown) + " |")
    if paper:
        digits = paper.get("decimals", digits)
        for mech, values in paper["rows"].items():
            if mech in rows or mech not in display or not rows:
                named = dict(zip(paper["columns"], values))
                lines.append(
                    f"| {paper.get('labels', {}).get(mech) or display.get(mech, mech)} (paper) | "
                    + " | ".join(_fmt(named.get(c), digits) for c in columns)
                    + " |"
                )
    return "\n".join(lines) + "\n"


def hidden_paper_rows(paper: dict | None, rows: dict, display: dict[str, str], metrics: dict, split: str) -> str:
    """The line under a table naming the paper's rows :func:`markdown_table` leaves out (a mechanism
    of ours with no row of ours in the table), each with the reason; empty when none is left out."""
    if not paper or not rows:
        return ""
    hidden = []
    for mech in paper["rows"]:
        if mech in rows or mech not in display:
            continue
        if mech not in metrics:
            why = f"{mech} not in `mechanisms`"
        elif "skipped" in (metrics[mech].get(split) or {}):
            why = f"{mech} not evaluated on {split}"
        else:
            why = f"{mech} has no {split} metrics"
        hidden.append(f"'{paper.get('labels', {}).get(mech) or display[mech]}' ({why})")
    if not hidden:
        return ""
    table = re.match(r".*?(?:Table \d+|section [\d.]+)", paper["source"])
    where = table[0] if table else paper["source"]
    return f"\nNot shown: {where} row{'s' if len(hidden) > 1 else ''} " + ", ".join(hidden) + ".\n"


def _paper_note(paper: dict) -> str:
    note = f"Published rows: {paper['source']}"
    if paper.get("note"):
        note += f" ({paper['note']})"
    return (
        note + ". They were trained on the papers' full data at the papers' sizes; ours at the sizes in params.yaml.\n"
    )


COPY_COLUMNS = {  # metrics.json key -> column of the copy-analysis table
    "copied": "copied",
    "novel_1gram": "novel 1-grams",
    "novel_2gram": "novel 2-grams",
    "novel_3gram": "novel 3-grams",
    "novel_4gram": "novel 4-grams",
    "repeated_3gram": "repeated 3-grams",
    "oov_recall": "ref. OOV recall",
    "length": "length",
}
REFERENCES = "references"  # the row of the references' own analysis


def copy_rows(metrics: dict[str, dict], split: str) -> dict[str, dict]:
    """{mechanism: its outputs' copy analysis} of ``split`` for every mechanism whose metrics have
    one, then ``references``: the references' (the same in every mechanism's file; the first's)."""
    rows, refs = {}, None
    for mech, m in metrics.items():
        copy = (m.get(split) or {}).get("copy")
        if not copy:
            continue
        rows[mech] = copy.get("outputs") or {}
        refs = refs or copy.get("references")
    if rows and refs:
        rows[REFERENCES] = refs
    return rows


def copy_markdown(metrics: dict[str, dict], split: str, display: dict[str, str]) -> str:
    """The copy-analysis table of ``split`` (empty when no mechanism's metrics have one)."""
    rows = copy_rows(metrics, split)
    if not rows:
        return ""
    n = next(m[split]["n"] for m in metrics.values() if "copy" in (m.get(split) or {}))
    refs = rows.get(REFERENCES) or {}
    lines = [
        f"\n## {split} ({n} examples): copy analysis\n\n",
        "Percent of the output tokens found in the source (copied) and of the output n-grams not in the "
        "source (novel) or equal to an earlier trigram of the same output (repeated), pooled over the "
        "split; ref. OOV recall: the references' tokens outside the target vocabulary that the output "
        "contains; length: mean tokens. The references row is the references' own analysis "
        "(See et al. 2017, Figures 4 and 6; definitions in docs/paper_tasks.md).",
    ]
    if refs.get("oov") is not None:
        lines.append(
            f" The {refs['count']} references have {refs['oov_tokens']} tokens ({refs['oov']:.1f}%) outside "
            "the target vocabulary."
        )
    lines.append(
        "\n\n| model | " + " | ".join(COPY_COLUMNS.values()) + " |\n|---|" + "---:|" * len(COPY_COLUMNS) + "\n"
    )
    for mech, values in rows.items():
        label = "References" if mech == REFERENCES else f"{display.get(mech, mech)} (ours)"
        cells = [_fmt(values.get(key), 2 if key == "length" else 1) for key in COPY_COLUMNS]
        lines.append(f"| {label} | " + " | ".join(cells) + " |\n")
    return "".join(lines)


BUDGET_KIND = "rouge_recall_75"  # the metric whose splits get the byte-budget table (75 bytes)


def budget_markdown(metrics: dict[str, dict], split: str, display: dict[str, str]) -> str:
    """The outputs' length against the 75-byte budget of a ``rouge_recall_75`` split (each row's
    ``output_bytes`` / ``outputs_under_budget`` of :mod:`pipeline.metrics.byte_budget`), and the
    references'; empty when no metrics file has them (written before they were measured)."""
    rows = {
        mech: m[split]
        for mech, m in metrics.items()
        if isinstance(m.get(split), dict) and m[split].get("output_bytes") is not None
    }
    if not rows:
        return ""
    lines = [
        "\nLength against the 75-byte budget: the mean UTF-8 bytes of the outputs as ROUGE cuts them (tokens "
        "joined by spaces) and the percent of outputs shorter than 75 bytes, which leave recall unearned; "
        "the references row: the references as scored.\n\n",
        "| model | mean output bytes | outputs under 75 bytes (%) |\n|---|---:|---:|\n",
    ]
    lines += [
        f"| {display.get(mech, mech)} (ours) | {_fmt(v['output_bytes'])} | {_fmt(v.get('outputs_under_budget'))} |\n"
        for mech, v in rows.items()
    ]
    refs = next((v for v in rows.values() if v.get("ref_bytes") is not None), None)
    if refs:
        lines.append(f"| References | {_fmt(refs['ref_bytes'])} | {_fmt(refs.get('refs_under_budget'))} |\n")
    return "".join(lines)


def table_cells(split_intervals: dict | None, columns: list[str], key: str | None = None) -> dict[str, dict]:
    """Column -> row -> interval for one table: exact match's ``all`` column is the key itself, a group
    column ``<group>.<key>``; a text metric's column is its key."""
    found = (split_intervals or {}).get("cells") or {}
    if key is None:
        return {c: found[c] for c in columns if c in found}
    names = {c: key if c == "all" else f"{c}.{key}" for c in columns}
    return {c: found[name] for c, name in names.items() if name in found}


TEXT_KEYS = ("skipped", "metric")  # the only keys of a metrics file whose values are text


def metrics_problem(metrics: dict, kinds: dict[str, str], topk: int) -> str | None:
    """What one mechanism's metrics (its metrics.json) lacks for :func:`comparison_markdown`, in a
    phrase naming the key, or None: every figure a number or null; each split evaluated has its
    example count ``n``; an exact-match split (``kinds``) its ``top1`` and ``top{topk}``, overall and
    in each of its groups. Checked before the tables are built, so that an error while building them
    is a bug of ours, not a bad file."""
    for split, figures in metrics.items():
        if not isinstance(figures, dict):
            return f"{split} is {type(figures).__name__}, not an object"
        if "skipped" in figures:
            continue
        needed = ["n"]
        if kinds.get(split, "exact_match") == "exact_match":
            needed += ["top1", f"top{topk}"]
            groups = figures.get("groups", {})
            if not isinstance(groups, dict) or not all(isinstance(g, dict) for g in groups.values()):
                return f"{split}.groups is not an object of objects"
            needed += [f"groups.{name}.{key}" for name in groups for key in ("top1", f"top{topk}")]
        for path in needed:
            value = figures
            for key in path.split("."):
                value = value.get(key) if isinstance(value, dict) else None
            if value is None:
                return f"{split}.{path} is missing"
        if (bad := _not_a_figure(figures, split)) is not None:
            return bad
    return None


def _not_a_figure(value, path: str) -> str | None:
    """The first leaf under ``value`` that is neither a number nor null (text only under TEXT_KEYS)."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if key in TEXT_KEYS and isinstance(inner, str):
                continue
            if (bad := _not_a_figure(inner, f"{path}.{key}")) is not None:
                return bad
        return None
    if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        return None
    return f"{path} is {str(value)[:40]!r}, not a number"


def comparison_markdown(
    task: str,
    metrics: dict[str, dict],
    cfg: CompareConfig,
    display: dict[str, str],
    metric_kinds: dict[str, str],
    intervals: dict | None = None,
) -> str:
    """The whole comparison page for one task (``cfg``: the task's effective ``compare`` settings;
    ``intervals``: :func:`pipeline.reporting.uncertainty.split_intervals` by split, shown in the cells)."""
    intervals = intervals or {}
    splits = [s for s in cfg.splits if any(s in m for m in metrics.values())]
    tables = {split: [PAPER_TABLES[t] for t, s in cfg.paper_tables.items() if s == split] for split in splits}
    out = [f"# {task}: comparison\n"]
    for split in splits:
        kind = metric_kinds.get(split, "exact_match")
        papers = tables.get(split) or [None]
        if kind == "exact_match":
            columns = list(cfg.columns) + ["all"]
            for key in ("top1", f"top{cfg.topk}"):
                rows = accuracy_rows(metrics, split, list(cfg.columns), key)
                if not rows:
                    continue
                cells = table_cells(intervals.get(split), columns, key)
                for paper in papers if key == "top1" else [None]:
                    out.append(f"\n## {split}: exact-match accuracy, {key} (%)\n\n")
                    if paper:
                        out.append(_paper_note(paper) + "\n")
                    out.append(markdown_table(rows, columns, display, paper, cells=cells))
                    out.append(hidden_paper_rows(paper, rows, display, metrics, split))
                    out.append(interval_note(intervals.get(split) if cells else None))
            continue
        for paper in papers:
            columns = list(paper["columns"]) if paper else list(cfg.columns)
            rows = metric_rows(metrics, split, columns)
            if not rows:
                continue
            n = next(iter(m[split]["n"] for m in metrics.values() if split in m and "n" in m[split]))
            out.append(f"\n## {split} ({n} examples): {kind}\n\n")
            if paper:
                out.append(_paper_note(paper) + "\n")
            cells = table_cells(intervals.get(split), columns)
            out.append(markdown_table(rows, columns, display, paper, digits=2, cells=cells))
            out.append(hidden_paper_rows(paper, rows, display, metrics, split))
            out.append(interval_note(intervals.get(split) if cells else None))
        if kind == BUDGET_KIND:
            out.append(budget_markdown(metrics, split, display))
    out.extend(copy_markdown(metrics, split, display) for split in splits)
    skipped = sorted(
        {
            f"{split}: {m[split]['skipped']}"
            for m in metrics.values()
            for split in m
            if isinstance(m[split], dict) and "skipped" in m[split]
        }
    )
    if skipped:
        out.append("\nNot evaluated: " + "; ".join(skipped) + "\n")
    return "".join(out)


def plot_rows(metrics: dict[str, dict], split: str, columns: list[str], kind: str) -> dict[str, dict]:
    """{mechanism: {column: value}} of one split, for the bar chart and the DVC plot CSV."""
    if kind == "exact_match":
        return accuracy_rows(metrics, split, columns, "top1")
    return metric_rows(metrics, split, columns)
