"""compare: the papers'-shape comparison of every task, its chart and the registry's champion, as a
Prefect flow around :func:`pipeline.stages.compare.run`."""

from __future__ import annotations

from prefect import flow

import flows  # cli, as_task (the package itself set quiet, local tool defaults before Prefect loaded)
from pipeline.stages import compare


@flow(name="compare")
def compare_flow(params_path: str | None = None) -> dict:
    return compare.run(params_path, step=flows.as_task)


if __name__ == "__main__":
    flows.cli(compare_flow, __doc__)
