"""``copyseq``: one command for what users run (``copyseq --help``; each subcommand's ``--help``).

Each subcommand runs the module that does the work in a process of its own (``python -m ...``, the
DVC pipeline through ``scripts/with_prefect_server.sh``), with the arguments given after it, so the
modules keep working alone and every entry process pins its math libraries as before:

=================  ====================================================================
``tasks``          list the tasks and whether their data is here; ``add`` your own corpus; ``enable``
``check``          check params.yaml against its schema (one line per problem, exit 2)
``run``            one task's stages alone (``dvc repro`` of its rows), or ``--dry``
``repro``          the whole pipeline (``dvc repro``) with one local Prefect server
``predict``        raw text in, outputs out, from a checkpoint or a registered model
``export``         a trained model as ONNX graphs served without torch (or a copy head as a Hugging Face folder)
``serve``          the registered champion over HTTP on 127.0.0.1 (``mlflow models serve``)
``eval-options``   decoding options scored on the validation split, without retraining
``render-results`` the docs' result tables from the metrics files
``retrain``        champion/challenger retraining, once (``run``) or on a schedule (``serve``)
=================  ====================================================================
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

from pipeline.config.params import REPO_ROOT, load_params
from pipeline.config.rows import rows_with_new_vocab_records, stale_files
from pipeline.config.tasks import task_names
from pipeline.config.validation import SettingsError
from pipeline.tracking.registry import serving_problem  # imports MLflow only when called

app = typer.Typer(
    name="copyseq",
    help="Copy and pointer mechanisms for sequence-to-sequence learning: prepare, train, compare, serve.",
    no_args_is_help=True,
    add_completion=False,
)
PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}


def _call(cmd: list[str], env: dict[str, str] | None = None, in_project: bool = True) -> None:
    """Run ``cmd`` in the project root (where DVC and the server run; ``in_project=False``: the user's
    directory), with ``env`` (else this process's environment), and leave with its exit code."""
    sys.stdout.flush()  # what this process printed comes before the child's output, also into a pipe
    raise typer.Exit(subprocess.call(cmd, cwd=REPO_ROOT if in_project else None, env=env))


# The pass-through subcommands run in the user's directory: the paths they are given (`--input in.txt`,
# `--out exports/`, `--params my.yaml`) mean what they mean in the user's shell. Their defaults are the
# project's own files (absolute paths), wherever they run.
def _module(module: str, args: list[str]) -> None:
    _call([sys.executable, "-m", module, *args], in_project=False)


def _script(name: str, args: list[str]) -> None:
    _call([sys.executable, str(REPO_ROOT / "scripts" / name), *args], in_project=False)


@app.command(context_settings=PASS_THROUGH, add_help_option=False)
def tasks(ctx: typer.Context) -> None:
    """Tasks: `list` (which can run here), `add NAME --train FILE ...` (your own corpus), `enable`."""
    _module("pipeline.data.tasks", ctx.args)


@app.command(context_settings=PASS_THROUGH, add_help_option=False)
def check(ctx: typer.Context) -> None:
    """Check params.yaml against its schema: `check [--params FILE]`."""
    _module("pipeline.config.schema", ctx.args)


def run_targets(params: dict, task: str, rows: list[str]) -> list[str]:
    """The DVC targets that run ``task`` alone for ``rows`` (every row of ``mechanisms`` when empty):
    each row's evaluate stage, which brings its settings, prepare, vocab and train stages with it;
    never another task's stages, nor the comparison of every task."""
    known = list(params.get("mechanisms") or [])
    if task not in (params.get("tasks") or {}):
        raise typer.BadParameter(
            f"{task!r} is not under `tasks` in params.yaml (copyseq tasks list)", param_hint="TASK"
        )
    unknown = [row for row in rows if row not in known]
    if unknown:
        raise typer.BadParameter(
            f"{', '.join(unknown)} not under `mechanisms` in params.yaml (has: {', '.join(known)})",
            param_hint="--mechanism",
        )
    return [f"evaluate@{task}-{row}" for row in rows or known]


@app.command()
def run(
    task: Annotated[str, typer.Argument(help="a task under `tasks` in params.yaml")],
    mechanism: Annotated[
        list[str] | None, typer.Option("--mechanism", "-m", help="a row to run (repeat; default: every row)")
    ] = None,
    dry: Annotated[bool, typer.Option("--dry", help="print the stages that would run, run none")] = False,
    compare: Annotated[
        bool, typer.Option("--compare", help="then the comparison of every task (they must be run)")
    ] = False,
) -> None:
    """One task's stages alone: its settings, prepare, vocab, and train and evaluate of each row."""
    params = load_params()
    targets = run_targets(params, task, mechanism or [])
    rows = mechanism or list(params.get("mechanisms") or [])
    after = ["compare"] if compare else []
    if dry and not (REPO_ROOT / "data" / "shards" / task).is_dir():
        # `dvc repro --dry` hashes the vocab and train stages' deps inside prepare's output, which
        # does not exist before prepare has run (DVC then fails): every stage of the task would run.
        stages = ["settings", f"prepare@{task}", f"vocab@{task}", *_row_stages(task, rows), *after]
        _preview(f"prepare has not run for {task} yet, so every stage of it would run:", stages)
        raise typer.Exit(0)
    if dry:
        new = [row for row in rows if not _row_has_run(task, row)]
        if new:
            # A row just listed under `mechanisms` has no settings file or checkpoint yet, which its
            # train and evaluate stages depend on (DVC then fails): its stages would run; DVC previews the rest.
            settings = ["settings"] if any(not _row_settings(task, row).is_file() for row in new) else []
            _preview(
                f"{', '.join(new)} of {task} not run here yet (no settings file or checkpoint), so these stages would run:",
                [*settings, *_row_stages(task, new), *after],
            )
            targets, after = [f"evaluate@{task}-{row}" for row in rows if row not in new], []
            if not targets:
                raise typer.Exit(0)
        _dry_repro(_repro_parser().parse_args(["--dry", *targets, *after]))  # rows whose settings change
        _call([sys.executable, "-m", "dvc", "repro", "--dry", *targets, *after])  # this environment's dvc
    _call([str(REPO_ROOT / "scripts" / "with_prefect_server.sh"), "dvc", "repro", *targets, *after])


def _row_settings(task: str, row: str) -> Path:
    return REPO_ROOT / "data" / "settings" / task / f"{row}.json"


def _row_has_run(task: str, row: str) -> bool:
    """Whether ``dvc repro --dry`` can preview the row: its settings file and its checkpoint exist."""
    return _row_settings(task, row).is_file() and (REPO_ROOT / "data" / "checkpoints" / task / row).is_dir()


def _row_stages(task: str, rows: list[str]) -> list[str]:
    return [f"{stage}@{task}-{row}" for row in rows for stage in ("train", "evaluate")]


def _preview(header: str, stages: list[str]) -> None:
    """Stages that would run, printed as `dvc repro --dry` names them."""
    print(header)
    print("\n".join(f"Running stage '{stage}'" for stage in stages))


@app.command(context_settings=PASS_THROUGH, add_help_option=False)
def repro(ctx: typer.Context) -> None:
    """The whole pipeline: `dvc repro [ARGS]` with one local Prefect server (`--dry`: none needed)."""
    known = _check_repro_args(ctx, ctx.args)
    if "--dry" in ctx.args:
        unprepared = [t for t in task_names(load_params()) if not (REPO_ROOT / "data" / "shards" / t).is_dir()]
        if unprepared:
            # `dvc repro --dry` hashes the vocab and train stages' deps inside prepare's output, which
            # does not exist before prepare has run (DVC then fails); `dvc status` names those stages.
            print(f"prepare has not run for {', '.join(unprepared)} yet; the stages out of date (dvc status):")
            _call([sys.executable, "-m", "dvc", "status", *(a for a in ctx.args if not a.startswith("-"))])
        if known is not None:
            _dry_repro(known)
        _call([sys.executable, "-m", "dvc", "repro", *ctx.args])
    _call([str(REPO_ROOT / "scripts" / "with_prefect_server.sh"), "dvc", "repro", *ctx.args])


def _repro_parser() -> argparse.ArgumentParser:
    from dvc.cli.parser import get_main_parser

    return next(a.choices["repro"] for a in get_main_parser()._actions if isinstance(a.choices, dict))


def _check_repro_args(ctx: typer.Context, args: list[str]) -> argparse.Namespace | None:
    """Refuse, before DVC or a Prefect server starts, what `dvc repro` would refuse with its own exit
    codes (255, 254): an option it does not have, a target that is no stage of dvc.yaml. Parsed by
    DVC's own `repro` parser and collected as `dvc repro` collects its targets, so both agree. The
    parsed arguments, or None for `--help`."""
    if "-h" in args or "--help" in args:
        return None  # DVC's help, as before
    from dvc.exceptions import DvcException
    from dvc.repo import Repo
    from dvc.repo.reproduce import collect_stages

    def refuse(message: str) -> None:  # DVC's parser prints its help before erring: one line instead
        ctx.fail(f"repro: {message} (copyseq repro --help: its options)")

    parser = _repro_parser()
    parser.error = refuse
    known, unknown = parser.parse_known_args(args)
    if unknown:
        refuse(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        with contextlib.chdir(REPO_ROOT), Repo(str(REPO_ROOT)) as repo:  # dvc runs there: targets are relative to it
            collect_stages(repo, known.targets or ["dvc.yaml"], recursive=known.recursive, glob=known.glob)
    except DvcException as err:
        ctx.fail(f"repro: {err} (dvc stage list: the stages)")
    return known


# what chooses the stages `dvc repro` walks; its other options (--force, -v, ...) say how it walks them
_SELECTION = {"help", "targets", "single_item", "pipeline", "all_pipelines", "recursive", "downstream", "glob"}


def _dry_repro(known: argparse.Namespace) -> None:
    """`dvc repro --dry` (``known``: its parsed arguments) of the stages it walks but those it cannot
    preview, which are printed after it; returns, for DVC to run as asked, when there are none.
    A stage that would run is looked up in the run cache by its deps' hashes, and DVC fails on a dep
    that does not exist (``[Errno 2] No such file or directory``), which a dry run does not make: the
    checkpoint of a row whose train stage has not run (its evaluate stage), the settings file of a
    row just listed (its train stage). Nor does a dry run rewrite the settings files from params.yaml
    (the settings stage), so after an edit DVC finds the stages that depend on them up to date: a
    stage whose settings file would change would run too. Such a stage would run, and so would each
    stage walked after it that depends on it (compare), but for a row whose vocab record the vocab
    stage, rerun for its settings alone, would leave as it is (:func:`_vocab_record_rewritten`)."""
    from dvc.repo import Repo
    from dvc.repo.reproduce import collect_stages, get_active_graph, plan_repro

    if not (REPO_ROOT / ".dvc").is_dir():
        return  # not a DVC project: DVC's own dry run says so
    single, downstream = known.single_item, known.downstream
    if known.pipeline or known.all_pipelines:
        single = downstream = False  # as `dvc repro` walks
    with contextlib.chdir(REPO_ROOT), Repo(str(REPO_ROOT)) as repo:
        targets = known.targets or ["dvc.yaml"]
        stages = (
            [] if known.all_pipelines else collect_stages(repo, targets, recursive=known.recursive, glob=known.glob)
        )
        graph = get_active_graph(repo.index.graph)  # an edge goes from a stage to one it depends on
        steps = stages if single else plan_repro(graph, stages, pipeline=known.pipeline, downstream=downstream)
        stale = {path.as_posix(): content for path, content in stale_files(load_params(), REPO_ROOT).items()}
        if not any(stage.addressing == "settings" for stage in steps):
            stale = {}  # a walk without the settings stage (-s) leaves the settings files as they are
        missing: dict[str, None] = {}  # the paths, in the walk's order
        rewritten: dict[str, None] = {}
        left_out, vocab_settings_only = set(), set()
        for stage in steps:  # each stage after those it depends on
            local = [
                dep
                for dep in ([] if stage.frozen else stage.deps)  # a frozen stage does not run
                if getattr(dep, "protocol", None) == "local"
            ]
            absent = [dep.def_path for dep in local if not dep.exists]
            new_settings = [dep.def_path for dep in local if dep.exists and dep.def_path in stale]
            missing.update(dict.fromkeys(absent))
            rewritten.update(dict.fromkeys(new_settings))
            upstream = {
                above
                for above in left_out.intersection(graph.successors(stage))
                if above not in vocab_settings_only or _vocab_record_rewritten(stage, stale)
            }
            if absent or new_settings or upstream:
                left_out.add(stage)
                if not absent and not upstream and all(p.endswith("/vocab.json") for p in new_settings):
                    vocab_settings_only.add(stage)
        rest = [stage.addressing for stage in steps if stage not in left_out]
        previewed = [stage.addressing for stage in steps if stage in left_out]
    if not previewed:
        return
    if rest:
        # None of these depends on a stage left out: as targets, DVC walks them as it would have (each
        # after its deps); but a walk of what follows the targets (--downstream) would reach those left
        # out, and one of the targets alone (-s) no other stage: there each alone (-s), in the walk's order.
        cmd = [sys.executable, "-m", "dvc", "repro", *_repro_options(known), *(["-s"] if single or downstream else [])]
        sys.stdout.flush()
        code = subprocess.call([*cmd, *rest], cwd=REPO_ROOT)
        if code:
            raise typer.Exit(code)
    reasons = []
    if missing:
        reasons.append(f"not made here yet, so DVC cannot preview the stages that read them: {', '.join(missing)}")
    if rewritten:
        reasons.append(
            "changed in params.yaml, which the settings stage writes into the files these stages depend on, "
            f"and a dry run writes nothing: {', '.join(rewritten)}"
        )
    _preview(f"{'; '.join(reasons)}; these stages would run{' too' if rest else ''}:", previewed)
    raise typer.Exit(0)


def _vocab_record_rewritten(stage, stale: dict[str, dict]) -> bool:
    """Whether the vocab stage, rerun for its settings file alone (``stale``: the settings files a
    dry run does not rewrite, with their new content), would rewrite the vocab record ``stage``
    depends on: every row's when the vocab section changes, else only a row added or on another
    backbone (:func:`~pipeline.config.rows.rows_with_new_vocab_records`). True for a stage that reads
    the vocab stage's output otherwise."""
    for dep in stage.deps:
        record = re.fullmatch(r"data/vocab/(?P<task>[^/]+)/rows/(?P<row>[^/]+)\.json", dep.def_path)
        if record is None:
            continue
        settings = f"data/settings/{record['task']}/vocab.json"
        if settings not in stale:
            return False
        on_disk = REPO_ROOT / settings
        old = json.loads(on_disk.read_text(encoding="utf-8")) if on_disk.is_file() else None
        return record["row"] in rows_with_new_vocab_records(old, stale[settings])
    return True


def _repro_options(known: argparse.Namespace) -> list[str]:
    """The options of ``known`` (`dvc repro`'s parsed arguments) but those that choose its stages."""
    options: list[str] = []
    for action in _repro_parser()._actions:
        if not action.option_strings or action.dest in _SELECTION:
            continue
        value = getattr(known, action.dest)
        if isinstance(action, argparse._CountAction):
            options += [action.option_strings[0]] * (value or 0)
        elif action.nargs == 0:  # a flag (--force) or one of the flags sharing a dest (-k, --ignore-errors)
            if value == action.const and value != action.default:
                options.append(action.option_strings[-1])
        elif value is not None:
            options += [action.option_strings[-1], str(value)]
    return options


@app.command(context_settings=PASS_THROUGH, add_help_option=False)
def predict(ctx: typer.Context) -> None:
    """Raw text in, outputs out: `predict --model models:/TASK@champion < in.txt` (see --help)."""
    _module("pipeline.serving.predict", ctx.args)


@app.command(context_settings=PASS_THROUGH, add_help_option=False)
def export(ctx: typer.Context) -> None:
    """A trained model as ONNX: `export MODEL_DIR|--model URI --out DIR [--format onnx|hf] [--int8] [--log]` (see --help)."""
    _module("pipeline.serving.export", ctx.args)


@app.command()
def serve(
    ctx: typer.Context,
    task: Annotated[str, typer.Argument(help="the task whose registered champion is served")],
    port: Annotated[int, typer.Option(help="a free port on 127.0.0.1 (1-65535)")] = 5001,
    alias: Annotated[str, typer.Option(help="the registry alias (or a version number)")] = "champion",
) -> None:
    """The registered model of a task over HTTP on 127.0.0.1 (`mlflow models serve`, no conda/venv)."""
    _check_port(port)
    prefix = (load_params().get("tracking") or {}).get("registry_prefix") or ""
    uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{REPO_ROOT / 'mlflow.db'}"
    _check_registered(ctx, uri, task, f"{prefix}{task}", alias)
    model = f"models:/{prefix}{task}/{alias}" if alias.isdigit() else f"models:/{prefix}{task}@{alias}"
    cmd = [sys.executable, "-m", "mlflow", "models", "serve", "-m", model, "--host", "127.0.0.1", "-p", str(port)]
    _call([*cmd, "--env-manager", "local"], env=_serving_env(uri))


def _serving_env(uri: str) -> dict[str, str]:
    """This environment for the server, with this interpreter's bin directory first on PATH: MLflow
    starts the server as `bash -c 'exec uvicorn ...'`, and uvicorn (installed next to this Python) is
    on PATH only in an activated environment, not for `.venv/bin/copyseq serve`."""
    bin_dir = os.path.dirname(sys.executable)  # not resolved: a venv's python is a link out of the venv
    path = os.environ.get("PATH")
    return {**os.environ, "MLFLOW_TRACKING_URI": uri, "PATH": f"{bin_dir}{os.pathsep}{path}" if path else bin_dir}


def _check_port(port: int) -> None:
    """A port the server can listen on, checked here: the server itself fails on a bad or busy port
    only after loading the model, with a traceback."""
    if not 1 <= port <= 65535:
        raise typer.BadParameter(f"{port} is not a port: must be 1-65535", param_hint="'--port'")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: a port in TIME_WAIT is free
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as err:
            raise typer.BadParameter(
                f"127.0.0.1:{port} cannot be listened on ({err.strerror or err}): choose another port",
                param_hint="'--port'",
            ) from None


def _check_registered(ctx: typer.Context, uri: str, task: str, name: str, alias: str) -> None:
    """Refuse in one line, naming the task and alias and what the registry holds, a model `mlflow
    models serve` would not find (it fails with a long traceback). A missing SQLite store is not
    opened (MLflow would create it): nothing is registered yet."""
    wanted = f"serve {task} --alias {alias}"
    db = _sqlite_file(uri)
    if db is not None and (not db.is_file() or db.stat().st_size == 0):  # MLflow would write its tables into it
        ctx.fail(f"{wanted}: no model registered yet (no MLflow store at {db}): run the pipeline first")
    with contextlib.chdir(REPO_ROOT):  # the server runs there: a relative store path means the same file
        problem = serving_problem(uri, name, alias)
    if problem:
        ctx.fail(f"{wanted}: {' '.join(problem.split())}")


def _sqlite_file(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI (relative to the project root, where the server runs), else None."""
    if not uri.startswith("sqlite:///"):
        return None
    path = uri.removeprefix("sqlite:///").split("?", 1)[0]
    return None if path in ("", ":memory:") else REPO_ROOT / path  # an absolute path stays as it is


@app.command(name="eval-options", context_settings=PASS_THROUGH, add_help_option=False)
def eval_options(ctx: typer.Context) -> None:
    """Decoding options scored on the validation split without retraining (see --help)."""
    _script("eval_options.py", ctx.args)


@app.command(name="render-results", context_settings=PASS_THROUGH, add_help_option=False)
def render_results(ctx: typer.Context) -> None:
    """The result tables of the README and docs/results.md, from the metrics files (see --help)."""
    _script("render_results.py", ctx.args)


@app.command(context_settings=PASS_THROUGH, add_help_option=False)
def retrain(ctx: typer.Context) -> None:
    """Champion/challenger retraining: `retrain run` once, `retrain serve` on params' cron (see --help)."""
    _module("flows.retrain", ctx.args)


def main(argv: list[str] | None = None) -> int:
    """``copyseq``: the exit code of the subcommand; a usage error (an unknown subcommand or option, a
    bad value) or a params file that cannot be read is one line, ``copyseq: error: ...``, with exit
    code 2, not click's boxed usage block nor a traceback."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        code = app(args=args or ["--help"], prog_name="copyseq", standalone_mode=False)
    except typer.Abort:
        print("Aborted!", file=sys.stderr)
        return 1
    except typer.TyperException as err:  # typer's own click: UsageError, BadParameter, NoSuchOption, ...
        return _error(err.format_message(), err.exit_code)
    except SettingsError as err:
        return _error(str(err), 2)
    return code if isinstance(code, int) else 0


def _error(message: str, code: int) -> int:
    print(f"copyseq: error: {' '.join(message.split())}", file=sys.stderr)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
