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

import os
import subprocess
import sys
from typing import Annotated

import typer

from pipeline.config.params import REPO_ROOT, load_params
from pipeline.config.tasks import task_names

app = typer.Typer(
    name="copyseq",
    help="Copy and pointer mechanisms for sequence-to-sequence learning: prepare, train, compare, serve.",
    no_args_is_help=True,
    add_completion=False,
)
PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}


def _call(cmd: list[str]) -> None:
    """Run ``cmd`` in the project root and leave with its exit code."""
    raise typer.Exit(subprocess.call(cmd, cwd=REPO_ROOT))


def _module(module: str, args: list[str]) -> None:
    _call([sys.executable, "-m", module, *args])


def _script(name: str, args: list[str]) -> None:
    _call([sys.executable, str(REPO_ROOT / "scripts" / name), *args])


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
    targets = run_targets(params, task, mechanism or []) + (["compare"] if compare else [])
    if dry and not (REPO_ROOT / "data" / "shards" / task).is_dir():
        # `dvc repro --dry` hashes the vocab and train stages' deps inside prepare's output, which
        # does not exist before prepare has run (DVC then fails): every stage of the task would run.
        rows = mechanism or list(params.get("mechanisms") or [])
        stages = ["settings", f"prepare@{task}", f"vocab@{task}"]
        stages += [f"{stage}@{task}-{row}" for row in rows for stage in ("train", "evaluate")]
        print(f"prepare has not run for {task} yet, so every stage of it would run:")
        print("\n".join(f"Running stage '{stage}'" for stage in stages + (["compare"] if compare else [])))
        raise typer.Exit(0)
    if dry:
        _call([sys.executable, "-m", "dvc", "repro", "--dry", *targets])  # this environment's dvc, activated or not
    _call([str(REPO_ROOT / "scripts" / "with_prefect_server.sh"), "dvc", "repro", *targets])


@app.command(context_settings=PASS_THROUGH, add_help_option=False)
def repro(ctx: typer.Context) -> None:
    """The whole pipeline: `dvc repro [ARGS]` with one local Prefect server (`--dry`: none needed)."""
    if "--dry" in ctx.args:
        unprepared = [t for t in task_names(load_params()) if not (REPO_ROOT / "data" / "shards" / t).is_dir()]
        if unprepared:
            # `dvc repro --dry` hashes the vocab and train stages' deps inside prepare's output, which
            # does not exist before prepare has run (DVC then fails); `dvc status` names those stages.
            print(f"prepare has not run for {', '.join(unprepared)} yet; the stages out of date (dvc status):")
            _call([sys.executable, "-m", "dvc", "status", *(a for a in ctx.args if not a.startswith("-"))])
        _call([sys.executable, "-m", "dvc", "repro", *ctx.args])
    _call([str(REPO_ROOT / "scripts" / "with_prefect_server.sh"), "dvc", "repro", *ctx.args])


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
    task: Annotated[str, typer.Argument(help="the task whose registered champion is served")],
    port: Annotated[int, typer.Option(help="port on 127.0.0.1")] = 5001,
    alias: Annotated[str, typer.Option(help="the registry alias (or a version number)")] = "champion",
) -> None:
    """The registered model of a task over HTTP on 127.0.0.1 (`mlflow models serve`, no conda/venv)."""
    prefix = (load_params().get("tracking") or {}).get("registry_prefix") or ""
    uri = f"models:/{prefix}{task}/{alias}" if alias.isdigit() else f"models:/{prefix}{task}@{alias}"
    os.environ.setdefault("MLFLOW_TRACKING_URI", f"sqlite:///{REPO_ROOT / 'mlflow.db'}")
    _call(
        [
            sys.executable,
            "-m",
            "mlflow",
            "models",
            "serve",
            "-m",
            uri,
            "--host",
            "127.0.0.1",
            "-p",
            str(port),
            "--env-manager",
            "local",
        ]
    )


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


def main() -> None:
    app()


if __name__ == "__main__":
    main()
