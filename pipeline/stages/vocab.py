"""vocab@<task>: source and target vocabularies from the train split, then the train and valid splits
id-encoded with them (:mod:`pipeline.vocab.encoded`), so training does no string work per step
(``flows/vocab.py`` runs :func:`run` as a Prefect flow).

For each pretrained backbone a row of the task runs on (``model.backbone``, docs/pretrained.md), the
stage records the backbone's tokenizer instead of counting words: ``backbones/<name>/`` holds the
tokenizer's files, its sha256 and special ids (``backbone.json``), its pieces as ``src.vocab`` /
``tgt.vocab`` and the splits encoded in pieces (:mod:`pipeline.vocab.tokenizer`). Every such backbone
is probed first, before any split is read (:mod:`pipeline.vocab.backbone_probe`: a missing directory,
a broken ``config.json``, a model that is no encoder-decoder, a tokenizer that is not the model's):
one line naming the setting that names it (:func:`backbone_setting`).

Last, for each row of the task, ``rows/<row>.json`` records the sha256 of every file of the output
that row reads (:func:`row_files`). A row's train and evaluate stages depend on its record, not on
the whole folder, so the first row on a new backbone (a new ``backbones/<name>/``) reruns that row
alone, not every row of the task."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

from pipeline.config.backbones import backbone_vocab_dir, row_backbone
from pipeline.config.params import load_params, project_root
from pipeline.config.paths import TaskPaths
from pipeline.config.rows import vocab_params
from pipeline.config.tasks import effective_params, preset_overrides, task_settings
from pipeline.config.variants import resolve
from pipeline.io.files import sha256_file, write_json_atomic
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
    return list(backbone_settings(params, task_name))


def backbone_settings(params: dict, task_name: str) -> dict[str, str]:
    """Each distinct backbone the task's rows run on -> the setting that names it for the first of
    those rows (:func:`backbone_setting`), in the order of ``mechanisms``."""
    out: dict[str, str] = {}
    for row in params.get("mechanisms") or []:
        row_params = effective_params(params, task_name, row)
        backbone = row_backbone(row_params.get("model"), resolve(row_params, row).mechanism)
        if backbone is not None and backbone not in out:
            out[backbone] = backbone_setting(params, task_name, row)
    return out


def backbone_setting(params: dict, task_name: str, row: str) -> str:
    """Where params.yaml sets the backbone of ``row``, as a dotted path (``model.backbone``,
    ``variants.<row>.model.backbone``, ``task_settings.<task>.presets.<preset>.mechanisms.<row>.model.backbone``
    ...): the last of the layers :func:`~pipeline.config.tasks.effective_params` merges that sets the key
    :func:`~pipeline.config.backbones.row_backbone` reads (``model.<base>.backbone`` before ``model.backbone``)."""
    variant = resolve(params, row)
    base = variant.mechanism
    settings, preset = task_settings(params, task_name), preset_overrides(params, task_name)
    own, chosen = f"task_settings.{task_name}", f"task_settings.{task_name}.presets.{params.get('preset')}"

    def entry(layer: Mapping, name: str) -> Mapping:
        return ((layer.get("mechanisms") or {}).get(name)) or {}

    layers = [("", params), (f"{own}.", settings), (f"{chosen}.", preset)]
    layers += [
        (f"{own}.mechanisms.{base}.", entry(settings, base)),
        (f"{chosen}.mechanisms.{base}.", entry(preset, base)),
    ]
    if variant.is_variant:
        layers += [(f"variants.{row}.", variant.overrides)]
        layers += [
            (f"{own}.mechanisms.{row}.", entry(settings, row)),
            (f"{chosen}.mechanisms.{row}.", entry(preset, row)),
        ]
    for keys in ((base, "backbone"), ("backbone",)):
        where, value = None, None
        for prefix, layer in layers:
            section = layer.get("model")
            for key in keys[:-1]:
                section = section.get(key) if isinstance(section, Mapping) else None
            if isinstance(section, Mapping) and keys[-1] in section:
                where, value = f"{prefix}model.{'.'.join(keys)}", section[keys[-1]]
        if value is not None:
            return where
    return "model.backbone"


def probe(backbones: Mapping[str, str]) -> dict[str, BackboneTokenizer]:
    """Each backbone (name -> the setting naming it) probed and its tokenizer loaded, before any work:
    a backbone that cannot work is a ``SettingsError`` naming the setting."""
    return {name: BackboneTokenizer.from_backbone(name, setting) for name, setting in backbones.items()}


def tokenize(paths: TaskPaths, backbone: str, tokenizer: BackboneTokenizer | None = None) -> dict:
    """The backbone's tokenizer (``tokenizer``: already loaded, by :func:`probe`) recorded and the
    train/valid splits encoded in its pieces; the record."""
    out = backbone_vocab_dir(paths.vocab, backbone)
    tokenizer = tokenizer or BackboneTokenizer.from_backbone(backbone)
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
    tokenizers = probe(backbone_settings(raw, task_name))  # every backbone checked before any split is read
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
    stale = paths.vocab / "backbones"
    if stale.is_dir():  # a backbone no row uses any more leaves nothing behind in the stage's output
        keep = {backbone_vocab_dir(paths.vocab, name).name for name in tokenizers}
        for old in stale.iterdir():
            if old.name not in keep:
                shutil.rmtree(old)
    for backbone, tokenizer in tokenizers.items():
        record = step(tokenize)(paths, backbone, tokenizer)
        print(
            f"{task_name}: backbone {backbone}: its tokenizer's {record['vocab_size']} pieces "
            f"(sha256 {record['tokenizer_sha256'][:12]}) encode the train and valid splits"
        )
    step(record_rows)(paths, vocab_params(raw, task_name)["backbones"])
    return sizes


ROWS_DIR = "rows"  # data/vocab/<task>/rows/<row>.json: what each row reads (dvc.yaml: train, evaluate deps)


def row_files(vocab_dir: Path, backbone: str | None) -> list[Path]:
    """The files of the stage's output that a row reads: the task's word vocabularies and id-encoded
    splits (every file outside ``backbones/`` and ``rows/``: a row on a backbone also reads the word
    vocabularies, for the copy analysis and the features' tags) and, for a row on a backbone, that
    backbone's folder; in name order."""
    own = sorted(
        p
        for p in vocab_dir.rglob("*")
        if p.is_file() and p.relative_to(vocab_dir).parts[0] not in ("backbones", ROWS_DIR)
    )
    if backbone is None:
        return own
    return own + sorted(p for p in backbone_vocab_dir(vocab_dir, backbone).rglob("*") if p.is_file())


def record_rows(paths: TaskPaths, backbones: Mapping[str, str | None]) -> list[Path]:
    """``rows/<row>.json`` for each row (``backbones``: row -> the backbone it runs on, None for the
    word vocabulary): the backbone and each file's sha256 (:func:`row_files`), so its bytes change
    exactly when what the row reads does. A record of a row no longer listed is removed."""
    hashes: dict[Path, str] = {}  # a file the rows share is read once
    listed: dict[str | None, list[Path]] = {}  # the folder is walked once per backbone, not per row
    written = []
    for row, backbone in backbones.items():
        if backbone not in listed:
            listed[backbone] = row_files(paths.vocab, backbone)
        files = listed[backbone]
        for path in files:
            if path not in hashes:
                hashes[path] = sha256_file(path)
        record = {"backbone": backbone, "files": {p.relative_to(paths.vocab).as_posix(): hashes[p] for p in files}}
        target = paths.vocab / ROWS_DIR / f"{row}.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(target, record)
        written.append(target)
    for old in sorted((paths.vocab / ROWS_DIR).glob("*")):
        if old not in written:
            shutil.rmtree(old) if old.is_dir() else old.unlink()
    return written
