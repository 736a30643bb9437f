"""vocab@<task>: source and target vocabularies from the train split."""
from __future__ import annotations

import flows  # quiet, local settings before Prefect loads; cli
from prefect import flow, task

from pipeline.params import load_params, project_root, section
from pipeline.paths import TaskPaths
from pipeline.shards import read_split
from pipeline.tasks import effective_params
from pipeline.vocab import build_vocab, count_tokens


@task
def build(paths: TaskPaths, side: str, max_size: int | None, min_count: int) -> int:
    table = read_split(paths.split("train"))
    vocab = build_vocab(count_tokens(table, side), max_size=max_size, min_count=min_count)
    vocab.save(paths.vocab / f"{side}.vocab")
    return len(vocab)


@flow(name="vocab")
def vocab_flow(task_name: str, params_path: str | None = None) -> dict:
    cfg = section(effective_params(load_params(params_path), task_name), "vocab")
    paths = TaskPaths(task_name, project_root(params_path))
    sizes = {
        "src": build(paths, "src", cfg.get("src_max_size"), cfg.get("min_count", 1)),
        "tgt": build(paths, "tgt", cfg.get("tgt_max_size"), cfg.get("min_count", 1)),
    }
    print(f"{task_name}: source vocabulary {sizes['src']}, target vocabulary {sizes['tgt']}")
    return sizes


if __name__ == "__main__":
    flows.cli(vocab_flow, __doc__, "task")
