"""vocab@<task>: source and target vocabularies from the train split, then the train and valid
splits id-encoded with them (pipeline.vocab.encoded), so training does no string work per step."""

from __future__ import annotations

from prefect import flow, task

import flows  # cli (the package itself set quiet, local tool defaults before Prefect loaded)
from pipeline.config.params import load_params, project_root, section
from pipeline.config.paths import TaskPaths
from pipeline.config.tasks import effective_params
from pipeline.vocab.encoded import write_encoded_split
from pipeline.vocab.vocabulary import Vocab, build_vocab, count_split_tokens


@task
def build(paths: TaskPaths, side: str, max_size: int | None, min_count: int) -> int:
    vocab = build_vocab(count_split_tokens(paths.split("train"), side), max_size=max_size, min_count=min_count)
    vocab.save(paths.vocab / f"{side}.vocab")
    return len(vocab)


@task
def encode(paths: TaskPaths, split: str) -> int:
    src, tgt = Vocab.load(paths.vocab / "src.vocab"), Vocab.load(paths.vocab / "tgt.vocab")
    return write_encoded_split(paths.split(split), paths.encoded(split), src, tgt)["rows"]


@flow(name="vocab")
def vocab_flow(task_name: str, params_path: str | None = None) -> dict:
    cfg = section(effective_params(load_params(params_path), task_name), "vocab")
    paths = TaskPaths(task_name, project_root(params_path))
    sizes = {
        "src": build(paths, "src", cfg.get("src_max_size"), cfg.get("min_count", 1)),
        "tgt": build(paths, "tgt", cfg.get("tgt_max_size"), cfg.get("min_count", 1)),
    }
    rows = {split: encode(paths, split) for split in ("train", "valid")}
    print(
        f"{task_name}: source vocabulary {sizes['src']}, target vocabulary {sizes['tgt']}; "
        f"encoded {rows['train']} train and {rows['valid']} valid rows"
    )
    return sizes


if __name__ == "__main__":
    flows.cli(vocab_flow, __doc__, "task")
