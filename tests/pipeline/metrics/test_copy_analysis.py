"""pipeline.metrics.copy_analysis: copied share, novel n-grams (See et al. 2017 Figure 6), repeated
trigrams (Figure 4), OOV recall and lengths, checked against counts made by hand on tiny cases."""

from __future__ import annotations

import pytest

from pipeline.metrics.copy_analysis import (
    copied_tokens,
    copy_analysis,
    ngrams,
    novel_ngrams,
    oov_recall_counts,
    repeated_ngrams,
)

# The target vocabulary: "zorg" and "blip" are outside it.
VOCAB = {"the", "cat", "sat", "on", "mat", "a", "b", "c"}

# Example 1: one reference.
SRC1 = ["the", "cat", "sat", "on", "the", "mat"]
OUT1 = ["the", "cat", "sat", "sat", "zorg"]
REF1 = ["the", "cat", "zorg", "sat"]
# Example 2: two references; the output repeats itself.
SRC2 = ["a", "b", "c"]
OUT2 = ["a", "b", "a", "b", "a", "b"]
REF2A = ["a", "blip", "blip"]
REF2B = ["b", "c"]


def test_ngrams_in_order():
    assert ngrams(["a", "b", "c"], 2) == [("a", "b"), ("b", "c")]
    assert ngrams(["a", "b"], 3) == []


def test_example_one_by_hand():
    # the, cat, sat, sat occur in the source; zorg does not: 4 of 5
    assert copied_tokens(OUT1, SRC1) == 4
    assert novel_ngrams(OUT1, SRC1, 1) == (1, 5)  # zorg
    # the-cat, cat-sat are source bigrams; sat-sat, sat-zorg are not
    assert novel_ngrams(OUT1, SRC1, 2) == (2, 4)
    # the-cat-sat is a source trigram; cat-sat-sat, sat-sat-zorg are not
    assert novel_ngrams(OUT1, SRC1, 3) == (2, 3)
    assert novel_ngrams(OUT1, SRC1, 4) == (2, 2)
    assert repeated_ngrams(OUT1, 3) == (0, 3)  # three different trigrams
    # the reference's one OOV token (zorg) is in the output
    assert oov_recall_counts(OUT1, REF1, VOCAB) == (1, 1)


def test_repetition_by_hand():
    # trigrams a-b-a, b-a-b, a-b-a (repeats the 1st), b-a-b (repeats the 2nd): 2 of 4
    assert repeated_ngrams(OUT2, 3) == (2, 4)
    # a b c a b c a b c: abc bca cab abc bca cab abc, the last 4 repeat an earlier one
    assert repeated_ngrams(list("abcabcabc"), 3) == (4, 7)
    # source bigrams {a-b, b-c}: the two b-a of a-b a-b a-b... are novel; 2 of 5
    assert novel_ngrams(OUT2, SRC2, 2) == (2, 5)
    assert novel_ngrams(OUT2, SRC2, 3) == (4, 4)  # the only source trigram is a-b-c


def test_oov_recall_is_clipped_per_word():
    # reference OOV tokens: x twice, y once (3); the output has x three times, no y: min(3, 2) + 0 = 2
    assert oov_recall_counts(["x", "x", "x"], ["x", "x", "y"], set()) == (2, 3)
    assert oov_recall_counts(["x"], ["the", "cat"], VOCAB) == (0, 0)  # no OOV in the reference


def test_split_pooled_micro_by_hand():
    got = copy_analysis([OUT1, OUT2], [[REF1], [REF2A, REF2B]], [SRC1, SRC2], VOCAB)
    out, ref = got["outputs"], got["references"]
    # Outputs, pooled over both examples (5 + 6 = 11 tokens):
    #   copied 4 + 6 = 10 of 11; novel 1-grams 1 + 0 = 1 of 11
    #   novel 2-grams 2 + 2 = 4 of 4 + 5 = 9; 3-grams 2 + 4 = 6 of 3 + 4 = 7; 4-grams 2 + 3 = 5 of 2 + 3 = 5
    #   repeated trigrams 0 + 2 = 2 of 3 + 4 = 7
    #   OOV recall: REF1 zorg found (1 of 1), REF2A blip x2 not found (0 of 2), REF2B none: 1 of 3
    #   mean length 11 / 2 = 5.5; references 9 tokens / 3 = 3.0; ratio 5.5 / 3
    assert out == pytest.approx(
        {
            "copied": 100 * 10 / 11,
            "novel_1gram": 100 * 1 / 11,
            "novel_2gram": 100 * 4 / 9,
            "novel_3gram": 100 * 6 / 7,
            "novel_4gram": 100.0,
            "repeated_3gram": 100 * 2 / 7,
            "length": 5.5,
            "oov_recall": 100 * 1 / 3,
            "length_ratio": 5.5 / 3,
        }
    )
    assert out["copied"] + out["novel_1gram"] == pytest.approx(100.0)  # occurrences: complements
    # References, pooled over all three (4 + 3 + 2 = 9 tokens):
    #   copied: the cat sat (3) + a (1) + b c (2) = 6 of 9; novel 1-grams zorg + blip blip = 3 of 9
    #   novel 2-grams: cat-zorg zorg-sat (2 of 3) + a-blip blip-blip (2 of 2) + b-c is a source bigram (0 of 1): 4 of 6
    #   novel 3-grams: 2 of 2 + 1 of 1 + none = 3 of 3; 4-grams: 1 of 1 (only REF1 has one)
    #   repeated trigrams 0 of 2 + 1 + 0 = 3; OOV tokens zorg, blip, blip = 3 of 9
    assert ref == pytest.approx(
        {
            "count": 3,
            "copied": 100 * 6 / 9,
            "novel_1gram": 100 * 3 / 9,
            "novel_2gram": 100 * 4 / 6,
            "novel_3gram": 100.0,
            "novel_4gram": 100.0,
            "repeated_3gram": 0.0,
            "length": 3.0,
            "oov": 100 * 3 / 9,
            "oov_tokens": 3,
        }
    )


def test_nothing_to_count_is_none_not_zero():
    got = copy_analysis([["a"]], [[["a"]]], [["a"]], VOCAB)
    out, ref = got["outputs"], got["references"]
    assert out["copied"] == 100.0 and out["novel_1gram"] == 0.0
    # one token: no bigram, trigram or 4-gram anywhere; no OOV token in the reference
    assert out["novel_2gram"] is None and out["novel_4gram"] is None and out["repeated_3gram"] is None
    assert out["oov_recall"] is None and ref["oov"] == 0.0 and ref["oov_tokens"] == 0
    assert out["length"] == ref["length"] == out["length_ratio"] == 1.0
    empty = copy_analysis([], [], [], VOCAB)
    assert empty["outputs"]["copied"] is None and empty["outputs"]["length"] is None
    assert empty["outputs"]["length_ratio"] is None and empty["references"]["count"] == 0


def test_mismatched_lengths_refused():
    with pytest.raises(ValueError, match="2 outputs, 1 reference sets and 2 sources"):
        copy_analysis([OUT1, OUT2], [[REF1]], [SRC1, SRC2], VOCAB)
