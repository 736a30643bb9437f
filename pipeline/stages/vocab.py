"""vocab@<task>: source and target vocabularies from the train split, then the train and valid splits
id-encoded with them (:mod:`pipeline.vocab.encoded`), so training does no string work per step
(``flows/vocab.py`` runs :func:`run` as a Prefect flow).

For each pretrained backbone a row of the task runs on (``model.backbone``, docs/pretrained.md), the
stage records the backbone's tokenizer instead of counting words: ``backbones/<name>/`` holds the
tokenizer's files, its sha256 and special ids (``backbone.json``), its pieces as ``src.vocab`` /
``tgt.vocab`` and the splits encoded in pieces (:mod:`pipeline.vocab.tokenizer`)."""

from __future__ import annotations

import shutil
from collections.abc import Callable

from pipeline.config.backbones import backbone_vocab_dir, row_backbone
from pipeline.config.params import load_params, project_root
from pipeline.config.paths import TaskPaths
from pipeline.config.tasks import effective_params
from pipeline.config.variants import resolve
from pipeline.vocab.encoded import write_encoded_split
from pipeline.vocab.tokenizer import BackboneTokenizer
from pipeline.vocab.vocabulary import (
    Vocab,
    VocabConfig,
    build_vocab,
    count_split_tokens,
    load_features_vocab,
    save_features_vocab,
)


def build(paths: TaskPaths, side: str, max_size: int | None, min_count: int) -> int:
    """The ``side`` (src or tgt) vocabulary of the task's train split, saved; its size."""
    vocab = build_vocab(count_split_tokens(paths.split("train"), side), max_size=max_size, min_count=min_count)
    vocab.save(paths.vocab / f"{side}.vocab")
    return len(vocab)


def build_features(paths: TaskPaths) -> int:
    """``features.vocab`` of a task with a features column (every tag of its train split); its size, 0
    for a task without one (a stale file removed)."""
    vocab = save_features_vocab(paths.split("train"), paths.vocab)
    return len(vocab) if vocab is not None else 0


def encode(paths: TaskPaths, split: str) -> int:
    """``split`` id-encoded with the task's vocabularies (its features too, when it has them); its row count."""
    src, tgt = Vocab.load(paths.vocab / "src.vocab"), Vocab.load(paths.vocab / "tgt.vocab")
    features = load_features_vocab(paths.vocab)
    return write_encoded_split(paths.split(split), paths.encoded(split), src, tgt, features_vocab=features)["rows"]


def task_backbones(params: dict, task_name: str) -> list[str]:
    """The distinct backbones the task's rows run on (``mechanisms``, variants and task settings applied)."""
    names = []
    for row in params.get("mechanisms") or []:
        row_params = effective_params(params, task_name, row)
        backbone = row_backbone(row_params.get("model"), resolve(row_params, row).mechanism)
        if backbone is not None and backbone not in names:
            names.append(backbone)
    return names


def tokenize(paths: TaskPaths, backbone: str) -> dict:
    """The backbone's tokenizer recorded and the train/valid splits encoded in its pieces; the record."""
    out = backbone_vocab_dir(paths.vocab, backbone)
    tokenizer = BackboneTokenizer.from_backbone(backbone)
    record = tokenizer.save(out)
    for split in ("train", "valid"):
        write_encoded_split(
            paths.split(split), out / "ids" / split, tokenizer.vocab, tokenizer.vocab, transform=tokenizer.piece_table
        )
    return record


def run(task_name: str, params_path: str | None = None, step: Callable = lambda fn: fn) -> dict:
    """The stage; ``step`` wraps its units of work (Prefect tasks in the flow). The vocabulary sizes."""
    raw = load_params(params_path)
    cfg = VocabConfig.from_params(effective_params(raw, task_name))
    paths = TaskPaths(task_name, project_root(params_path))
    sizes = {
        "src": step(build)(paths, "src", cfg.src_max_size, cfg.min_count),
        "tgt": step(build)(paths, "tgt", cfg.tgt_max_size, cfg.min_count),
    }
    features = step(build_features)(paths)
    rows = {split: step(encode)(paths, split) for split in ("train", "valid")}
    print(
        f"{task_name}: source vocabulary {sizes['src']}, target vocabulary {sizes['tgt']}; "
        f"encoded {rows['train']} train and {rows['valid']} valid rows"
        + (f"; {features - 4} feature tags" if features else "")
    )
    backbones = task_backbones(raw, task_name)
    stale = paths.vocab / "backbones"
    if stale.is_dir():  # a backbone no row uses any more leaves nothing behind in the stage's output
        keep = {backbone_vocab_dir(paths.vocab, name).name for name in backbones}
        for old in stale.iterdir():
            if old.name not in keep:
                shutil.rmtree(old)
    for backbone in backbones:
        record = step(tokenize)(paths, backbone)
        print(
            f"{task_name}: backbone {backbone}: its tokenizer's {record['vocab_size']} pieces "
            f"(sha256 {record['tokenizer_sha256'][:12]}) encode the train and valid splits"
        )
    return sizes
