"""evaluate@<task>-<mechanism>: beam search on the test splits, metrics, heat map, the model registered,
as a Prefect flow around :func:`pipeline.stages.evaluate.run`."""

from __future__ import annotations

from prefect import flow

import flows  # cli, as_task (the package itself set quiet, local tool defaults before Prefect loaded)
from pipeline.stages import evaluate


@flow(name="evaluate")
def evaluate_flow(task_name: str, mechanism: str, params_path: str | None = None) -> dict:
    return evaluate.run(task_name, mechanism, params_path, step=flows.as_task)


if __name__ == "__main__":
    flows.cli(evaluate_flow, __doc__, "task", "mechanism")
