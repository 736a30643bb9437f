"""train@<task>-<mechanism>: train one mechanism on one task, as a Prefect flow around
:func:`pipeline.stages.train.run` (learning curve to MLflow and DVC plots; torchrun for several
processes: see there)."""

from __future__ import annotations

from prefect import flow

import flows  # cli, as_task (the package itself set quiet, local tool defaults before Prefect loaded)
from pipeline.stages import train


@flow(name="train")
def train_flow(task_name: str, mechanism: str, params_path: str | None = None) -> dict:
    return train.run(task_name, mechanism, params_path, step=flows.as_task)


if __name__ == "__main__":
    flows.cli(train_flow, __doc__, "task", "mechanism")
