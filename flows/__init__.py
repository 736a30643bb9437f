"""Prefect flows, one per DVC stage. Importing this package makes every tool quiet and local, and a
``python -m flows.<stage>`` process pins the CPU math libraries (:mod:`pipeline.runtime.math_pins`).

Defaults only (``setdefault``): a user's own PREFECT_API_URL, PREFECT_HOME or
MLFLOW_TRACKING_URI wins. Without PREFECT_API_URL each flow run starts Prefect's temporary
local server on 127.0.0.1 (10-25 s); ``scripts/with_prefect_server.sh`` starts one server for
a whole ``dvc repro`` instead.
"""

import os
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent

for _key, _value in {
    "PREFECT_HOME": str(_ROOT / ".prefect"),
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_SERVER_UI_ENABLED": "false",
    "PREFECT_LOGGING_LEVEL": "WARNING",
    "PREFECT_CLOUD_ENABLE_ORCHESTRATION_TELEMETRY": "false",
    "PREFECT_TELEMETRY_ENABLE_RESOURCE_METRICS": "false",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
    "DO_NOT_TRACK": "1",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
    "DVC_NO_ANALYTICS": "1",
    # PyTorch's own switch: 2 MB-aligned, huge-page-backed CPU tensors. Output layers over large
    # vocabularies allocate (B*T, V) tensors above glibc's mmap threshold, which otherwise page-fault
    # afresh on every step (benchmarks/bench_mechanisms.py measures the difference). Read at the
    # first allocation, hence here, before torch is imported.
    "THP_MEM_ALLOC_ENABLE": "1",
}.items():
    os.environ.setdefault(_key, _value)

# A `python -m flows.<stage>` process: pin the CPU math libraries before any flow imports torch, so
# its results are the same bits on every x86-64 machine (pipeline.runtime.math_pins; train/evaluate.deterministic).
from pipeline.runtime.math_pins import pin_entry_point  # noqa: E402

pin_entry_point()

import logging  # noqa: E402
import sys  # noqa: E402

from prefect import task  # noqa: E402  (after the quiet, local defaults above)
from prefect.cache_policies import NO_CACHE  # noqa: E402

from pipeline.config.schema import check_params_file  # noqa: E402
from pipeline.config.validation import InputError  # noqa: E402

# What the user gave is wrong: a setting or a data file (InputError), or an input file that is not
# there (every reader names the path it looked for). The message says all; no traceback.
USER_ERRORS = (InputError, FileNotFoundError)


class _QuietInputErrors(logging.Filter):
    """Drops Prefect's record of a flow or task run failing on one of :data:`USER_ERRORS` (about 40
    lines of traceback around a message that says all): :func:`cli` prints that message, once, last.
    Any other failure keeps its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, USER_ERRORS)


for _name in ("prefect.flow_runs", "prefect.task_runs"):
    logging.getLogger(_name).addFilter(_QuietInputErrors())


def as_task(fn):
    """A stage's unit of work (``pipeline.stages``: ``step``) as a Prefect task: retried and shown in
    the flow run; never cached (the steps take models, paths and settings)."""
    return task(fn, cache_policy=NO_CACHE)


def cli(flow_fn, doc: str | None, *names: str):
    """`python -m flows.<stage> --task T [--mechanism M] [--params FILE]`: run one stage's flow."""
    import argparse

    parser = argparse.ArgumentParser(description=doc)
    for name in names:
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--params", default=None, help="params file (default: the repository's params.yaml)")
    args = parser.parse_args()
    try:
        check_params_file(args.params)  # every setting typed and checked before the flow, or one line
        return flow_fn(*(getattr(args, name) for name in names), args.params)
    except USER_ERRORS as err:  # bad settings or data, a missing input: the message alone, last, exit 2
        print(f"error: {err}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
