"""A user's raw text -> source tokens, exactly as the task's corpus reader normalises its source side.

A model only understands tokens made the way its training shards were made, so serving and the
``predict`` command tokenise with the reader's own functions (none are copied here):

=====================================  ====================================================================
reader (``prepare.<task>.reader``)     raw text -> source tokens
=====================================  ====================================================================
``copynet_rules``, ``rarest_word``     whitespace split (the generated symbols ``s12 u3 w7`` ...)
``gigaword`` (rush and sgml),          Rush et al. 2015 (section 7), :func:`pipeline.corpora.gigaword.lead_tokens`:
``gigaword_pointers`` (``mode: unk``), the lead sentence (text up to its first sentence-final period), a wire
``duc``                                dateline removed, PTB tokens (:mod:`pipeline.text.ptb`), lowercase, digits
                                       ``#``, ``&`` -> ``&amp;`` (:func:`pipeline.text.normalize.rush_normalize`);
                                       ``duc`` also joins a short lead with the next sentence
                                       (``short_lead_chars``). Rare words need nothing: the encoder reads every
                                       word outside its vocabulary as ``<unk>``, as the reader's ``<unk>`` did.
``lcsts`` ``view: char``               every non-whitespace character (:func:`pipeline.text.segment.char_tokens`)
``lcsts`` ``view: word``               jieba words, same HMM flag (:func:`pipeline.text.segment.jieba_chunk`)
``dress``, ``pwkp``                    the releases are PTB-tokenised and cased: PTB tokens, then the reader's
                                       own step (``lowercase``)
``turkcorpus``, ``ewsew``              PTB tokens, then the EW-SEW reader's steps that bring text to TurkCorpus's
                                       conventions (:func:`pipeline.corpora.ewsew.turk_normalise`: ``-lrb-``,
                                       plain ``"``; lowercase). ``turkcorpus`` is lowercased as published, so
                                       both always lowercase unless ``ewsew`` sets ``lowercase: false``.
``europarl``                           Moses ``tokenizer.perl -l <src_lang>`` via sacremoses
                                       (:func:`pipeline.corpora.europarl.tokenise`, same ``escape``)
=====================================  ====================================================================

``pretokenized=True`` skips the tokeniser for text already in the corpus's token form (one space
between tokens, e.g. a line of the released ``input.txt``): whitespace split plus the reader's token
steps (lowercase, digits ``#``, TurkCorpus forms). A corpus prepared with ``subword:`` is encoded
with its sentencepiece model (``subword_model``, written beside the shards) after the reader's step,
and :func:`detokenize` decodes the pieces back.

Not supported (``ValueError``): ``gigaword_pointers`` ``mode: entity`` (its sources are
anonymised ``@entity<n>`` by an NER tagger; serving would need the tagger and the de-anonymisation
map) and readers not listed above.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

Tokenizer = Callable[[str], list[str]]

WHITESPACE_READERS = frozenset({"copynet_rules", "rarest_word"})
RUSH_READERS = frozenset({"gigaword", "gigaword_pointers", "duc"})
PTB_CASED_READERS = frozenset({"dress", "pwkp"})
TURK_READERS = frozenset({"turkcorpus", "ewsew"})
SUPPORTED_READERS = WHITESPACE_READERS | RUSH_READERS | PTB_CASED_READERS | TURK_READERS | {"lcsts", "europarl"}


def _reader(settings: dict) -> str:
    if not isinstance(settings, dict) or "reader" not in settings:
        raise ValueError(f"prepare settings must be a mapping with a 'reader' key, got {settings!r}")
    reader = settings["reader"]
    if reader not in SUPPORTED_READERS:
        raise ValueError(f"raw-text input is not supported for reader {reader!r}; supported: {sorted(SUPPORTED_READERS)}")
    return reader


def _whitespace(text: str) -> list[str]:
    return text.split()


def _rush(settings: dict, pretokenized: bool) -> Tokenizer:
    from pipeline.corpora.gigaword import lead_tokens
    from pipeline.text.normalize import normalize_unk, rush_normalize

    if settings["reader"] == "gigaword_pointers" and settings.get("mode", "unk") != "unk":
        raise ValueError(f"raw-text input is not supported for gigaword_pointers mode {settings.get('mode')!r}: "
                         "its sources are NER-anonymised (@entity<n>); only mode 'unk' can be served")
    if pretokenized:  # a line of the Rush release: UNK spellings unified as the rush reader does
        return lambda text: rush_normalize(normalize_unk(text.split()))
    short_lead = int(settings.get("short_lead_chars", 0) or 0) if settings["reader"] == "duc" else 0
    # lead_tokens reads a document's paragraphs; the reader's paragraphs are whitespace-collapsed.
    return lambda text: lead_tokens([" ".join(text.split())], short_lead)[0]


def _ptb_cased(settings: dict, pretokenized: bool) -> Tokenizer:
    from pipeline.text.ptb import tokenize

    lower = bool(settings.get("lowercase", False))

    def run(text: str) -> list[str]:
        tokens = text.split() if pretokenized else tokenize(text)
        return [t.lower() for t in tokens] if lower else tokens

    return run


def _turk(settings: dict, pretokenized: bool) -> Tokenizer:
    from pipeline.corpora.ewsew import turk_normalise
    from pipeline.text.ptb import tokenize

    # TurkCorpus's .tok files are lowercased (its reader's lowercase: false means "already").
    lower = True if settings["reader"] == "turkcorpus" else bool(settings.get("lowercase", True))
    forms = True if settings["reader"] == "turkcorpus" else bool(settings.get("turk_tokens", True))

    def run(text: str) -> list[str]:
        tokens = text.split() if pretokenized else tokenize(text)
        if lower:
            tokens = [t.lower() for t in tokens]
        return turk_normalise(tokens, lower)[0] if forms else tokens

    return run


def _lcsts(settings: dict, pretokenized: bool) -> Tokenizer:
    view = settings.get("view", "char")
    if pretokenized:
        return _whitespace
    if view == "char":
        from pipeline.text.segment import char_tokens

        return char_tokens
    if view == "word":
        from pipeline.text.segment import jieba_chunk

        hmm = bool(settings.get("jieba_hmm", True))
        return lambda text: jieba_chunk(hmm, [text.strip()])[0].split()
    raise ValueError(f"lcsts view must be 'char' or 'word', got {view!r}")


def _europarl(settings: dict, pretokenized: bool) -> Tokenizer:
    if pretokenized:
        return _whitespace
    from pipeline.corpora.europarl import tokenise

    lang, escape = settings.get("src_lang", "en"), bool(settings.get("escape", False))
    return lambda text: tokenise(text, lang, escape) if text.strip() else []


def _subword(settings: dict, subword_model: str | Path | None):
    if not settings.get("subword"):
        return None
    if subword_model is None:
        raise ValueError(f"prepare settings of reader {settings['reader']!r} use subword {settings['subword']}: "
                         "pass subword_model (the subword.model beside the corpus's shards)")
    from pipeline.text.subword import SentencePieceTokenizer

    return SentencePieceTokenizer(subword_model)


def source_tokenizer(prepare_settings: dict, pretokenized: bool = False,
                     subword_model: str | Path | None = None) -> Tokenizer:
    """A function ``raw text -> source tokens`` for the corpus whose reader settings are given
    (``params['prepare'][<task>]``); see the module docstring for each reader. ``ValueError`` names
    an unknown or unsupported reader."""
    reader = _reader(prepare_settings)
    if reader in WHITESPACE_READERS:
        words = _whitespace
    elif reader in RUSH_READERS:
        words = _rush(prepare_settings, pretokenized)
    elif reader in PTB_CASED_READERS:
        words = _ptb_cased(prepare_settings, pretokenized)
    elif reader in TURK_READERS:
        words = _turk(prepare_settings, pretokenized)
    elif reader == "lcsts":
        words = _lcsts(prepare_settings, pretokenized)
    else:
        words = _europarl(prepare_settings, pretokenized)
    sp = _subword(prepare_settings, subword_model)
    if sp is None:
        return words
    return lambda text: sp.encode_tokens(words(text))


def detokenize(tokens: Sequence[str], prepare_settings: dict, subword_model: str | Path | None = None) -> str:
    """Output tokens -> text: LCSTS (Chinese, either view) joins without spaces, every other corpus
    with single spaces (its references are token sequences too); subword pieces are decoded first."""
    reader = _reader(prepare_settings)
    sp = _subword(prepare_settings, subword_model)
    words = sp.decode_tokens(tokens) if sp is not None else list(tokens)
    return "".join(words) if reader == "lcsts" else " ".join(words)
