"""Result tables in README.md and docs/*.md, generated from the metrics files the pipeline writes.

A block in a markdown file is a pair of marker comments::

    <!-- results:TASK -->              every table of TASK's comparison page
    <!-- results:TASK:SPLIT:KEY -->    one table of it: SPLIT, and KEY = top1 / top10 (exact match)
                                       or the metric kind (rouge_f, bleu_sari, ...) of a text task,
                                       or copy (the copy analysis, when the metrics files have it)
    ... generated, do not edit ...
    <!-- /results -->

    <!-- results:experiment/NAME -->  the table of an experiment that collects several runs (seeds,
                                       training sizes): docs/experiments/NAME/experiment.yaml and its
                                       <run>/<mechanism>.json metrics files (pipeline/reporting/experiments.py)
    <!-- results:experiment/NAME/RUN -->  the comparison page of one of those runs (experiment.yaml's
                                       ``task``: its compare settings and the papers' rows)

The generated text between the markers is rebuilt from ``data/eval/runs/TASK/<mechanism>/metrics.json``
(git-tracked; one per row that was evaluated) and the intervals ``data/eval/intervals/TASK.json``
(git-tracked, the compare stage's) by ``pipeline.reporting.compare.comparison_markdown``, the
function the compare stage writes ``data/eval/comparison/TASK.md`` with: the same tables, our rows
beside the published rows of ``pipeline/reporting/paper_results.yaml``, under the task's effective ``compare``
and ``evaluate`` settings of ``params.yaml`` (``pipeline.config.tasks.effective_params``). Only the
MLflow champion line, which needs the registry, is left out. Text outside the markers is never
touched. A task with metrics files but no ``<!-- results:TASK -->`` block (all its tables) in any
page gets one appended to docs/results.md.

The tasks and rows are the compare stage's (``pipeline/stages/compare.py``): the tasks of params.yaml's
``tasks``, and in each task's tables the rows of params.yaml's ``mechanisms`` (the variants listed there
included), in that order, then the task's ``compare.lead`` rows (lead-N), each where its metrics file
exists. A metrics folder left on disk by a task or a row that params.yaml no longer lists is ignored:
no block is appended for it, no table shows it, ``--check`` says nothing about it. A block that names a
task params.yaml does not list is refused (exit 2).

    python scripts/render_results.py           # rewrite the blocks
    python scripts/render_results.py --check   # write nothing; name the file and the block of each
                                               # committed table that differs from the metrics files
    python scripts/render_results.py --root DIR   # another project directory (params.yaml, data/, docs/)

Exit codes: 0 every table is written or, with ``--check``, matches; 1 (``--check`` only) a table is out
of date, nothing written; 2 a refusal, one line naming the cause, nothing written: a metrics or
intervals file that cannot be read or lacks a figure the tables need, a block naming a task, table or
experiment that has no metrics (or a task params.yaml does not list), a ``--root`` that is not a
project directory, a params.yaml that cannot be read, a usage error.
"""

from __future__ import annotations

import difflib
import json
import re
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent

from models.registry import DISPLAY_NAMES  # noqa: E402
from pipeline.config.arguments import OneLineParser, run_command  # noqa: E402
from pipeline.config.params import load_params  # noqa: E402
from pipeline.config.paths import TaskPaths  # noqa: E402
from pipeline.config.tasks import effective_params, task_names  # noqa: E402
from pipeline.config.variants import display_names  # noqa: E402
from pipeline.decoding.settings import EvalConfig  # noqa: E402
from pipeline.io.files import write_text_atomic  # noqa: E402
from pipeline.reporting.baselines import baseline_names, lead_name  # noqa: E402
from pipeline.reporting.compare import CompareConfig, comparison_markdown, metrics_problem  # noqa: E402
from pipeline.reporting.experiments import load_runs, render_experiment  # noqa: E402

PROG = "copyseq render-results"  # how users run this script
BLOCK = re.compile(r"<!-- results:(?P<spec>[^\s>]+) -->\n(?P<body>.*?)<!-- /results -->", re.S)
# the section headings pipeline.reporting.compare.comparison_markdown writes
SECTION = re.compile(
    r"^## (?P<split>[^\s:]+)(?: \(\d+ examples\))?: "
    r"(?:exact-match accuracy, (?P<key>\S+) \(%\)|(?P<copy>copy analysis)|(?P<kind>\S+))$"
)


def section_key(m: re.Match) -> str:
    """A section's KEY in ``results:TASK:SPLIT:KEY``: top1 / top10, the metric kind, or ``copy``
    (the copy analysis)."""
    return m["key"] or ("copy" if m["copy"] else m["kind"])


NEW_BLOCKS_FILE = "docs/results.md"


class RenderError(Exception):
    pass


