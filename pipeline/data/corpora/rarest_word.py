"""The rarest-word detection task of the Pointer Softmax paper (Gulcehre et al. 2016, section 5.1).

"The vocabulary size of our synthetic task is |V| = 600 using sequences of length 7. The words in
the sequences are sampled according to their unigram distribution which has the form of a
geometric distribution. The task is to predict the least frequent word in the sequence according
to unigram distribution of the words. During the training, the sequences are generated randomly.
Before the training, validation and test sets are constructed with a fixed seed." And: "we assign
pointers for the rarest 60 words and the rest of the words are predicted from the shortlist
softmax of size 540."

Words are ``w0 .. w599`` in order of decreasing unigram probability,
p(w_k) = (1 - q) q^k / (1 - q^600) (a geometric distribution truncated to the vocabulary; the paper
does not give q: ``ratio`` here, default 0.995, so that about 1 sequence in 8 has its answer among
the 60 pointer words and the answer ranks spread over the whole vocabulary). An example is a source
of ``seq_len`` words drawn i.i.d. from it and the one-token target ``[w_k]`` with the largest rank
k in the source (the least frequent word; the same word if it occurs twice).

Pointer annotations (the ``tgt_pointer``/``tgt_switch`` columns of :mod:`pipeline.data.text.pointers`):
the target points (switch True = the paper's z_t = 0) at its first source position when it is one
of the ``n_pointer`` rarest words, else it is a shortlist word (switch False, pointer -1).

:func:`vocabulary` gives the decoder/encoder vocabulary in frequency order, so the first
``4 + vocab_size - n_pointer`` ids are the specials and the shortlist words: a model option
``shortlist: 544`` is exactly the paper's shortlist of 540 words.

Plain functions (:func:`sample_example`, :func:`sample_examples`, :func:`fixed_split`) serve the
experiment (``scripts/rarest_word_experiment.py``: fresh training batches every step); the reader
entry point (``Config``, :func:`write_splits`, as :mod:`pipeline.data.corpora.copynet_rules`) writes
fixed ``train``/``valid``/``test`` shards for ``prepare@rarest_word``. All randomness comes from
``random.Random`` streams seeded by strings derived from ``seed`` and the split name.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from pipeline.config.validation import check_numeric_config, dataclass_from_dict
from pipeline.io.shards import ShardWriter, make_schema
from pipeline.vocab.vocabulary import SPECIALS, Vocab

SPLITS: tuple[str, ...] = ("train", "valid", "test")
SCHEMA: pa.Schema = make_schema(
    [pa.field("tgt_pointer", pa.list_(pa.int32())), pa.field("tgt_switch", pa.list_(pa.bool_()))]
)


@dataclass(frozen=True)
class Config:
    """Section 5.1 settings (the paper's where it gives them)."""

    vocab_size: int = 600  # |V| = 600
    seq_len: int = 7  # "sequences of length 7"
    ratio: float = 0.995  # q of the geometric unigram distribution (not given in the paper)
    n_pointer: int = 60  # "pointers for the rarest 60 words"; shortlist = vocab_size - n_pointer = 540
    train_size: int = 100_000  # rows of the fixed train shard (the experiment draws fresh batches instead)
    valid_size: int = 2_000
    test_size: int = 2_000
    seed: int = 1234

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Config:
        return dataclass_from_dict(cls, d)

    def __post_init__(self) -> None:
        check_numeric_config(
            self,
            lambda: [
                (self.vocab_size >= 2, "vocab_size >= 2"),
                (self.seq_len >= 1, "seq_len >= 1"),
                (0.0 < self.ratio < 1.0, "0 < ratio < 1"),
                (0 <= self.n_pointer < self.vocab_size, "0 <= n_pointer < vocab_size"),
                (min(self.train_size, self.valid_size, self.test_size) >= 0, "split sizes >= 0"),
            ],
        )

    @property
    def shortlist_words(self) -> int:
        """Words predicted by the shortlist softmax (540 in the paper)."""
        return self.vocab_size - self.n_pointer


def word(k: int) -> str:
    """The word of frequency rank ``k`` (0 = most frequent)."""
    return f"w{k}"


def rank(token: str) -> int:
    return int(token[1:])


def unigram(cfg: Config) -> list[float]:
    """p(w_k) = (1 - q) q^k / (1 - q^|V|), k = 0 .. |V| - 1: a truncated geometric distribution."""
    norm = 1.0 - cfg.ratio**cfg.vocab_size
    return [(1.0 - cfg.ratio) * cfg.ratio**k / norm for k in range(cfg.vocab_size)]


def vocabulary(cfg: Config) -> Vocab:
    """Specials, then ``w0 .. w{|V|-1}`` by decreasing frequency; counts are expected counts per
    million tokens (so ids < 4 + shortlist_words are the shortlist)."""
    counts = [max(1, round(p * 1e6)) for p in unigram(cfg)]
    return Vocab(list(SPECIALS) + [word(k) for k in range(cfg.vocab_size)], [0] * len(SPECIALS) + counts)


def annotate(src: list[str], cfg: Config) -> dict:
    """Target (the rarest word of ``src``) and its pointer annotation."""
    ranks = [rank(t) for t in src]
    rarest = max(ranks)
    pointed = rarest >= cfg.shortlist_words
    return {
        "src": list(src),
        "tgt": [word(rarest)],
        "tgt_pointer": [ranks.index(rarest) if pointed else -1],
        "tgt_switch": [pointed],
    }


class Sampler:
    """Draws sources from the unigram distribution (``random.choices`` with cumulative weights)."""

    def __init__(self, cfg: Config, rng: random.Random):
        self.cfg, self.rng = cfg, rng
        self.words = [word(k) for k in range(cfg.vocab_size)]
        self.cum = list(itertools.accumulate(unigram(cfg)))

    def example(self) -> dict:
        src = self.rng.choices(self.words, cum_weights=self.cum, k=self.cfg.seq_len)
        return annotate(src, self.cfg)

    def examples(self, n: int) -> list[dict]:
        return [self.example() for _ in range(n)]


def sample_examples(cfg: Config, rng: random.Random, n: int) -> list[dict]:
    """``n`` fresh examples (dicts with src, tgt, tgt_pointer, tgt_switch) from ``rng``."""
    return Sampler(cfg, rng).examples(n)


def split_rng(cfg: Config, split: str) -> random.Random:
    return random.Random(f"rarest-word/{cfg.seed}/{split}")


def fixed_split(cfg: Config, split: str) -> list[dict]:
    """The rows of a fixed split (constructed with a fixed seed, as the paper's valid/test sets)."""
    size = {"train": cfg.train_size, "valid": cfg.valid_size, "test": cfg.test_size}[split]
    rows = sample_examples(cfg, split_rng(cfg, split), size)
    for i, row in enumerate(rows):
        row["id"] = f"{split}-{i}"
        row["refs"] = [list(row["tgt"])]
    return rows


def write_splits(cfg: Config, out_root: Path, map_chunks=None) -> dict[str, dict]:
    """Write ``train``/``valid``/``test`` shards under ``out_root``; return the manifests by split.

    Manifest stats: ``pointed`` (examples whose answer is a pointer word) and ``pointed_per_100``.
    """
    out_root = Path(out_root)
    manifests: dict[str, dict] = {}
    for split in SPLITS:
        rows = fixed_split(cfg, split)
        with ShardWriter(out_root / split, SCHEMA, params=asdict(cfg)) as writer:
            writer.write(rows)
            pointed = sum(r["tgt_switch"][0] for r in rows)
            writer.stats.update({"pointed": pointed, "pointed_per_100": 100.0 * pointed / max(1, len(rows))})
        manifests[split] = writer.close()
    return manifests


# --------------------------------------------------------------------------- #
# Raw text (serving, predict: pipeline.data.corpora.raw_input)
# --------------------------------------------------------------------------- #


def source_tokenizer(settings: dict, pretokenized: bool) -> Callable[[str], list[str]]:
    """Raw text -> source tokens: a whitespace split (the generated symbols ``w3 w17`` ...);
    ``pretokenized`` changes nothing."""
    return str.split
