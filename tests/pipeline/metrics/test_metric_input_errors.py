"""The metrics' input checks and empty corpora (BLEU, SARI, ROUGE, the bootstrap, exact match): each bad
input is refused with a message that names what is wrong, and an empty corpus scores exactly 0."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pipeline.metrics.bleu import corpus_bleu
from pipeline.metrics.bootstrap import Bootstrap, ExampleScores, exact_match_scores, text_example_scores
from pipeline.metrics.registry import exact_match, exact_match_by_group
from pipeline.metrics.rouge import rouge, rouge_per_summary
from pipeline.metrics.sari import corpus_sari

# --------------------------------------------------------------------------------------------- #
# BLEU (pipeline/metrics/bleu.py)
# --------------------------------------------------------------------------------------------- #


def test_bleu_refuses_a_count_mismatch_naming_both_counts():
    with pytest.raises(ValueError, match=r"^BLEU: 1 hypotheses but 0 reference sets$"):
        corpus_bleu(["a b c d"], [])
    with pytest.raises(ValueError, match=r"^BLEU: 2 hypotheses but 3 reference sets$"):
        corpus_bleu(["a", "b"], [["a"], ["b"], ["c"]])


def test_bleu_refuses_a_bare_string_as_a_reference_set():
    """A string where a list of references belongs would otherwise be read as one reference per
    character (and score the hypothesis against single letters)."""
    with pytest.raises(ValueError, match=r"^BLEU: reference set 0 must be a non-empty list of strings, got 'a b c d'$"):
        corpus_bleu(["a b c d"], ["a b c d"])


def test_bleu_refuses_an_empty_reference_set_naming_its_index():
    with pytest.raises(ValueError, match=r"^BLEU: reference set 1 must be a non-empty list of strings, got \[\]$"):
        corpus_bleu(["a b c d", "e f g h"], [["a b c d"], []])


def test_bleu_accepts_any_sequence_of_references():
    """The checks refuse strings and empty sets only: a tuple of references scores as a list does."""
    assert corpus_bleu(["a b c d"], [("a b c d",)]) == pytest.approx(100.0)


def test_bleu_of_an_empty_corpus_is_zero():
    score = corpus_bleu([], [])
    assert score == 0.0 and isinstance(score, float)


# --------------------------------------------------------------------------------------------- #
# SARI (pipeline/metrics/sari.py)
# --------------------------------------------------------------------------------------------- #


def test_sari_of_an_empty_corpus_is_zero():
    score = corpus_sari([], [], [])
    assert score == 0.0 and isinstance(score, float)


def test_sari_refuses_a_count_mismatch_naming_every_count():
    with pytest.raises(ValueError, match=r"^SARI: 1 sources, 0 hypotheses, 0 reference sets$"):
        corpus_sari(["a b"], [], [])
    with pytest.raises(ValueError, match=r"^SARI: 2 sources, 2 hypotheses, 1 reference sets$"):
        corpus_sari(["a b", "c d"], ["a", "c"], [["a"]])


def test_sari_refuses_a_bare_string_as_a_reference_set():
    with pytest.raises(ValueError, match=r"^SARI: references must be a non-empty list of strings, got 'a b'$"):
        corpus_sari(["a b c"], ["a b"], ["a b"])
    with pytest.raises(ValueError, match=r"^SARI: references must be a non-empty list of strings, got \[\]$"):
        corpus_sari(["a b c"], ["a b"], [[]])


# --------------------------------------------------------------------------------------------- #
# ROUGE (pipeline/metrics/rouge.py)
# --------------------------------------------------------------------------------------------- #


@pytest.mark.parametrize("multi_ref", ["A", "B", "max", ""])
def test_rouge_refuses_an_unknown_multi_ref(multi_ref):
    """ROUGE-1.5.5's own flags (-f A / -f B) are not the setting's values; the message says which are."""
    with pytest.raises(
        ValueError, match=rf"^ROUGE: multi_ref must be 'pool' \(-f A\) or 'best' \(-f B\), got '{multi_ref}'$"
    ):
        rouge(["a b"], [["a b"]], multi_ref=multi_ref)


def test_rouge_refuses_a_negative_byte_limit():
    with pytest.raises(ValueError, match=r"^ROUGE: byte_limit must be >= 0, got -1$"):
        rouge(["a b"], [["a b"]], byte_limit=-1)
    with pytest.raises(ValueError, match=r"^ROUGE: byte_limit must be >= 0, got -75$"):
        rouge_per_summary(["a b"], [["a b"]], byte_limit=-75)


def test_rouge_byte_limit_zero_is_no_cut():
    """0 is allowed (the check is ``< 0``) and, as ROUGE-1.5.5's ``-b 0``, cuts nothing."""
    hyps, refs = ["the cat sat on the mat"], [["the cat sat on a mat", "a cat on the mat"]]
    assert rouge(hyps, refs, byte_limit=0) == rouge(hyps, refs)
    assert rouge(hyps, refs, byte_limit=0) != rouge(hyps, refs, byte_limit=7)


