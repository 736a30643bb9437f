"""The features vocabulary (``features.vocab``, every tag of the train split) and the ``features`` tensor
(B, F) a batch carries, the same from the id-encoded splits (training) and from shard rows (decoding)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import torch

from models.batch import Batch
from pipeline.io.shards import ShardWriter, make_schema, read_manifest, read_split
from pipeline.vocab.batching import batch_from_rows
from pipeline.vocab.encoded import EncodedSplit, write_encoded_split
from pipeline.vocab.vocabulary import (
    FEATURES_VOCAB,
    PAD,
    SPECIALS,
    UNK,
    Vocab,
    build_vocab,
    count_split_tokens,
    load_features_vocab,
    save_features_vocab,
)
from tests.helpers import shard_row

SCHEMA = make_schema([pa.field("features", pa.list_(pa.string()))])
TRAIN = [
    shard_row("t0", "w a l k", "w a l k e d", features=["V", "PST"]),
    shard_row("t1", "w a l k", "w a l k s", features=["V", "PRS", "3", "SG"]),
    shard_row("t2", "g o", "g o", features=[]),
    shard_row("t3", "s i n g", "s a n g", features=["V", "PST"]),
]
VALID = [shard_row("v0", "t a l k", "t a l k e d", features=["V", "PST", "NEW"])]  # NEW: not in train


def write(root, splits: dict[str, list[dict]], schema: pa.Schema = SCHEMA) -> None:
    for split, rows in splits.items():
        with ShardWriter(root / "shards" / split, schema, rows_per_part=2) as writer:
            writer.write(rows)


@pytest.fixture
def task(tmp_path):
    write(tmp_path, {"train": TRAIN, "valid": VALID})
    vocabs = [build_vocab(count_split_tokens(tmp_path / "shards" / "train", side)) for side in ("src", "tgt")]
    return tmp_path, *vocabs


def test_the_features_vocabulary_is_every_train_tag_in_the_vocabulary_format(task):
    root, _, _ = task
    vocab = save_features_vocab(root / "shards" / "train", root / "vocab")
    assert vocab.itos == [*SPECIALS, "V", "PST", "3", "PRS", "SG"]  # by count, then by string
    assert vocab.counts[4:] == [3, 2, 1, 1, 1]
    assert (root / "vocab" / FEATURES_VOCAB).read_text().startswith("<pad>\t0\n<unk>\t0\n<s>\t0\n</s>\t0\nV\t3\n")
    assert load_features_vocab(root / "vocab") == vocab

    write(root / "plain", {"train": [shard_row("p", "a", "b")]}, make_schema())  # a task without features
    assert save_features_vocab(root / "plain" / "shards" / "train", root / "vocab") is None
    assert not (root / "vocab" / FEATURES_VOCAB).exists()  # the stale file is gone
    assert load_features_vocab(root / "vocab") is None


def test_encoded_splits_and_shard_rows_give_the_same_features_tensor(task):
    root, src, tgt = task
    features = save_features_vocab(root / "shards" / "train", root / "vocab")
    for split in ("train", "valid"):
        manifest = write_encoded_split(root / "shards" / split, root / "ids" / split, src, tgt, features_vocab=features)
        assert manifest["params"]["features_vocab"] == len(features)
    encoded = EncodedSplit(root / "ids" / "train", len(tgt))
    batch = encoded.batch(np.array([1, 2, 0]))
    ids = features.stoi
    assert torch.equal(
        batch.features,
        torch.tensor([[ids["V"], ids["PRS"], ids["3"], ids["SG"]], [PAD] * 4, [ids["V"], ids["PST"], PAD, PAD]]),
    )  # (B, F): F the longest row's tags, <pad> after, an example without tags all <pad>
    table = read_split(root / "shards" / "train")
    from_rows = batch_from_rows(table, [1, 2, 0], src, tgt, features_vocab=features)
    assert torch.equal(from_rows.features, batch.features)

    valid = EncodedSplit(root / "ids" / "valid", len(tgt)).batch(np.array([0]))
    assert valid.features.tolist() == [[ids["V"], ids["PST"], UNK]]  # a tag train never had: <unk>


def test_the_features_tensor_moves_and_pins_with_the_batch(task, monkeypatch):
    """``features`` is one of the tensors ``Batch.to`` and ``Batch.pin_memory`` map (``Batch.TENSORS``):
    a field left out would be carried over as it is (``dataclasses.replace``), on the host, where the
    model on a GPU would fail on it, or unpinned. ``to("meta")`` moves every mapped tensor with no
    accelerator; ``pin_memory`` is checked with ``Tensor.pin_memory`` recorded (pinning needs CUDA),
    and for real where CUDA is present."""
    root, src, tgt = task
    features = save_features_vocab(root / "shards" / "train", root / "vocab")
    write_encoded_split(root / "shards" / "train", root / "ids" / "train", src, tgt, features_vocab=features)
    batch = EncodedSplit(root / "ids" / "train", len(tgt)).batch(np.array([1, 2, 0]))
    assert "features" in Batch.TENSORS
    moved = batch.to("meta")
    assert moved.features.device.type == "meta" and moved.features.shape == batch.features.shape == (3, 4)
    assert moved.src.device.type == "meta"  # (as every other tensor)
    copied = batch._map(lambda t: t.clone())  # what .to / .pin_memory build on: new tensors, same values
    assert copied.features is not batch.features and torch.equal(copied.features, batch.features)

    pinned: list[torch.Tensor] = []

    def pin(t: torch.Tensor) -> torch.Tensor:
        pinned.append(t.clone())
        return pinned[-1]

    with monkeypatch.context() as m:
        m.setattr(torch.Tensor, "pin_memory", pin)
        out = batch.pin_memory()
    assert any(out.features is p for p in pinned) and torch.equal(out.features, batch.features)
    if torch.cuda.is_available():
        assert batch.pin_memory().features.is_pinned()


def test_a_features_column_and_a_features_vocabulary_go_together(task):
    root, src, tgt = task
    with pytest.raises(ValueError, match=r"the shards have a features column: .*features\.vocab"):
        write_encoded_split(root / "shards" / "train", root / "ids" / "train", src, tgt)
    with pytest.raises(ValueError, match="the rows have a features column"):
        batch_from_rows(read_split(root / "shards" / "train"), [0], src, tgt)

    write(root / "plain", {"train": [shard_row("p", "a", "b")]}, make_schema())
    features = Vocab([*SPECIALS, "V"], [0, 0, 0, 0, 1])
    with pytest.raises(ValueError, match="the shards have no features column"):
        write_encoded_split(root / "plain/shards/train", root / "plain/ids", src, tgt, features_vocab=features)
    write_encoded_split(root / "plain/shards/train", root / "plain/ids", src, tgt)  # as before features existed
    assert "features_vocab" not in read_manifest(root / "plain/ids")["params"]
    plain = EncodedSplit(root / "plain/ids", len(tgt)).batch(np.array([0]))
    assert plain.features is None
    # (a part whose sources hold no word outside the target vocabulary, with a target word outside it:
    # that word is <unk>; encoding such a part once failed on an empty index)
    assert plain.tgt_out[0, 0].item() == UNK
