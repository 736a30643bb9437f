"""Raw text -> source tokens as each corpus reader makes them; expected tokens written by hand."""

from __future__ import annotations

import pytest

from pipeline.data.corpora.raw_input import detokenize, source_tokenizer

SENTENCE = 'He said (in 2010) that it\'s "fine" at 1/2.'


@pytest.mark.parametrize("reader", ["copynet_rules", "rarest_word"])
def test_generated_corpora_split_on_whitespace(reader) -> None:
    assert source_tokenizer({"reader": reader})("  s12 s7\tu3 \n") == ["s12", "s7", "u3"]


def test_gigaword_lead_sentence_dateline_ptb_lowercase_digits() -> None:
    text = "WASHINGTON (AP) -- The U.S. economy grew 3.5% in 2014, officials said. Second sentence here."
    expected = ["the", "u.s.", "economy", "grew", "#.#", "%", "in", "####", ",", "officials", "said", "."]
    for settings in (
        {"reader": "gigaword", "format": "sgml"},
        {"reader": "gigaword", "format": "rush"},
        {"reader": "gigaword_pointers", "mode": "unk"},
        {"reader": "duc"},
    ):
        assert source_tokenizer(settings)(text) == expected, settings
    # Rush's &amp; and clitics
    assert source_tokenizer({"reader": "gigaword"})("AT&T's profit rose 12 percent.") == [
        "at&amp;t",
        "'s",
        "profit",
        "rose",
        "##",
        "percent",
        ".",
    ]


def test_gigaword_pretokenized_unifies_unk() -> None:
    assert source_tokenizer({"reader": "gigaword"}, pretokenized=True)("the UNK rose 12 %") == [
        "the",
        "<unk>",
        "rose",
        "##",
        "%",
    ]


def test_duc_joins_a_short_lead_with_the_next_sentence() -> None:
    tok = source_tokenizer({"reader": "duc", "short_lead_chars": 130})
    assert tok("Short lead. The second sentence is here. Third one.") == [
        "short",
        "lead",
        ",",
        "the",
        "second",
        "sentence",
        "is",
        "here",
        ".",
    ]


def test_gigaword_entity_pointers_are_not_servable() -> None:
    with pytest.raises(ValueError, match="mode 'entity'"):
        source_tokenizer({"reader": "gigaword_pointers", "mode": "entity"})


def test_lcsts_char_and_word_views() -> None:
    assert source_tokenizer({"reader": "lcsts", "view": "char"})(" 雅虎 P2P。") == ["雅", "虎", "P", "2", "P", "。"]
    text = "雅虎发布2014年第四季度财报"
    assert source_tokenizer({"reader": "lcsts", "view": "word", "jieba_hmm": True})(text) == [
        "雅虎",
        "发布",
        "2014",
        "年",
        "第四季度",
        "财报",
    ]
    # without the HMM jieba cannot join the unknown word 财报
    assert source_tokenizer({"reader": "lcsts", "view": "word", "jieba_hmm": False})(text) == [
        "雅虎",
        "发布",
        "2014",
        "年",
        "第四季度",
        "财",
        "报",
    ]


def test_simplification_corpora() -> None:
    ptb = ["He", "said", "-LRB-", "in", "2010", "-RRB-", "that", "it", "'s", "``", "fine", "''", "at", "1\\/2", "."]
    assert source_tokenizer({"reader": "dress", "variant": "ori"})(SENTENCE) == ptb
    assert source_tokenizer({"reader": "pwkp", "lowercase": True})(SENTENCE) == [t.lower() for t in ptb]
    turk = ["he", "said", "-lrb-", "in", "2010", "-rrb-", "that", "it", "'s", '"', "fine", '"', "at", "1/2", "."]
    assert source_tokenizer({"reader": "turkcorpus"})(SENTENCE) == turk
    assert source_tokenizer({"reader": "ewsew"})(SENTENCE) == turk  # lowercase and turk_tokens default on
    assert source_tokenizer({"reader": "ewsew", "lowercase": False})(SENTENCE) == [
        "He",
        "said",
        "-LRB-",
        "in",
        "2010",
        "-RRB-",
        "that",
        "it",
        "'s",
        '"',
        "fine",
        '"',
        "at",
        "1/2",
        ".",
    ]
    assert source_tokenizer({"reader": "ewsew"}, pretokenized=True)("A -LRB- b -RRB- `` c ''") == [
        "a",
        "-lrb-",
        "b",
        "-rrb-",
        '"',
        "c",
        '"',
    ]


def test_europarl_moses_tokens() -> None:
    tok = source_tokenizer({"reader": "europarl", "src_lang": "en"})
    assert tok("I declare resumed the session, it's 5 & fine.") == [
        "I",
        "declare",
        "resumed",
        "the",
        "session",
        ",",
        "it",
        "'s",
        "5",
        "&",
        "fine",
        ".",
    ]
    escaped = source_tokenizer({"reader": "europarl", "src_lang": "en", "escape": True})
    assert escaped("it's 5 & fine.") == ["it", "&apos;s", "5", "&amp;", "fine", "."]
    assert tok("   ") == []


def test_unknown_or_malformed_settings_name_the_problem() -> None:
    with pytest.raises(ValueError, match="'nosuchreader'"):
        source_tokenizer({"reader": "nosuchreader"})
    with pytest.raises(ValueError, match="'reader' key"):
        source_tokenizer({"view": "char"})
    with pytest.raises(ValueError, match="view must be"):
        source_tokenizer({"reader": "lcsts", "view": "pinyin"})
    with pytest.raises(ValueError, match="subword_model"):
        source_tokenizer({"reader": "copynet_rules", "subword": {"vocab_size": 300}})


def test_detokenize() -> None:
    assert detokenize(["雅", "虎", "P", "2", "P"], {"reader": "lcsts", "view": "char"}) == "雅虎P2P"
    assert detokenize(["雅虎", "发布"], {"reader": "lcsts", "view": "word"}) == "雅虎发布"
    assert detokenize(["b", "u1", "u2"], {"reader": "copynet_rules"}) == "b u1 u2"
    assert detokenize([], {"reader": "gigaword"}) == ""


def test_subword_roundtrip(tmp_path) -> None:
    """With a sentencepiece model the reader's tokens are encoded to pieces and decoded back."""
    from pipeline.data.text.subword import train_sentencepiece

    lines = [f"s{i} s{i + 1} s{i + 2} a b" for i in range(200)]
    model = train_sentencepiece(lines, tmp_path / "subword", vocab_size=300, hard_vocab_limit=False)
    settings = {"reader": "copynet_rules", "subword": {"vocab_size": 300}}
    pieces = source_tokenizer(settings, subword_model=model)("s1 s2 zz9")
    from pipeline.data.text.subword import SentencePieceTokenizer

    assert pieces == SentencePieceTokenizer(model).encode("s1 s2 zz9")
    assert "<0x7A>" in pieces  # 'z' never seen in training: byte fallback, never <unk>
    assert detokenize(pieces, settings, subword_model=model) == "s1 s2 zz9"
