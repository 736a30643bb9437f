"""pipeline.metrics.bleu (= multi-bleu.perl), pipeline.metrics.sari (= cocoxu SARI.py) and pipeline.metrics.registry.text_metrics.

tests/fixtures/sari/expected_multi_bleu.json holds the lines Moses' multi-bleu.perl printed on the
bleu_*.json fixtures (``python scripts/rouge_reference_values.py --multi-bleu multi-bleu.perl``);
sari_turk.json holds SARIsent values of the reference SARI.py, computed once.
"""

from __future__ import annotations

import json
import math
import re

import pytest

from pipeline.metrics.bleu import corpus_bleu
from pipeline.metrics.registry import exact_match, text_metrics
from pipeline.metrics.sari import corpus_sari, sentence_sari
from tests.helpers import FIXTURES

FX = FIXTURES / "sari"
MULTI_BLEU = json.loads((FX / "expected_multi_bleu.json").read_text())


@pytest.mark.parametrize("name", sorted(MULTI_BLEU))
def test_bleu_equals_multi_bleu_perl(name):
    fx = json.loads((FX / f"{name}.json").read_text())
    printed = float(re.match(r"BLEU = ([0-9.]+),", MULTI_BLEU[name]).group(1))  # "%.2f"
    assert round(corpus_bleu(fx["hyps"], fx["refs"]), 2) == printed