def runs_dir(root: Path) -> Path:
    """data/eval/runs: the evaluate stage writes <task>/<mechanism>/metrics.json there."""
    return TaskPaths("_", root).evaluation("_").parent.parent


def markdown_files(root: Path) -> list[Path]:
    return [p for p in [root / "README.md", *sorted((root / "docs").glob("*.md"))] if p.exists()]


def row_order(params: dict) -> list[str]:
    """The rows' order in a table: params.yaml's mechanisms, then the declared variants it does not
    list (an experiment may have run them), then every other mechanism and the baselines."""
    listed = list(params.get("mechanisms") or [])
    return [*listed, *(v for v in params.get("variants") or {} if v not in listed), *DISPLAY_NAMES]


def task_config(params: dict, task: str) -> tuple[EvalConfig, CompareConfig]:
    """The evaluate and compare settings of ``task`` (its effective params.yaml, as the stages read
    them); a RenderError naming the task when they are refused."""
    try:
        eff = effective_params(params, task)
        return EvalConfig.from_params(eff), CompareConfig.from_params(eff)
    except (KeyError, ValueError) as err:  # no such task, or its evaluate/compare settings
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        raise RenderError(f"params.yaml, the settings of {task}: {message}") from None


def task_rows(params: dict, compare: CompareConfig) -> list[str]:
    """The rows the compare stage gives a task's page (pipeline/stages/compare.py ``run`` and
    ``compare_task``): params.yaml's ``mechanisms`` (variants listed there included), in that order,
    then the lead-N rows of the task's ``compare.lead``."""
    return list(dict.fromkeys([*(params.get("mechanisms") or []), *(lead_name(n) for n in compare.lead)]))


def configured_task(params: dict, task: str, root: Path) -> None:
    """A RenderError when ``task`` is not one of params.yaml's tasks: the compare stage writes no page
    for it, and a metrics folder it left on disk is not read."""
    tasks = task_names(params)
    if task not in tasks:
        runs = (runs_dir(root) / task).relative_to(root)
        raise RenderError(
            f"no metrics files under {runs}/<mechanism>/metrics.json are read: "
            f"{task} is not one of params.yaml's tasks ({', '.join(tasks) or 'none'})"
        )


def task_metrics(root: Path, params: dict, task: str, rows: list[str]) -> dict[str, dict]:
    """{row: metrics.json} of every evaluated row of ``task`` among ``rows`` (:func:`task_rows`), in
    that order; a metrics folder of another row (one params.yaml no longer lists) is not read."""
    configured_task(params, task, root)
    runs = runs_dir(root) / task
    found = {p.parent.name: p for p in runs.glob("*/metrics.json")}
    if not found:
        raise RenderError(f"no metrics files under {runs.relative_to(root)}/<mechanism>/metrics.json")
    names = [m for m in rows if m in found]
    if not names:
        raise RenderError(
            f"no metrics files under {runs.relative_to(root)}/<mechanism>/metrics.json of the task's rows "
            f"(params.yaml's mechanisms and compare.lead: {', '.join(rows) or 'none'}); "
            f"not read: {', '.join(sorted(found))}"
        )
    return {m: read_json(found[m], root, "split: metrics") for m in names}


def metrics_files(root: Path, task: str, names) -> dict[str, str]:
    """{mechanism: its metrics.json, relative to ``root``}, for messages."""
    runs = runs_dir(root).relative_to(root)
    return {m: f"{runs}/{task}/{m}/metrics.json" for m in names}


def read_json(path: Path, root: Path, shape: str) -> dict:
    """A metrics or intervals file: a JSON object of objects ({``shape``}); a RenderError naming the
    file when it cannot be read or has another shape (a hand edit, a truncated copy)."""
    rel = path.relative_to(root) if path.is_relative_to(root) else path
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RenderError(f"{rel}: cannot be read as JSON ({err})") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise RenderError(f"{rel}: expected a JSON object {{{shape}}}, got {type(data).__name__} {str(data)[:60]}")
    return data


def task_intervals(root: Path, task: str) -> dict:
    """The compare stage's intervals of ``task`` (data/eval/intervals/TASK.json, git-tracked), or none."""
    path = TaskPaths(task, root).intervals(task)
    return read_json(path, root, "split: intervals") if path.exists() else {}


