"""The rarest-word task generator (Pointer Softmax section 5.1)."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from pipeline.data.corpora.rarest_word import (
    SCHEMA,
    SPLITS,
    Config,
    annotate,
    fixed_split,
    rank,
    sample_examples,
    unigram,
    vocabulary,
    write_splits,
)
from pipeline.io.shards import read_manifest, read_split
from pipeline.vocab.batching import batch_from_rows
from pipeline.vocab.vocabulary import SPECIALS

SMALL = Config(train_size=300, valid_size=50, test_size=40, seed=7)


def test_defaults_are_the_papers() -> None:
    cfg = Config()
    assert (cfg.vocab_size, cfg.seq_len, cfg.n_pointer, cfg.shortlist_words) == (600, 7, 60, 540)


def test_config_is_checked() -> None:
    with pytest.raises(ValueError, match="unknown"):
        Config.from_dict({"vocab": 3})
    for bad in ({"ratio": 1.0}, {"n_pointer": 600}, {"seq_len": 0}, {"seq_len": 2.5}, {"seed": True}):
        with pytest.raises(ValueError):
            Config(**bad)


def test_unigram_is_a_truncated_geometric_distribution() -> None:
    cfg = Config(vocab_size=5, ratio=0.5, n_pointer=1)
    p = unigram(cfg)
    # (1 - q) q^k / (1 - q^5) with q = 1/2: 16, 8, 4, 2, 1 over 31.
    assert p == pytest.approx([16 / 31, 8 / 31, 4 / 31, 2 / 31, 1 / 31], abs=1e-12)
    p = unigram(Config())
    assert sum(p) == pytest.approx(1.0, abs=1e-12)
    assert all(b / a == pytest.approx(0.995) for a, b in zip(p, p[1:]))


def test_samples_follow_the_unigram_distribution() -> None:
    cfg = Config()
    rows = sample_examples(cfg, random.Random(0), 4000)
    counts = Counter(rank(t) for r in rows for t in r["src"])
    n = 4000 * 7
    p = unigram(cfg)
    # Mass of rank bands (100 words each) within 4 standard deviations of the binomial count.
    for lo in range(0, 600, 100):
        mass = sum(p[lo : lo + 100])
        got = sum(counts[k] for k in range(lo, lo + 100))
        assert abs(got - n * mass) < 4 * math.sqrt(n * mass * (1 - mass)), lo


def test_target_is_the_rarest_word_and_pointers_the_rarest_60() -> None:
    cfg = Config()
    ex = annotate(["w3", "w560", "w17", "w560", "w599", "w0", "w1"], cfg)
    assert ex["tgt"] == ["w599"] and ex["tgt_pointer"] == [4] and ex["tgt_switch"] == [True]
    ex = annotate(["w3", "w560", "w17", "w560", "w5", "w0", "w1"], cfg)
    assert ex["tgt"] == ["w560"] and ex["tgt_pointer"] == [1] and ex["tgt_switch"] == [True]  # first one
    ex = annotate(["w3", "w539", "w17", "w2", "w5", "w0", "w1"], cfg)
    assert ex["tgt"] == ["w539"] and ex["tgt_pointer"] == [-1] and ex["tgt_switch"] == [False]
    for row in sample_examples(cfg, random.Random(1), 500):
        ranks = [rank(t) for t in row["src"]]
        assert len(ranks) == 7 and rank(row["tgt"][0]) == max(ranks)
        assert row["tgt_switch"][0] == (max(ranks) >= 540)
        if row["tgt_switch"][0]:
            assert row["tgt_pointer"][0] == ranks.index(max(ranks))


def test_vocabulary_is_in_frequency_order() -> None:
    cfg = Config()
    vocab = vocabulary(cfg)
    assert len(vocab) == 604 and tuple(vocab.itos[:4]) == SPECIALS
    assert vocab.itos[4:8] == ["w0", "w1", "w2", "w3"] and vocab.itos[543] == "w539" and vocab.itos[544] == "w540"
    assert vocab.counts[4:] == sorted(vocab.counts[4:], reverse=True)


def test_fixed_splits_are_seeded_and_distinct() -> None:
    a, b = fixed_split(SMALL, "test"), fixed_split(SMALL, "test")
    assert a == b and len(a) == 40
    assert fixed_split(SMALL, "valid")[:5] != a[:5]
    assert fixed_split(Config(train_size=300, valid_size=50, test_size=40, seed=8), "test") != a
    assert a[0]["id"] == "test-0" and a[0]["refs"] == [a[0]["tgt"]]


def test_write_splits_and_batches_carry_the_pointers(tmp_path) -> None:
    manifests = write_splits(SMALL, tmp_path)
    assert set(manifests) == set(SPLITS)
    vocab = vocabulary(SMALL)
    for split, size in (("train", 300), ("valid", 50), ("test", 40)):
        table = read_split(tmp_path / split)
        assert table.num_rows == size and table.schema.names == SCHEMA.names
        rows = table.to_pylist()
        assert rows == [{k: r[k] for k in SCHEMA.names} for r in fixed_split(SMALL, split)]
        stats = read_manifest(tmp_path / split)["stats"]
        assert stats["pointed"] == sum(r["tgt_switch"][0] for r in rows)
    table = read_split(tmp_path / "test")
    batch = batch_from_rows(table, list(range(40)), vocab, vocab)
    pointed = batch.tgt_switch[:, 0]
    assert pointed.tolist() == [r["tgt_switch"][0] for r in table.to_pylist()]
    # </s> never points; a pointed target's source position holds the target word.
    assert not batch.tgt_switch[:, 1].any() and (batch.tgt_pointer[:, 1] == -1).all()
    at = batch.tgt_pointer[:, 0].clamp(min=0)
    assert (batch.src_ext.gather(1, at.unsqueeze(1)).squeeze(1) == batch.tgt_out[:, 0])[pointed].all()
    # The rule "target outside the shortlist (ids >= 544) but in the source" gives the same switch.
    assert ((batch.tgt_out[:, 0] >= 4 + 540) == pointed).all()