def test_bleu_by_hand():
    # clipped precisions 5/6 ('the' twice, once in the ref), 3/5, 2/4, 1/3; lengths 6 = 6, BP 1
    got = corpus_bleu(["the cat sat on the mat"], [["the cat sat on a mat"]])
    assert got == pytest.approx(100 * (5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25, abs=1e-9)
    # brevity penalty: hyp 4 tokens, closest reference 6 (8 is farther): exp(1 - 6/4); all p_n = 1
    got = corpus_bleu(["a b c d"], [["a b c d e f", "a b c d e f g h"]])
    assert got == pytest.approx(100 * math.exp(1 - 6 / 4), abs=1e-9)
    # no 4-gram in the corpus: no smoothing, BLEU 0 (multi-bleu.perl's my_log(0))
    assert corpus_bleu(["a b c"], [["a b c"]]) == 0.0


def test_bleu_variable_reference_counts():
    hyps = ["a b c d e", "p q r s t u"]
    short = corpus_bleu(hyps, [["a b c d e f", "a b x d e"], ["p q r s t"]])
    # a duplicated reference changes neither the max n-gram counts nor the closest length
    padded = corpus_bleu(hyps, [["a b c d e f", "a b x d e"], ["p q r s t", "p q r s t"]])
    assert short == pytest.approx(padded, abs=1e-12)


def test_sari_paper_example():
    """The example in SARI.py (Xu et al. 2016); values also asserted by EASSE's tests."""
    src = "About 95 species are currently accepted ."
    refs = [
        "About 95 species are currently known .",
        "About 95 species are now accepted .",
        "95 species are now accepted .",
    ]
    assert 100 * sentence_sari(src, "About 95 you now get in .", refs) == pytest.approx(26.82782411698074)
    assert 100 * sentence_sari(src, "About 95 species are now agreed .", refs) == pytest.approx(58.89995423074248)
    assert 100 * sentence_sari(src, "About 95 species are currently agreed .", refs) == pytest.approx(50.71608864657479)


def test_sari_turk_fixture_equals_reference_code():
    fx = json.loads((FX / "sari_turk.json").read_text())
    for s, h, r, want in zip(fx["srcs"], fx["hyps"], fx["refs"], fx["expected_sentence_sari"]):
        assert sentence_sari(s, h, r) == pytest.approx(want, abs=1e-12)
    assert corpus_sari(fx["srcs"], fx["hyps"], fx["refs"]) == pytest.approx(fx["expected_corpus_sari_percent"])


def test_sari_by_hand_copy_of_source():
    # output = source = reference: keep F1 1, nothing deleted (precision 0), nothing added (F1 0)
    assert sentence_sari("a b c d", "a b c d", ["a b c d"]) == pytest.approx(1 / 3)
    # deleting exactly what the reference deletes, term by term over n = 1..4
    s = sentence_sari("a b c", "a b", ["a b"])
    keep = (1 + 1 + 0 + 0) / 4  # n=3: 'a b c' in S only -> keep sets empty -> 0
    dele = (1 + 1 + 1 + 0) / 4  # n=1 'c', n=2 'b c', n=3 'a b c' deleted correctly; no 4-grams
    add = 0.0
    assert s == pytest.approx((keep + dele + add) / 3)


def test_text_metrics_dispatch():
    hyps = [["geese", "flee", "#", "police"], ["stocks", "fell"]]
    refs = [[["goose", "flees", "police"]], [["stocks", "fall", "sharply"]]]
    out = text_metrics("rouge_f", hyps, refs)
    assert out["n"] == 2 and out["rouge1"] == out["rouge1_f"]
    assert set(out) >= {"rouge1", "rouge2", "rougeL", "rouge1_r", "rouge1_p"}
    # stemmed (-m): 'flee'/'flees' -> 'flee', 'fell' -> 'fall' (exception list); 'geese' -> 'goose'
    # but 'goose' -> 'goos'; '#' vanishes. R1 = (2/3 + 2/3)/2, P1 = (2/3 + 2/2)/2
    assert out["rouge1_r"] == pytest.approx(100 * 0.66667, abs=1e-9)
    assert out["rouge1_p"] == pytest.approx(100 * (0.66667 + 1.0) / 2, abs=1e-9)

    zh = text_metrics("rouge_f_chars", [["北京", "大雪"]], [[["北京降雪"]]])
    assert zh["rouge1"] == pytest.approx(75.0)

    long_ref = "Former Chilean dictator Augusto Pinochet arrested in London at request of Spanish judge"
    duc = text_metrics("rouge_recall_75", [long_ref.split()], [[long_ref.split()]], refs_raw=[[long_ref]])
    assert duc["rouge1"] == duc["rouge1_r"] == pytest.approx(100.0)

    bs = text_metrics("bleu_sari", [["a", "b", "c", "d"]], [[["a", "b", "c", "d"]]], srcs=[["a", "b", "c", "d"]])
    assert bs == {"n": 1, "bleu": pytest.approx(100.0), "sari": pytest.approx(100 / 3)}


def test_text_metrics_errors():
    with pytest.raises(ValueError, match="unknown kind 'meteor'"):
        text_metrics("meteor", [], [])
    with pytest.raises(ValueError, match="'rouge_f'.*1 hypotheses but 2"):
        text_metrics("rouge_f", [["a"]], [[["a"]], [["b"]]])
    with pytest.raises(ValueError, match="needs srcs"):
        text_metrics("bleu_sari", [["a"]], [[["a"]]])
    with pytest.raises(ValueError, match="no reference"):
        text_metrics("rouge_f", [["a"]], [[]])


def test_exact_match_unchanged():
    out = exact_match([["a"], ["b"]], [[["a"]], [["x"], ["b"]]], k=2)
    assert out == {"n": 2, "top1": 50.0, "top2": 100.0}


def test_bleu_kind_is_corpus_bleu_alone():
    """`bleu` (Europarl, Pointer Softmax 5.3): the multi-bleu number of the joined tokens, no SARI."""
    from pipeline.metrics.bleu import corpus_bleu
    from pipeline.metrics.registry import text_metrics

    hyps = [["le", "chat", "est", "sur", "le", "tapis"], ["il", "pleut", "beaucoup", "ici"]]
    refs = [[["le", "chat", "est", "sur", "le", "tapis"]], [["il", "pleut", "fort", "ici"]]]
    out = text_metrics("bleu", hyps, refs)
    assert set(out) == {"n", "bleu"} and out["n"] == 2
    assert out["bleu"] == corpus_bleu([" ".join(h) for h in hyps], [[" ".join(r) for r in rs] for rs in refs])
    # By hand: sentence 1 equals its reference (6/6 unigrams, 5/5 bigrams, 4/4 trigrams, 3/3 4-grams);
    # sentence 2 matches il, pleut, ici (3/4), "il pleut" (1/3), no trigram (0/2) or 4-gram (0/1).
    # Corpus precisions 9/10, 6/8, 4/6, 3/4; hypothesis and reference lengths 10 = 10: brevity penalty 1.
    assert out["bleu"] == pytest.approx(100 * (9 / 10 * 6 / 8 * 4 / 6 * 3 / 4) ** 0.25, abs=1e-9)
    assert round(out["bleu"], 4) == 76.2199