def test_rouge_refuses_a_byte_limit_on_characters():
    with pytest.raises(
        ValueError, match=r"^ROUGE: units='chars' scores characters as ids; stem/byte_limit do not apply$"
    ):
        rouge(["ab"], [["ab"]], units="chars", byte_limit=75)


@pytest.mark.parametrize("alpha", [1.5, -0.1, math.inf, math.nan])
def test_rouge_refuses_alpha_outside_zero_one(alpha):
    with pytest.raises(ValueError, match=rf"^ROUGE: alpha must be in \[0, 1\], got {alpha}$"):
        rouge(["a b"], [["a b"]], alpha=alpha)


def test_rouge_alpha_bounds_are_allowed_and_weigh_one_side():
    """alpha = 0 and 1 are in range: F = P R / ((1 - alpha) P + alpha R) is then R, and P."""
    hyps, refs = ["a b c d"], [["a b x"]]  # ROUGE-1: 2 hits, R = 2/3, P = 2/4
    r0 = rouge(hyps, refs, alpha=0.0)["rouge1"]
    r1 = rouge(hyps, refs, alpha=1.0)["rouge1"]
    assert r0["f"] == pytest.approx(r0["r"]) == pytest.approx(100 * 0.66667)
    assert r1["f"] == pytest.approx(r1["p"]) == pytest.approx(50.0)


# --------------------------------------------------------------------------------------------- #
# The bootstrap (pipeline/metrics/bootstrap.py)
# --------------------------------------------------------------------------------------------- #


def test_example_scores_refuse_an_unknown_aggregate_or_the_wrong_rank():
    with pytest.raises(ValueError, match=r"^ExampleScores: aggregate_kind must be 'mean' or 'bleu', got 'median'$"):
        ExampleScores("median", np.zeros(3))
    with pytest.raises(ValueError, match=r"^ExampleScores\('mean'\): values must be 1-D, got \(2, 2\)$"):
        ExampleScores("mean", np.zeros((2, 2)))
    with pytest.raises(ValueError, match=r"^ExampleScores\('bleu'\): values must be 2-D, got \(3,\)$"):
        ExampleScores("bleu", np.zeros(3))


def test_example_scores_refuse_bleu_statistics_of_the_wrong_width():
    """sacrebleu's per-sentence statistics are 10 numbers (hyp length, ref length, 4 matches, 4 totals).
    A user should hear so when building the scores, not get an IndexError from sacrebleu's internals
    at the first ``score()`` (or, with 11 columns, a silently ignored extra column)."""
    with pytest.raises(ValueError, match=r"ExampleScores\('bleu'\).*\(1, 5\)"):
        ExampleScores("bleu", np.array([[4, 4, 4, 3, 2]])).score()


@pytest.mark.parametrize(
    "kwargs,got",
    [
        (dict(n_examples=0), "0, 1000, 0.95"),
        (dict(n_examples=3, resamples=0), "3, 0, 0.95"),
        (dict(n_examples=3, level=0.0), "3, 1000, 0.0"),
        (dict(n_examples=3, level=1.0), "3, 1000, 1.0"),
        (dict(n_examples=3, level=95), "3, 1000, 95"),
        (dict(n_examples=3, level=math.nan), "3, 1000, nan"),
    ],
)
def test_bootstrap_refuses_bad_sizes_or_level_quoting_the_values(kwargs, got):
    with pytest.raises(
        ValueError, match=rf"^Bootstrap: needs n_examples >= 1, resamples >= 1, 0 < level < 1; got {got}$"
    ):
        Bootstrap(**kwargs)


def test_bootstrap_refuses_group_labels_of_the_wrong_count():
    with pytest.raises(ValueError, match=r"^Bootstrap: 3 group labels for 4 examples$"):
        Bootstrap(4, groups=["a", "b", "a"])


def test_bootstrap_interval_refuses_no_seeds_or_a_seed_of_another_size():
    boot = Bootstrap(4, resamples=5)
    with pytest.raises(ValueError, match=r"^Bootstrap.interval: no seeds$"):
        boot.interval([])
    good = ExampleScores("mean", np.arange(4.0))
    with pytest.raises(ValueError, match=r"^Bootstrap.interval: a seed has 3 examples, the bootstrap 4$"):
        boot.interval([good, ExampleScores("mean", np.zeros(3))])


