"""A user's raw text -> source tokens, exactly as the task's corpus reader normalises its source side.

A model only understands tokens made the way its training shards were made, so serving and the
``predict`` command tokenise with the reader's own function: every reader module that accepts raw
text declares ``source_tokenizer(settings, pretokenized) -> (str -> list[str])`` (``settings`` =
``params['prepare'][<task>]``), and may declare ``DETOKENIZE_JOIN`` (how :func:`detokenize` joins
output tokens; default ``" "``) or ``detokenize_join(settings)`` where the join depends on the
settings. This module only finds the reader (by name,
:func:`pipeline.data.corpora.reader_module`) and adds the subword step. What each module declares:

=====================================  ====================================================================
reader (``prepare.<task>.reader``)     its ``source_tokenizer``: raw text -> source tokens
=====================================  ====================================================================
``copynet_rules``, ``rarest_word``     whitespace split (the generated symbols ``s12 u3 w7`` ...)
``gigaword`` (rush and sgml),          Rush et al. 2015 (section 7), :func:`pipeline.data.corpora.gigaword.rush_tokenizer`:
``gigaword_pointers`` (``mode: unk``), the lead sentence (text up to its first sentence-final period), a wire
``duc``                                dateline removed, PTB tokens (:mod:`pipeline.data.text.ptb`), lowercase, digits
                                       ``#``, ``&`` -> ``&amp;`` (:func:`pipeline.data.text.normalize.rush_normalize`);
                                       ``duc`` also joins a short lead with the next sentence
                                       (``short_lead_chars``). Rare words need nothing: the encoder reads every
                                       word outside its vocabulary as ``<unk>``, as the reader's ``<unk>`` did.
                                       ``gigaword_pointers`` ``mode: entity`` raises ``ValueError`` (its sources
                                       are anonymised ``@entity<n>`` by an NER tagger; serving would need the
                                       tagger and the de-anonymisation map).
``lcsts`` ``view: char``               every non-whitespace character (:func:`pipeline.data.text.segment.char_tokens`)
``lcsts`` ``view: word``               jieba words, same HMM flag (:func:`pipeline.data.text.segment.jieba_chunk`);
                                       ``lcsts`` also declares ``DETOKENIZE_JOIN = ""`` (Chinese, either view)
``dress``, ``pwkp``                    the releases are PTB-tokenised and cased: PTB tokens, then the reader's
                                       own step (``lowercase``): :func:`pipeline.data.corpora.dress.ptb_tokenizer`
``turkcorpus``, ``ewsew``              PTB tokens, then the EW-SEW reader's steps that bring text to TurkCorpus's
                                       conventions (:func:`pipeline.data.corpora.turkcorpus.turk_tokenizer`: ``-lrb-``,
                                       plain ``"``; lowercase). ``turkcorpus`` is lowercased as published, so
                                       both always lowercase unless ``ewsew`` sets ``lowercase: false``.
``europarl``                           Moses ``tokenizer.perl -l <src_lang>`` via sacremoses
                                       (:func:`pipeline.data.corpora.europarl.tokenise`, same ``escape``)
``parallel`` (your own corpus)         its ``tokenizer``: whitespace, Moses (``lang``), characters or jieba words,
                                       then ``lowercase`` / ``mask_digits`` (:class:`pipeline.data.corpora.parallel.TokenSpec`);
                                       ``detokenize_join``: no space for characters and jieba words
=====================================  ====================================================================

``pretokenized=True`` skips the tokeniser for text already in the corpus's token form (one space
between tokens, e.g. a line of the released ``input.txt``): whitespace split plus the reader's token
steps (lowercase, digits ``#``, TurkCorpus forms). A corpus prepared with ``subword:`` is encoded
with its sentencepiece model (``subword_model``, written beside the shards) after the reader's step,
and :func:`detokenize` decodes the pieces back.

A corpus with a features column (tags kept apart from the source, ``parallel``'s ``features_col``)
takes a features text beside each raw text: :func:`features_splitter` splits it as the reader split
its column (the reader module's ``split_features``, on ``features_sep``).

A reader without ``source_tokenizer``, or an unknown reader, raises ``ValueError`` naming the
readers that have one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

from pipeline.data.corpora import reader_module, reader_names
from pipeline.data.text.subword import SentencePieceTokenizer

Tokenizer = Callable[[str], list[str]]


def supported_readers() -> list[str]:
    """The readers whose module declares ``source_tokenizer`` (imports every reader module)."""
    return [name for name in reader_names() if hasattr(reader_module(name), "source_tokenizer")]


def _reader(settings: dict) -> ModuleType:
    """The reader module named by ``settings['reader']``, if it accepts raw text."""
    if not isinstance(settings, dict) or "reader" not in settings:
        raise ValueError(f"prepare settings must be a mapping with a 'reader' key, got {settings!r}")
    name = settings["reader"]
    try:
        module = reader_module(name)
    except ValueError:  # unknown, or not a reader: no raw-text input either
        module = None
    if module is None or not hasattr(module, "source_tokenizer"):
        raise ValueError(f"raw-text input is not supported for reader {name!r}; supported: {supported_readers()}")
    return module


def _subword(settings: dict, subword_model: str | Path | None):
    if not settings.get("subword"):
        return None
    if subword_model is None:
        raise ValueError(
            f"prepare settings of reader {settings['reader']!r} use subword {settings['subword']}: "
            "pass subword_model (the subword.model beside the corpus's shards)"
        )
    return SentencePieceTokenizer(subword_model)


def accepts_raw_text(prepare_settings: dict) -> bool:
    """Whether the corpus's reader tokenises raw text with these settings (serving, ``predict``, the
    logged model's input example): its module declares ``source_tokenizer``, and its optional
    ``raw_text_refusal(settings)`` finds nothing to refuse (``gigaword_pointers`` refuses ``mode:
    entity``)."""
    try:
        module = _reader(prepare_settings)
    except ValueError:
        return False
    refusal = getattr(module, "raw_text_refusal", None)
    return refusal is None or not refusal(prepare_settings)


def source_tokenizer(
    prepare_settings: dict, pretokenized: bool = False, subword_model: str | Path | None = None
) -> Tokenizer:
    """A function ``raw text -> source tokens`` for the corpus whose reader settings are given
    (``params['prepare'][<task>]``): the reader module's ``source_tokenizer``, then the subword model
    when the corpus has one. ``ValueError`` names an unknown or unsupported reader."""
    words = _reader(prepare_settings).source_tokenizer(prepare_settings, pretokenized)
    sp = _subword(prepare_settings, subword_model)
    if sp is None:
        return words
    return lambda text: sp.encode_tokens(words(text))


def features_splitter(prepare_settings: dict) -> Tokenizer:
    """A function ``features text -> tags`` for a corpus with a features column, as its reader split
    the column; ``ValueError`` when the corpus has none."""
    split = getattr(_reader(prepare_settings), "split_features", None)
    if split is None or prepare_settings.get("features_col") is None:
        raise ValueError(f"reader {prepare_settings['reader']!r} with these settings has no features column")
    sep = prepare_settings.get("features_sep", ";")
    return lambda text: split(text, sep)


def detokenize(tokens: Sequence[str], prepare_settings: dict, subword_model: str | Path | None = None) -> str:
    """Output tokens -> text, joined by the reader module's ``DETOKENIZE_JOIN`` (default a single
    space: references are token sequences too; LCSTS declares ``""``); subword pieces are decoded
    first."""
    module = _reader(prepare_settings)
    if hasattr(module, "detokenize_join"):  # the join depends on the settings (parallel's tokenizer)
        join = module.detokenize_join(prepare_settings)
    else:
        join = getattr(module, "DETOKENIZE_JOIN", " ")
    sp = _subword(prepare_settings, subword_model)
    words = sp.decode_tokens(tokens) if sp is not None else list(tokens)
    return join.join(words)
