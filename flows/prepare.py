"""prepare@<task>: make the task's Arrow shards (train/valid/test[/test_unseen] + manifests)."""
from __future__ import annotations

from pathlib import Path

import flows  # quiet, local settings before Prefect loads; cli
from prefect import flow, task

from pipeline.corpora import copynet_rules
from pipeline.params import load_params, project_root, section
from pipeline.paths import TaskPaths

# Generators and readers by the name a task's `prepare.<task>.generator` gives.
GENERATORS = {"copynet_rules": (copynet_rules.RulesConfig, copynet_rules.write_splits)}


@task(retries=1)
def write_shards(kind: str, settings: dict, out_root: str) -> dict:
    config_cls, write = GENERATORS[kind]
    return write(config_cls.from_dict(settings), Path(out_root))


@flow(name="prepare")
def prepare_flow(task_name: str, params_path: str | None = None) -> dict:
    settings = dict(section(load_params(params_path), "prepare", task_name))
    kind = settings.pop("generator", None)
    if kind not in GENERATORS:
        raise ValueError(f"prepare.{task_name}.generator must be one of {sorted(GENERATORS)}, got {kind!r}")
    manifests = write_shards(kind, settings, str(TaskPaths(task_name, project_root(params_path)).shards))
    for split, m in manifests.items():
        print(f"{task_name}/{split}: {m['rows']} rows, {m['rows_quarantined']} quarantined")
    return manifests


if __name__ == "__main__":
    flows.cli(prepare_flow, __doc__, "task")
