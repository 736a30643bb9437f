"""A generated Gigaword-shaped corpus: sources of 31 tokens, targets of 9 (the means of Rush et al.'s
release), words drawn from a Zipfian distribution over a fixed vocabulary, and about half of each
target copied from its source (headlines reuse the article's words).

Written by the benchmarks, never committed. Words are lower-case letter strings (``b``, ``c``, ...
``zz``...), so the Gigaword reader's digit rule (digits -> ``#``) leaves them as they are.

    words(n)                        the n words, most frequent first
    sample_pairs(rng, n, ...)       (sources (n, 31), targets (n, 9)) as word indices, vectorised
    write_rush(dir, n, ...)         train.article.txt / train.title.txt in the Rush release's format
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

SRC_LEN, TGT_LEN = 31, 9
LETTERS = np.array(list("abcdefghijklmnopqrstuvwxyz"))


def words(n: int) -> list[str]:
    """n distinct lower-case words: bijective base-26 numerals of 1..n ('a', ..., 'z', 'aa', ...),
    with a 'q' prefix so none is an English function word the readers might treat specially."""
    out = []
    for i in range(1, n + 1):
        s = []
        while i:
            i, r = divmod(i - 1, 26)
            s.append(LETTERS[r])
        out.append("q" + "".join(reversed(s)))
    return out


def zipf_probs(n: int, exponent: float = 1.0) -> np.ndarray:
    p = 1.0 / np.arange(1, n + 1) ** exponent
    return p / p.sum()


def sample_pairs(
    rng: np.random.Generator,
    n: int,
    vocab: int,
    copy_fraction: float = 0.5,
    src_len: int = SRC_LEN,
    tgt_len: int = TGT_LEN,
) -> tuple[np.ndarray, np.ndarray]:
    """Word indices: sources (n, src_len) Zipfian; targets (n, tgt_len), each token copied from a
    random source position with probability ``copy_fraction``, else drawn from the same Zipf law."""
    cdf = np.cumsum(zipf_probs(vocab))
    src = np.minimum(np.searchsorted(cdf, rng.random((n, src_len))), vocab - 1)
    fresh = np.minimum(np.searchsorted(cdf, rng.random((n, tgt_len))), vocab - 1)
    pick = src[np.arange(n)[:, None], rng.integers(0, src_len, (n, tgt_len))]
    tgt = np.where(rng.random((n, tgt_len)) < copy_fraction, pick, fresh)
    return src, tgt


def write_rush(
    out_dir: Path, n: int, vocab: int = 50_000, seed: int = 0, prefix: str = "train", chunk: int = 100_000
) -> tuple[Path, Path]:
    """``<prefix>.article.txt`` and ``<prefix>.title.txt``: n aligned lines, written chunk by chunk."""
    out_dir.mkdir(parents=True, exist_ok=True)
    vocab_words = np.array(words(vocab), dtype=object)
    rng = np.random.default_rng(seed)
    art, tit = out_dir / f"{prefix}.article.txt", out_dir / f"{prefix}.title.txt"
    with open(art, "w", encoding="utf-8") as fa, open(tit, "w", encoding="utf-8") as ft:
        for start in range(0, n, chunk):
            src, tgt = sample_pairs(rng, min(chunk, n - start), vocab)
            fa.write("\n".join(" ".join(row) for row in vocab_words[src]) + "\n")
            ft.write("\n".join(" ".join(row) for row in vocab_words[tgt]) + "\n")
    return art, tit