def comparison_page(
    root: Path, params: dict, task: str, metrics: dict[str, dict] | None = None, files: dict[str, str] | None = None
) -> str:
    """The compare stage's page for ``task`` (without the MLflow champion line); ``metrics``: other
    runs' metrics than data/eval/runs (an experiment's, shown without the pipeline's intervals), read
    from ``files`` ({mechanism: file}, named when one lacks what the tables need)."""
    ev, compare = task_config(params, task)
    intervals = {} if metrics else task_intervals(root, task)
    if metrics is None:
        metrics = task_metrics(root, params, task, task_rows(params, compare))
        files = metrics_files(root, task, metrics)
    splits = list(ev.splits) + list(ev.optional_splits)
    kinds = {split: ev.metric_for(split) for split in splits}
    for mech, figures in metrics.items():
        if problem := metrics_problem(figures, kinds, compare.topk):
            raise RenderError(f"{(files or {}).get(mech, mech)}: {problem} (the tables need it)")
    return comparison_markdown(
        task,
        metrics,
        compare,
        {**DISPLAY_NAMES, **display_names(params, DISPLAY_NAMES), **baseline_names(metrics)},  # as the stage
        kinds,
        intervals,
    )


def experiment_block(spec: str, root: Path, params: dict) -> str:
    """``experiment/NAME``: the experiment's table (seeds or sizes); ``experiment/NAME/RUN``: the
    comparison page of one of its runs, as the compare stage writes it for ``task`` (experiment.yaml)."""
    name, _, run = spec.removeprefix("experiment/").partition("/")
    folder = root / "docs" / "experiments" / name
    if not (folder / "experiment.yaml").exists():
        raise RenderError(f"block results:{spec}: no {folder.relative_to(root)}/experiment.yaml")
    try:
        runs = load_runs(folder)
    except ValueError as err:  # a run's metrics file not a JSON object
        raise RenderError(f"block results:{spec}: {err}") from None
    if not run:
        labels = {**DISPLAY_NAMES, **display_names(params, DISPLAY_NAMES)}  # the variants' labels too
        return render_experiment(folder, labels)
    if run not in runs:
        raise RenderError(
            f"block results:{spec}: {folder.relative_to(root)} has no run {run!r} (it has {sorted(runs)})"
        )
    task = yaml.safe_load((folder / "experiment.yaml").read_text(encoding="utf-8"))["task"]
    order = row_order(params)  # as task_metrics
    metrics = dict(sorted(runs[run].items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)))
    files = {mech: f"{folder.relative_to(root)}/{run}/{mech}.json" for mech in metrics}
    page = comparison_page(root, params, task, metrics, files)
    return "\n\n".join(f"### {head[3:]}\n\n{body}" for _, head, body in sections(page))


def sections(page: str) -> list[tuple[re.Match | None, str, str]]:
    """(heading match, heading line, body) for each ``## `` section of a comparison page."""
    out, head, body = [], None, []
    for line in page.splitlines():
        if line.startswith("## "):
            if head is not None:
                out.append((SECTION.match(head), head, "\n".join(body).strip("\n")))
            head, body = line, []
        elif head is not None:
            body.append(line)
    if head is not None:
        out.append((SECTION.match(head), head, "\n".join(body).strip("\n")))
    return out


def render(spec: str, root: Path, params: dict, cache: dict) -> str:
    """The text between the markers of block ``spec``."""
    if spec.startswith("experiment/"):
        return f"\n{experiment_block(spec, root, params)}\n"
    task, *rest = spec.split(":")
    if len(rest) not in (0, 2):
        raise RenderError(f"block results:{spec}: expected results:TASK or results:TASK:SPLIT:KEY")
    if task not in cache:
        try:
            configured_task(params, task, root)
        except RenderError as err:
            raise RenderError(f"block results:{spec}: {err}") from None
        cache[task] = comparison_page(root, params, task)
    parts = sections(cache[task])
    if not rest:
        text = "\n\n".join(f"### {task} / {head[3:]}\n\n{body}" for _, head, body in parts)
    else:
        split, key = rest
        chosen = [body for m, _, body in parts if m and m["split"] == split and section_key(m) == key]
        if not chosen:
            have = ", ".join(f"{m['split']}:{section_key(m)}" for m, _, _ in parts if m)
            raise RenderError(
                f"block results:{spec}: the comparison page of {task} has no {split}:{key} "
                f"table (it has: {have or 'none'})"
            )
        text = "\n\n".join(chosen)
    return f"\n{text}\n\n"


def fenced_ranges(text: str) -> list[tuple[int, int]]:
    """Character ranges of fenced code blocks (markers shown there as examples are not blocks)."""
    ranges, start, pos = [], None, 0
    for line in text.splitlines(keepends=True):
        if line.lstrip().startswith(("```", "~~~")):
            if start is None:
                start = pos
            else:
                ranges.append((start, pos + len(line)))
                start = None
        pos += len(line)
    return ranges


def blocks(text: str) -> list[re.Match]:
    fences = fenced_ranges(text)
    return [m for m in BLOCK.finditer(text) if not any(a <= m.start() < b for a, b in fences)]


