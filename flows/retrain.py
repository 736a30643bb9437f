"""retrain: scheduled retraining with champion/challenger promotion (a Prefect deployment).

One run of ``retrain_flow`` is one :func:`pipeline.retrain.run.retrain` (``params.yaml`` section
``retrain``; the steps and guarantees are documented there and in docs/tracking.md), each step a
Prefect task retried ``retrain.retries`` times, ``retrain.retry_delay_s`` apart.

``python -m flows.retrain serve`` serves the deployment ``retrain/retrain-<task>`` on the cron
schedule from params (needs a Prefect server, see docs/tracking.md); ``python -m flows.retrain run`` runs once.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from pipeline.config.arguments import OneLineParser
from pipeline.config.params import load_params, section
from pipeline.config.schema import check_params_file
from pipeline.config.validation import SettingsError
from pipeline.retrain.run import retrain
from pipeline.retrain.settings import RetrainConfig

PROG = "copyseq retrain"  # how users run this flow (python -m flows.retrain is the same)


def prefect_step(fn: Callable, retries: int, retry_delay_s: float) -> Callable:
    """A retraining step as a Prefect task with the run's retries."""
    return task(fn, cache_policy=NO_CACHE, retries=retries, retry_delay_seconds=retry_delay_s)


@flow(name="retrain")
def retrain_flow(params_path: str | None = None, run_stamp: str | None = None) -> dict:
    """One scheduled run: refresh, train, evaluate both on the frozen test, promote or keep."""
    return retrain(params_path, run_stamp, step=prefect_step)


def check_project(params_path: Path) -> None:
    """``params_path`` is the params.yaml of a project checkout: a run works in the params file's
    directory (``dvc pull``/``dvc repro`` there, ``data/retrain/<task>/`` written there), so a params
    file without the project's dvc.yaml beside it, or of another name than the params.yaml dvc reads,
    is refused before anything is written."""
    if not (params_path.parent / "dvc.yaml").is_file():
        raise SettingsError(
            f"--params {params_path}: not a project's params file (no dvc.yaml beside it); retraining runs dvc "
            "and writes data/retrain/ in the params file's directory: give the params.yaml of a project checkout"
        )
    if params_path.name != "params.yaml":  # dvc repro reads params.yaml: the data and the challenger would disagree
        raise SettingsError(
            f"--params {params_path}: retraining refreshes the data with dvc repro, which reads params.yaml beside "
            f"dvc.yaml, not {params_path.name}; put these settings in that params.yaml (or a checkout of its own)"
        )


def check_prefect_server(url: str) -> None:
    """A Prefect server answers at ``url`` (its ``/health``), else one line naming PREFECT_API_URL,
    rather than the client's connection traceback once the flow starts."""
    import httpx  # Prefect's own HTTP client

    health = url.rstrip("/") + "/health"
    try:
        response = httpx.get(health, timeout=10)
    except (httpx.HTTPError, ValueError) as err:  # refused, timed out, not a URL
        problem = f"{type(err).__name__}: {err}"
    else:
        if response.status_code == 200:
            return
        problem = f"GET {health} answered HTTP {response.status_code}"
    raise SettingsError(
        f"PREFECT_API_URL={url}: no Prefect server answers there ({problem.splitlines()[0]}); start one "
        "(docs/tracking.md, 'Scheduled retraining'; scripts/with_prefect_server.sh does it) or fix the URL"
    )


def main(argv: list[str] | None = None) -> int:
    """``copyseq retrain {serve,run} [--params FILE]``."""
    parser = OneLineParser(
        prog=PROG,
        description=__doc__.split("\n\n")[0],
        epilog="One run, under params.yaml's retrain section: refresh the data (dvc pull if set, dvc repro of "
        "the task's data stages), train a challenger (retrain.mechanism, or the champion's) into data/retrain/"
        "<task>/runs/<stamp>/, score it and the registry's champion on the same frozen validation copy, promote "
        "the challenger only if it wins by more than retrain.margin; each decision is a line of "
        "data/retrain/<task>/decisions.jsonl and an MLflow run. As long as training the row takes "
        "(docs/tracking.md, 'Scheduled retraining').",
    )
    parser.add_argument(
        "command",
        choices=["serve", "run"],
        help="serve: the deployment on its cron schedule (needs a Prefect server); run: once now",
    )
    parser.add_argument("--params", default=None, help="params file (default: the repository's params.yaml)")
    args = parser.parse_args(argv)
    params_path = str(Path(args.params).resolve()) if args.params else None
    try:
        check_params_file(params_path)  # every setting typed and checked first, or one line
        if params_path:
            check_project(Path(params_path))
        if args.command == "serve" and not os.environ.get("PREFECT_API_URL"):
            raise SettingsError(
                "serve needs a running Prefect server: export PREFECT_API_URL=http://127.0.0.1:4200/api "
                "(see docs/tracking.md, 'Scheduled retraining')"
            )
        if os.environ.get("PREFECT_API_URL"):  # run uses it too, when set
            check_prefect_server(os.environ["PREFECT_API_URL"])
    except SettingsError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr, flush=True)
        return 2
    if args.command == "run":
        retrain_flow(params_path)
        return 0
    cfg = RetrainConfig.from_dict(section(load_params(params_path), "retrain"))
    # Prefect's own starting message links its UI, which the project's server runs without (--no-ui)
    print(
        f"serving retrain/{cfg.deployment_name} on cron {cfg.cron!r} (Ctrl-C stops it; a run now: "
        f"prefect deployment run retrain/{cfg.deployment_name})",
        flush=True,
    )
    # Prefect's SIGTERM handler (kill, a container stop) calls its async Runner.stop without awaiting it
    # and exits; serving still pauses the schedule on the way out (tests/flows/test_retrain_serve.py), so
    # the "coroutine 'Runner.astop' was never awaited" warning it leaves tells a user nothing to act on.
    warnings.filterwarnings("ignore", message="coroutine 'Runner.astop' was never awaited", category=RuntimeWarning)
    retrain_flow.serve(
        name=cfg.deployment_name,
        cron=cfg.cron,
        parameters={"params_path": params_path},
        limit=1,
        description=f"retrain {cfg.task}: promote a challenger only if it beats the champion",
        print_starting_message=False,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
