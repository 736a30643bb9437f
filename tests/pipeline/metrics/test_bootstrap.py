"""pipeline.metrics.bootstrap: per-example scores equal the project's metrics; the group-and-seed
bootstrap's replicates, intervals and paired tests."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.metrics.bootstrap import Bootstrap, ExampleScores, exact_match_scores, text_example_scores
from pipeline.metrics.registry import TEXT_METRIC_KINDS, exact_match, text_metrics

HYPS = [
    "the cat sat on the mat today".split(),
    "police arrested five people after the protest".split(),
    "a b c d e f".split(),
    "stocks rose sharply on monday".split(),
]
REFS = [  # 2, 1, 3 and 2 references
    ["the cat sat on a mat today".split(), "a cat was sitting on the mat".split()],
    ["police arrest five protesters after a protest".split()],
    ["a b c d e".split(), "a b x d e f".split(), "a b c d e f g".split()],
    ["stocks rose on monday".split(), "shares rose sharply monday".split()],
]
SRCS = [
    "the cat sat on the mat on a sunny day today".split(),
    "police arrested five people after the protest in the capital on sunday".split(),
    "a b c d e f g h".split(),
    "stocks rose sharply on monday as investors cheered the news".split(),
]
REFS_RAW = [
    ["The cat sat on a mat today.", "A cat was sitting on the mat, enjoying the sun on a warm afternoon in May."],
    ["Police arrested five protesters after a protest that turned violent in the capital on Sunday night."],
    ["a b c d e", "a b x d e f", "a b c d e f g"],
    ["Stocks rose on Monday.", "Shares rose sharply Monday."],
]
COUNTS = np.array([2, 0, 1, 3])


def repeat(items, counts=COUNTS):
    return [x for x, c in zip(items, counts) for _ in range(c)]


def test_exact_match_scores_equal_exact_match():
    golds = [["a"], ["b"], ["c"], ["d"]]
    nbests = [[["a"], ["x"]], [["x"], ["b"]], [], [["x"], ["y"], ["d"]]]
    for k in (1, 2, 3):
        es = exact_match_scores(golds, nbests, k)
        official = exact_match(golds, nbests, k)
        assert set(es) == {"top1", f"top{k}"}
        for key, scores in es.items():
            assert scores.score() == pytest.approx(official[key], abs=1e-9)
            assert scores.score(COUNTS) == pytest.approx(exact_match(repeat(golds), repeat(nbests), k)[key], abs=1e-9)


@pytest.mark.parametrize("kind", TEXT_METRIC_KINDS)
@pytest.mark.parametrize("raw", [False, True])
def test_text_scores_equal_text_metrics_also_weighted(kind, raw):
    refs_raw = REFS_RAW if raw else None
    es = text_example_scores(kind, HYPS, REFS, SRCS, refs_raw=refs_raw)
    official = text_metrics(kind, HYPS, REFS, SRCS, refs_raw=refs_raw)
    assert set(es) == set(official) - {"n"}
    assert all(len(s) == len(HYPS) for s in es.values())
    repeated = text_metrics(kind, repeat(HYPS), repeat(REFS), repeat(SRCS), refs_raw=refs_raw and repeat(REFS_RAW))
    for key, scores in es.items():
        assert scores.score() == pytest.approx(official[key], abs=1e-9), key
        assert scores.score(COUNTS) == pytest.approx(repeated[key], abs=1e-9), key
    if kind.startswith("bleu"):
        assert es["bleu"].aggregate_kind == "bleu" and es["bleu"].values.shape == (4, 10)
        assert official["bleu"] > 0  # the test sentences share 4-grams: not the trivial 0


def test_one_example_bleu_and_empty_input():
    es = text_example_scores(
        "bleu", [["the", "cat", "sat", "on", "the", "mat"]], [[["the", "cat", "sat", "on", "a", "mat"]]]
    )
    assert es["bleu"].score() == pytest.approx(100 * (5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25, abs=1e-9)
    empty = text_example_scores("bleu_sari", [], [], [])
    assert empty["bleu"].score() == 0.0 == empty["sari"].score()


def test_group_resamples_take_only_the_possible_values():
    # groups a = {100, 0}, b = {100}: two draws give a+a (mean 50), a+b (200/3) or b+b (100)
    boot = Bootstrap(3, groups=["a", "a", "b"], resamples=1000, seed=3)
    assert boot.unit == "2 groups" and Bootstrap(5).unit == "5 examples"
    iv = boot.interval([ExampleScores("mean", np.array([100.0, 0.0, 100.0]))])
    possible = np.array([50.0, 200 / 3, 100.0])
    assert np.all(np.isclose(iv.replicates[:, None], possible).any(axis=1))
    shares = [np.isclose(iv.replicates, v).mean() for v in possible]  # 1/4, 1/2, 1/4
    assert shares == pytest.approx([0.25, 0.5, 0.25], abs=0.05)
    assert (iv.low, iv.high) == (50.0, 100.0)  # each tail holds ~25% of the replicates
    assert iv.mean == pytest.approx(200 / 3) and iv.seeds == 1 and iv.sd is None
    # every replicate counts each drawn group whole, as many draws as groups
    assert set(np.unique(boot.weights.sum(axis=1))) <= {2.0, 3.0, 4.0}
    assert np.all(boot.weights[:, 0] == boot.weights[:, 1])


def test_groups_widen_the_interval_when_groups_are_correlated():
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(20), 10)  # 20 groups of 10 examples, one value per group
    values = ExampleScores("mean", rng.choice([0.0, 100.0], size=20)[groups])
    by_group = Bootstrap(200, groups=list(groups)).interval([values])
    by_example = Bootstrap(200).interval([values])
    assert by_group.high - by_group.low > 2 * (by_example.high - by_example.low)
    assert by_group.mean == by_example.mean == values.score()


def test_same_seed_same_replicates_different_seed_different():
    values = [ExampleScores("mean", np.random.default_rng(1).uniform(0, 100, 50))]
    groups = [i % 7 for i in range(50)]
    a = Bootstrap(50, groups, seed=5).interval(values)
    b = Bootstrap(50, groups, seed=5).interval(values)
    c = Bootstrap(50, groups, seed=6).interval(values)
    assert np.array_equal(a.replicates, b.replicates) and a == b
    assert not np.array_equal(a.replicates, c.replicates)


def test_seed_resampling_widens_the_interval_and_sd_uses_ddof_1():
    base = np.random.default_rng(2).uniform(0, 100, 300)
    a, b = ExampleScores("mean", base), ExampleScores("mean", base + 20)
    boot = Bootstrap(300)
    one_a, one_b, both = boot.interval([a]), boot.interval([b]), boot.interval([a, b])
    assert both.high - both.low > 1.5 * max(one_a.high - one_a.low, one_b.high - one_b.low)
    assert both.mean == pytest.approx((a.score() + b.score()) / 2)
    assert both.sd == pytest.approx(20 / np.sqrt(2))  # |m1 - m2| / sqrt(2): ddof=1
    assert both.seeds == 2 and one_a.sd is None
    three = boot.interval([a, b, ExampleScores("mean", base + 50)])
    assert three.sd == pytest.approx(np.std([0, 20, 50], ddof=1))


def test_paired_identical_rows():
    seeds = [ExampleScores("mean", np.random.default_rng(s).uniform(0, 100, 40)) for s in (0, 1)]
    boot = Bootstrap(40, [i % 5 for i in range(40)])
    cmp = boot.paired(boot.interval(seeds), boot.interval(seeds))
    assert cmp.difference == 0.0 and cmp.p_value == 1.0 and not cmp.significant
    assert cmp.low == 0.0 == cmp.high


def test_paired_worse_everywhere_is_significant():
    best = np.random.default_rng(4).uniform(50, 100, 60)
    boot = Bootstrap(60)
    cmp = boot.paired(boot.interval([ExampleScores("mean", best - 10)]), boot.interval([ExampleScores("mean", best)]))
    assert cmp.difference == pytest.approx(-10)
    assert cmp.significant and cmp.p_value < 0.05
    assert cmp.low == pytest.approx(-10) and cmp.high == pytest.approx(-10)


def test_pairing_cancels_shared_group_variation():
    groups = np.repeat(np.arange(15), 4)
    shared = np.random.default_rng(7).uniform(0, 100, 15)[groups]  # large per-group variation, shared
    boot = Bootstrap(60, groups=list(groups))
    best = boot.interval([ExampleScores("mean", shared)])
    row = boot.interval([ExampleScores("mean", shared - 2)])  # a constant small difference
    assert row.high > best.low  # unpaired, the intervals overlap
    cmp = boot.paired(row, best)
    assert cmp.significant and cmp.p_value < 0.05
    assert cmp.difference == pytest.approx(-2) and cmp.high < 0


def test_bleu_replicates_resum_the_statistics():
    es = text_example_scores("bleu", HYPS, REFS)["bleu"]
    boot = Bootstrap(4, resamples=50)
    iv = boot.interval([es])
    assert iv.replicates == pytest.approx([es.score(w) for w in boot.weights], abs=1e-12)
    assert iv.mean == pytest.approx(text_metrics("bleu", HYPS, REFS)["bleu"], abs=1e-9)


def test_mismatched_lengths_raise():
    with pytest.raises(ValueError, match="4 examples.*5"):
        Bootstrap(5).interval([ExampleScores("mean", np.zeros(4))])
    with pytest.raises(ValueError, match="3 group labels for 4 examples"):
        Bootstrap(4, groups=["a", "b", "c"])
    with pytest.raises(ValueError, match="aggregate_kind"):
        ExampleScores("median", np.zeros(3))