def rendered_file(path: Path, root: Path, params: dict, cache: dict, used: set) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise RenderError(f"{path.relative_to(root)}: cannot be read ({err})") from None
    fences = fenced_ranges(text)

    def sub(m: re.Match) -> str:
        if any(a <= m.start() < b for a, b in fences):
            return m[0]
        spec = m["spec"]
        if ":" not in spec:
            used.add(spec)
        try:
            body = render(spec, root, params, cache)
        except RenderError as err:
            raise RenderError(f"{path.relative_to(root)}: {err}") from None
        return f"<!-- results:{spec} -->\n{body}<!-- /results -->"

    return BLOCK.sub(sub, text)


def evaluated_tasks(root: Path, params: dict) -> list[str]:
    """params.yaml's tasks with a metrics file of one of their rows (:func:`task_rows`); a folder of
    a task or a row params.yaml no longer lists does not make one."""
    runs, out = runs_dir(root), []
    for task in task_names(params):
        found = {p.parent.name for p in (runs / task).glob("*/metrics.json")}
        if found and found.intersection(task_rows(params, task_config(params, task)[1])):
            out.append(task)
    return sorted(out)


def project_params(given: Path, root: Path) -> dict:
    """The params.yaml of the ``--root`` project; a RenderError naming the path when ``root`` is not
    a project directory or its params.yaml cannot be read."""
    if not root.exists():
        raise RenderError(f"--root {given}: no such directory")
    if not root.is_dir():
        raise RenderError(f"--root {given}: not a directory (give the project directory that holds params.yaml)")
    if not (root / "params.yaml").is_file():
        raise RenderError(
            f"--root {given}: no params.yaml there; --root is a project directory (params.yaml, data/, docs/)"
        )
    path = root / "params.yaml"
    try:
        return load_params(path)
    except (OSError, ValueError) as err:  # SettingsError, UnicodeDecodeError too
        message = (str(err).strip() or type(err).__name__).splitlines()[0]
        raise RenderError(message if str(path) in message else f"{path}: {message}") from None


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(
        prog=PROG,
        description=__doc__.split("\n\n")[0],
        epilog="exit codes: 0 every table written, or matching with --check; 1 (--check) a table is out of date; "
        "2 a refusal (one line: a metrics, intervals or params file that cannot be read or lacks a figure, a block naming a "
        "task or table without metrics or a task params.yaml does not list, --root not a project, a usage error)",
    )
    ap.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if a file's generated tables differ from the metrics files",
    )
    ap.add_argument("--root", type=Path, default=REPO, help="project directory (default: this repository)")
    args = ap.parse_args(argv)
    root = args.root.resolve()
    cache: dict[str, str] = {}
    used: set[str] = set()
    new: dict[Path, str] = {}
    try:
        params = project_params(args.root, root)
        for path in markdown_files(root):
            new[path] = rendered_file(path, root, params, cache, used)
        missing = [t for t in evaluated_tasks(root, params) if t not in used]
        if missing:
            target = root / NEW_BLOCKS_FILE
            text = new.get(target) or (target.read_text(encoding="utf-8") if target.exists() else "# Results\n")
            for task in missing:
                text = text.rstrip("\n") + (
                    f"\n\n## {task}\n\n<!-- results:{task} -->\n{render(task, root, params, cache)}<!-- /results -->\n"
                )
            new[target] = text
    except RenderError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2

    stale = []
    for path, text in new.items():
        old = path.read_text(encoding="utf-8") if path.exists() else ""
        if text == old:
            continue
        rel = path.relative_to(root)
        if not args.check:
            write_text_atomic(path, text)  # a page is never left half-written
            print(f"{PROG}: rewrote {rel}")
            continue
        old_blocks = {m["spec"]: m[0] for m in blocks(old)}
        new_blocks = {m["spec"]: m[0] for m in blocks(text)}
        for spec, block in new_blocks.items():
            if old_blocks.get(spec) == block:
                continue
            what = (
                "is missing (the task has metrics files)"
                if spec not in old_blocks
                else "differs from the metrics files"
            )
            stale.append(f"{rel}: block results:{spec} {what}")
            diff = difflib.unified_diff(
                old_blocks.get(spec, "").splitlines(),
                block.splitlines(),
                f"{rel} (committed)",
                f"{rel} (from data/eval/runs)",
                lineterm="",
                n=1,
            )
            stale.extend("    " + line for line in list(diff)[:40])
    if stale:
        print("\n".join(stale), file=sys.stderr)
        print(f"{PROG}: tables are out of date; run `{PROG}`", file=sys.stderr)
        return 1
    if args.check:
        print(f"{PROG}: every generated table matches the metrics files")
    return 0


if __name__ == "__main__":
    sys.exit(run_command(main))
