"""Trained-model files: tensors and plain data only, loaded without running anything from them.

``model.pt`` (written by pipeline.training.loop, read by evaluate, serving, predict and retraining) holds

  model         the state dict (tensors)
  model_config  the ModelConfig fields it was built with
  mechanism     its mechanism name (the base mechanism that models.registry builds)
  variant       a variant's row name (params.yaml ``variants``; only when it is one): e.g. copynet_transformer
  vocab         {"src": {"size", "sha256"}, "tgt": {"size", "sha256"}} of the vocabularies it was trained with
  step, epoch, valid_loss

and nothing that depends on the run (no run id, no time): the same training writes the same bytes,
so DVC sees an unchanged output after a rerun. Which MLflow run wrote it is recorded beside it, in
the train state's run.json, with the file's sha256 (``pipeline.io.files.sha256_file``), which the evaluate stage checks.

Every load goes through ``torch.load(weights_only=True)``: a file that needs arbitrary objects
unpickled (a crafted checkpoint whose loading would run code) is refused before anything in it
runs, with a ``CheckpointError`` naming the file. Loading a model checks its mechanism (or variant)
and, when the caller gives them, the vocabularies: another mechanism, vocabulary size or vocabulary
order is an error naming both, never a silently wrong model. A variant's model is rebuilt from the
file alone (its base and the ModelConfig it was trained with), without params.yaml.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from models.config import ModelConfig
from models.registry import build_model
from pipeline.io.files import atomic_path, sha256_file
from pipeline.vocab.vocabulary import Vocab


def save_atomic(obj, path: str | Path) -> None:
    """torch.save to a temp file in the same directory, then rename: never a half-written file.
    Saved through an open file, not a path: given a path, torch names the archive inside the file
    after it (the random temp name), so the same tensors would give other bytes every time."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        torch.save(obj, f)


class CheckpointError(ValueError):
    """A checkpoint that cannot be used as asked: refused, corrupt, or made for another model."""


def vocab_identity(vocab: Vocab) -> dict:
    """Size and content hash of a vocabulary (its tokens in id order)."""
    return {"size": len(vocab), "sha256": hashlib.sha256("\n".join(vocab.itos).encode("utf-8")).hexdigest()}


def load_file(path: str | Path, device: torch.device | str = "cpu") -> dict:
    """A checkpoint as plain data (tensors, dicts, lists, numbers, strings), or CheckpointError."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
    try:
        ckpt = torch.load(path, map_location=device, weights_only=True)
    except Exception as err:  # noqa: BLE001 - UnpicklingError, a truncated zip, not a torch file ...
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(
            f"{path}: refused: not a checkpoint of tensors and plain data ({type(err).__name__}: {first}). "
            "Checkpoints are loaded with torch.load(weights_only=True), so nothing in such a file is run."
        ) from None
    if not isinstance(ckpt, dict) or "model" not in ckpt:
        raise CheckpointError(f"{path}: not a model checkpoint (no 'model' state dict)")
    return ckpt


def check_vocabularies(path: Path, ckpt: dict, vocabs: tuple[Vocab, Vocab]) -> None:
    """The vocabularies given for ``ckpt`` are the ones it was trained with (size and order)."""
    trained = ckpt.get("vocab")
    if not trained:
        return  # a checkpoint of an older format: the state dict's shapes are still checked
    for side, vocab in zip(("src", "tgt"), vocabs):
        given = vocab_identity(vocab)
        if given != trained[side]:
            what = "size" if given["size"] != trained[side]["size"] else "order or words (same size)"
            raise CheckpointError(
                f"{path} was trained with a {side} vocabulary of {trained[side]['size']} words "
                f"(sha256 {trained[side]['sha256'][:12]}), the given one has {given['size']} "
                f"(sha256 {given['sha256'][:12]}): they differ in {what}; use the vocabularies of its training run"
            )


def load_model(
    path: str | Path,
    mechanism: str,
    device: torch.device | str = "cpu",
    vocabs: tuple[Vocab, Vocab] | None = None,
    sha256: str | None = None,
):
    """Rebuild a model from model.pt (weights + the config it was trained with), in eval mode.
    ``vocabs``: the (source, target) vocabularies it will be used with, checked; ``sha256``: the
    file's content hash as the training run that wrote it recorded it (the evaluate stage registers
    the model under that run, so the file must be that run's). ``mechanism``: the row it was trained as,
    a mechanism or a variant's name (``copynet_transformer``: the file records both). Returns
    ``(model, checkpoint dict)``."""
    path = Path(path)
    if sha256 is not None and sha256_file(path) != sha256:
        raise CheckpointError(
            f"{path} is not the model.pt its training run wrote (sha256 {sha256_file(path)[:12]}, the run recorded "
            f"{sha256[:12]} in run.json): it is another run's model (a training that failed leaves no model of its "
            "own); rerun training"
        )
    ckpt = load_file(path, device)
    base = ckpt.get("mechanism") or mechanism  # a file of an older format: as the caller says
    trained_as = ckpt.get("variant") or ckpt.get("mechanism")
    if trained_as is not None and trained_as != mechanism:
        what = f"{trained_as} (a variant of {base})" if ckpt.get("variant") else trained_as
        raise CheckpointError(f"{path} is a {what} model, not {mechanism}")
    if vocabs is not None:
        check_vocabularies(path, ckpt, vocabs)
    try:
        model = build_model(base, ModelConfig(**ckpt["model_config"]))
        model.load_state_dict(ckpt["model"])
    except (TypeError, KeyError, RuntimeError) as err:
        first = str(err).strip().splitlines()[0]
        raise CheckpointError(f"{path}: does not fit a {base} model of its recorded config ({first})") from None
    return model.to(device).eval(), ckpt
