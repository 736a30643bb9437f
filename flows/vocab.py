"""vocab@<task>: the vocabularies and the id-encoded train/valid splits, as a Prefect flow around
:func:`pipeline.stages.vocab.run`."""

from __future__ import annotations

from prefect import flow

import flows  # cli, as_task (the package itself set quiet, local tool defaults before Prefect loaded)
from pipeline.stages import vocab


@flow(name="vocab")
def vocab_flow(task_name: str, params_path: str | None = None) -> dict:
    return vocab.run(task_name, params_path, step=flows.as_task)


if __name__ == "__main__":
    flows.cli(vocab_flow, __doc__, "task")