def test_bootstrap_paired_refuses_rows_from_another_bootstrap():
    """Rows must come from this bootstrap's replicates: a row of a bootstrap with other resamples is refused."""
    seeds = [ExampleScores("mean", np.array([1.0, 2.0, 3.0]))]
    boot, other = Bootstrap(3, resamples=10), Bootstrap(3, resamples=20)
    mine, theirs = boot.interval(seeds), other.interval(seeds)
    assert boot.paired(mine, mine).difference == 0.0  # the same row from the same bootstrap passes
    with pytest.raises(ValueError, match=r"^Bootstrap.paired: 10 and 20 replicates, the bootstrap has 10$"):
        boot.paired(mine, theirs)
    with pytest.raises(ValueError, match=r"^Bootstrap.paired: 20 and 10 replicates, the bootstrap has 10$"):
        boot.paired(theirs, mine)


def test_text_example_scores_refuse_bad_input():
    h, r = [["a", "b"]], [[["a", "b"]]]
    with pytest.raises(ValueError, match=r"^text_example_scores: unknown kind 'meteor'; expected one of \("):
        text_example_scores("meteor", h, r)
    with pytest.raises(ValueError, match=r"^text_example_scores\('bleu'\): 1 hypotheses but 2 reference sets$"):
        text_example_scores("bleu", h, r * 2)
    with pytest.raises(ValueError, match=r"^text_example_scores\('rouge_f'\): an example has no reference$"):
        text_example_scores("rouge_f", h * 2, [r[0], []])
    with pytest.raises(
        ValueError, match=r"^text_example_scores\('rouge_recall_75'\): 1 hypotheses but 2 refs_raw sets$"
    ):
        text_example_scores("rouge_recall_75", h, r, refs_raw=[["a b"], ["c d"]])
    with pytest.raises(
        ValueError, match=r"^text_example_scores\('bleu_sari'\): needs srcs, one per hypothesis \(1\), got None$"
    ):
        text_example_scores("bleu_sari", h, r)
    with pytest.raises(
        ValueError, match=r"^text_example_scores\('bleu_sari'\): needs srcs, one per hypothesis \(1\), got 2$"
    ):
        text_example_scores("bleu_sari", h, r, srcs=[["a"], ["b"]])


@pytest.mark.parametrize("kind", ["rouge_f", "bleu", "bleu_sari"])
def test_text_example_scores_of_an_empty_corpus_score_zero(kind):
    """Like the corpus metrics (BLEU, SARI and ROUGE of nothing are 0), every per-example score of an
    empty split has no rows and scores 0."""
    out = text_example_scores(kind, [], [], srcs=[] if kind == "bleu_sari" else None)
    assert out, kind
    for name, es in out.items():
        assert len(es) == 0, name
        assert es.score() == 0.0, name


# --------------------------------------------------------------------------------------------- #
# Exact match (pipeline/metrics/registry.py)
# --------------------------------------------------------------------------------------------- #


def test_exact_match_of_no_examples_is_zero_with_the_usual_keys():
    assert exact_match([], [], 5) == {"n": 0, "top1": 0.0, "top5": 0.0}
    assert exact_match([], [], 1) == {"n": 0, "top1": 0.0}  # top1 and topk are one key, as with examples
    assert list(exact_match([], [], 10)) == list(exact_match([["a"]], [[["a"]]], 10))
    assert exact_match_by_group([], [], [], 3) == {"n": 0, "top1": 0.0, "top3": 0.0, "groups": {}}


def test_exact_match_counts_a_missing_nbest_as_wrong():
    """An example whose search returned nothing is a miss (``bool(nb)``), not an error."""
    assert exact_match([["a"], ["b"]], [[["a"]], []], 3) == {"n": 2, "top1": 50.0, "top3": 50.0}


def test_exact_match_refuses_golds_and_nbests_of_different_lengths():
    """corpus_bleu, corpus_sari, rouge and text_metrics all refuse a count mismatch; exact match should too."""
    with pytest.raises(ValueError, match=r"1 .*2"):
        exact_match([["a"]], [[["a"]], [["b"]]], 1)
    with pytest.raises(ValueError, match=r"0 .*1"):
        exact_match([], [[["a"]]], 1)
    with pytest.raises(ValueError, match=r"2 .*1"):
        exact_match_scores([["a"], ["b"]], [[["a"]]], 1)
