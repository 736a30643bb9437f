"""vocab@<task>: source and target vocabularies from the train split, then the train and valid splits
id-encoded with them (:mod:`pipeline.vocab.encoded`), so training does no string work per step
(``flows/vocab.py`` runs :func:`run` as a Prefect flow)."""

from __future__ import annotations

from collections.abc import Callable

from pipeline.config.params import load_params, project_root
from pipeline.config.paths import TaskPaths
from pipeline.config.tasks import effective_params
from pipeline.vocab.encoded import write_encoded_split
from pipeline.vocab.vocabulary import Vocab, VocabConfig, build_vocab, count_split_tokens


def build(paths: TaskPaths, side: str, max_size: int | None, min_count: int) -> int:
    """The ``side`` (src or tgt) vocabulary of the task's train split, saved; its size."""
    vocab = build_vocab(count_split_tokens(paths.split("train"), side), max_size=max_size, min_count=min_count)
    vocab.save(paths.vocab / f"{side}.vocab")
    return len(vocab)


def encode(paths: TaskPaths, split: str) -> int:
    """``split`` id-encoded with the task's vocabularies; its row count."""
    src, tgt = Vocab.load(paths.vocab / "src.vocab"), Vocab.load(paths.vocab / "tgt.vocab")
    return write_encoded_split(paths.split(split), paths.encoded(split), src, tgt)["rows"]


def run(task_name: str, params_path: str | None = None, step: Callable = lambda fn: fn) -> dict:
    """The stage; ``step`` wraps its units of work (Prefect tasks in the flow). The vocabulary sizes."""
    cfg = VocabConfig.from_params(effective_params(load_params(params_path), task_name))
    paths = TaskPaths(task_name, project_root(params_path))
    sizes = {
        "src": step(build)(paths, "src", cfg.src_max_size, cfg.min_count),
        "tgt": step(build)(paths, "tgt", cfg.tgt_max_size, cfg.min_count),
    }
    rows = {split: step(encode)(paths, split) for split in ("train", "valid")}
    print(
        f"{task_name}: source vocabulary {sizes['src']}, target vocabulary {sizes['tgt']}; "
        f"encoded {rows['train']} train and {rows['valid']} valid rows"
    )
    return sizes
