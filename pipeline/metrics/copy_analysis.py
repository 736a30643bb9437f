"""Copy analysis: how much of a text is copied from its source, how abstractive and how repetitive it
is, and whether it recovers the reference's out-of-vocabulary words. Computed on the decoded outputs
and on the references side by side, so a mechanism's figures read against the data's own.

After See, Liu and Manning 2017, "Get To The Point: Summarization with Pointer-Generator Networks":

* novel n-grams (section 7.2, "How abstractive is our model?", Figure 6): the percentage of a
  text's n-grams, n = 1..4, that do not appear in the source, for the models' outputs and for the
  reference summaries;
* repetition (Figure 4, section 6, where coverage removes it): the percentage of a text's
  trigrams that repeat an earlier trigram of the same text;
* the out-of-vocabulary words that copying exists for (section 2.2: the pointer-generator copies
  words outside the fixed vocabulary): the share of the reference's OOV tokens the output contains.

Definitions, for one text ``t`` (an output or a reference, a token list), its source ``s`` (the
source tokens the model read) and the target vocabulary ``V``:

* ``copied``: tokens of ``t`` that occur anywhere in ``s`` / tokens of ``t``;
* ``novel_<n>gram``: n-gram occurrences of ``t`` that are not an n-gram of ``s`` / n-gram
  occurrences of ``t`` (so ``novel_1gram = 100 - copied``; both are kept, as the brief and the
  paper name them);
* ``repeated_3gram``: trigram occurrences of ``t`` equal to a trigram that occurs earlier in ``t``
  / trigram occurrences of ``t`` (``a b c a b c a b c`` has 7 trigrams, of which 4 repeat one);
* ``oov_recall`` (outputs): for each reference ``r`` of the example, the tokens of ``r`` outside
  ``V``, counted per word type and clipped by the output's count of that word
  (``sum_w min(count_out(w), count_r(w))``, as ROUGE clips) / the number of OOV tokens of ``r``;
* ``oov`` (references): tokens of ``r`` outside ``V`` / tokens of ``r``, and ``oov_tokens``, that
  count itself (the recall's denominator);
* ``length``: the mean number of tokens per text; ``length_ratio`` (outputs): mean output length /
  mean reference length.

Aggregation is **micro**: counts are pooled over the whole split (every output, every reference of
a multi-reference set) and divided once, so long texts weigh more and a text with no trigram adds
nothing instead of an undefined 0/0. Rates are in percent; a rate with nothing to count (no 4-gram
in any output, no OOV token in any reference) is ``None`` (null in metrics.json, '-' in tables).
Tokens are compared as strings, exactly: ``<unk>`` in an output is a generated token that is not in
the source. Pure Python; no torch.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Container, Sequence
from dataclasses import dataclass, field

NGRAM_ORDERS = (1, 2, 3, 4)
REPEAT_ORDER = 3  # the trigrams of Figure 4 (which also counts 1-, 2-, 4-grams and sentences)


def ngrams(tokens: Sequence[str], n: int) -> list[tuple[str, ...]]:
    """Every n-gram occurrence of ``tokens``, in order (none when shorter than ``n``)."""
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def copied_tokens(tokens: Sequence[str], source: Sequence[str]) -> int:
    """How many tokens of ``tokens`` occur in ``source`` (each occurrence counts)."""
    src = set(source)
    return sum(tok in src for tok in tokens)


def novel_ngrams(tokens: Sequence[str], source: Sequence[str], n: int) -> tuple[int, int]:
    """(n-gram occurrences of ``tokens`` that are not n-grams of ``source``, all its n-gram occurrences)."""
    grams = ngrams(tokens, n)
    src = set(ngrams(source, n))
    return sum(g not in src for g in grams), len(grams)


def repeated_ngrams(tokens: Sequence[str], n: int = REPEAT_ORDER) -> tuple[int, int]:
    """(n-gram occurrences equal to an earlier n-gram of the same text, all its n-gram occurrences)."""
    seen: set[tuple[str, ...]] = set()
    repeats = 0
    grams = ngrams(tokens, n)
    for g in grams:
        repeats += g in seen
        seen.add(g)
    return repeats, len(grams)


def oov_recall_counts(output: Sequence[str], reference: Sequence[str], vocab: Container[str]) -> tuple[int, int]:
    """(the reference's OOV tokens the output contains, clipped per word by the output's count;
    the reference's OOV tokens)."""
    oov = Counter(tok for tok in reference if tok not in vocab)
    out = Counter(output)
    return sum(min(count, out[w]) for w, count in oov.items()), sum(oov.values())


@dataclass
class _Pooled:
    """Counts pooled over a split's texts (one side: outputs or references)."""

    texts: int = 0
    tokens: int = 0
    copied: int = 0
    novel: Counter = field(default_factory=Counter)  # n -> novel n-gram occurrences
    grams: Counter = field(default_factory=Counter)  # n -> n-gram occurrences
    repeated: int = 0
    trigrams: int = 0

    def add(self, tokens: Sequence[str], source: Sequence[str]) -> None:
        self.texts += 1
        self.tokens += len(tokens)
        self.copied += copied_tokens(tokens, source)
        for n in NGRAM_ORDERS:
            novel, total = novel_ngrams(tokens, source, n)
            self.novel[n] += novel
            self.grams[n] += total
        repeated, trigrams = repeated_ngrams(tokens, REPEAT_ORDER)
        self.repeated += repeated
        self.trigrams += trigrams

    def rates(self) -> dict:
        return {
            "copied": percent(self.copied, self.tokens),
            **{f"novel_{n}gram": percent(self.novel[n], self.grams[n]) for n in NGRAM_ORDERS},
            f"repeated_{REPEAT_ORDER}gram": percent(self.repeated, self.trigrams),
            "length": self.tokens / self.texts if self.texts else None,
        }


def percent(part: int, whole: int) -> float | None:
    """100 * part / whole; None when there is nothing to count."""
    return 100.0 * part / whole if whole else None


def copy_analysis(
    outputs: Sequence[Sequence[str]],
    references: Sequence[Sequence[Sequence[str]]],
    sources: Sequence[Sequence[str]],
    vocab: Container[str],
) -> dict:
    """The split's copy analysis, micro-averaged (pooled counts; see the module docstring).

    ``outputs[i]`` is example i's decoded tokens, ``references[i]`` its references (one or more
    token lists), ``sources[i]`` the source tokens the model read, ``vocab`` the target vocabulary
    (anything with ``in``). Returns ``{"outputs": {...}, "references": {...}}``: both sides have
    ``copied``, ``novel_1gram`` .. ``novel_4gram``, ``repeated_3gram`` (percent) and ``length``
    (mean tokens); outputs add ``oov_recall`` (percent) and ``length_ratio``, references add
    ``count`` (references scored), ``oov`` (percent of their tokens outside ``vocab``) and
    ``oov_tokens``.
    """
    if not (len(outputs) == len(references) == len(sources)):
        raise ValueError(
            f"copy_analysis: {len(outputs)} outputs, {len(references)} reference sets and {len(sources)} sources"
        )
    out, ref = _Pooled(), _Pooled()
    found = oov_tokens = 0
    for output, refs, source in zip(outputs, references, sources):
        out.add(output, source)
        for reference in refs:
            ref.add(reference, source)
            hit, total = oov_recall_counts(output, reference, vocab)
            found += hit
            oov_tokens += total
    out_rates, ref_rates = out.rates(), ref.rates()
    ratio = None
    if out_rates["length"] is not None and ref_rates["length"]:
        ratio = out_rates["length"] / ref_rates["length"]
    return {
        "outputs": {**out_rates, "oov_recall": percent(found, oov_tokens), "length_ratio": ratio},
        "references": {
            "count": ref.texts,
            **ref_rates,
            "oov": percent(oov_tokens, ref.tokens),
            "oov_tokens": oov_tokens,
        },
    }
