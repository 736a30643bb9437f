"""A served model's settings and the limits every request meets, without torch: what the PyTorch
:class:`pipeline.serving.predictor.Predictor`, the ONNX one (:mod:`pipeline.serving.onnx_predictor`)
and the ``predict`` command's front share.

:class:`ServingConfig` is ``serving.json`` (the reader settings, the evaluate stage's decoding settings
and the limits of ``params['serving']``, docs/tracking.md); :class:`RequestChecks` refuses a request
over a limit before anything is decoded (:class:`InputRejected`, HTTP 400 / ``predict`` exit code 2),
with the same messages as the PyTorch predictor, and hands out the ``max_concurrent`` decoding slots
(:class:`ServerBusy`); both predictors are :class:`RequestChecks`, so a request is refused alike
whichever runtime serves it.
"""

from __future__ import annotations

import numbers
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from pipeline.config.checks import check_serving
from pipeline.config.schema import ServingSettings, build
from pipeline.config.validation import dataclass_from_dict
from pipeline.data.corpora.raw_input import features_splitter, source_tokenizer
from pipeline.decoding.outcomes import DecodeCancelled, DecodeTimeout
from pipeline.decoding.settings import EvalConfig
from pipeline.io.files import sha256_tree
from pipeline.vocab.vocabulary import Vocab

DECODE_KEYS = (
    "beam_size",
    "max_len",
    "min_len",
    "length_penalty",
    "block_ngram",
    "batch_size",
    "max_src_len",
    "replace_unk",
    "ban_unk",
)
# params['serving']: the limits a served model applies (ServingConfig fields of the same names)
LIMIT_KEYS = tuple(f.name for f in fields(ServingSettings))  # params.yaml `serving`: the limits


@dataclass(frozen=True)
class ServingConfig:
    """What a served model needs besides its weights and vocabularies (``serving.json``)."""

    task: str
    mechanism: str
    prepare: dict  # the corpus reader's settings (params['prepare'][task]): how raw text is tokenised
    beam_size: int = 10
    max_len: int = 50
    min_len: int = 0
    length_penalty: float = 0.0
    block_ngram: int = 0
    batch_size: int = 64
    max_src_len: int | None = None
    replace_unk: bool = False  # as evaluate.replace_unk / ban_unk: the served model decodes as it was scored
    ban_unk: bool = False
    device: str = "cpu"  # cpu | auto | cuda[:N]
    pretokenized: bool = False  # True: inputs are already the corpus's tokens, space-separated
    extra: dict = field(default_factory=dict)  # free-form provenance (run id, git commit ...)
    files: dict = field(default_factory=dict)  # artifact file name -> sha256 at logging, checked at loading
    # Limits (params['serving'], the schema's types, ranges and defaults; a serving.json written before
    # they existed gets these defaults)
    max_inputs: int = ServingSettings.max_inputs  # texts per request (predict: lines per decoding chunk)
    max_input_chars: int = ServingSettings.max_input_chars  # characters per text, checked before tokenising
    max_src_tokens: int = ServingSettings.max_src_tokens  # source tokens per text, after tokenising
    max_beam_size: int = ServingSettings.max_beam_size  # the largest beam_size a request may ask for
    max_output_len: int = ServingSettings.max_output_len  # the largest max_len a request may ask for
    request_timeout_s: float = ServingSettings.request_timeout_s  # decoding stops after this (HTTP 504)
    max_concurrent: int = ServingSettings.max_concurrent  # decodes at once per server process (then HTTP 503)
    max_batch_positions: int = ServingSettings.max_batch_positions  # beam rows x source tokens per batch
    unknown_warning: float = ServingSettings.unknown_warning  # warn above this share of unknown source tokens

    def __post_init__(self) -> None:
        build(ServingSettings, {k: getattr(self, k) for k in LIMIT_KEYS}, "serving")  # the schema's checks
        check_serving(
            {"beam_size": self.beam_size, "max_len": self.max_len},
            {"max_beam_size": self.max_beam_size, "max_output_len": self.max_output_len},
        )

    @classmethod
    def from_dict(cls, d: dict) -> ServingConfig:
        """A saved config (``serving.json``). One saved before the limits existed gets the default
        limits, its caps raised to its own default ``beam_size``/``max_len`` where those are larger."""
        d = dict(d)
        defaults = {f.name: f.default for f in fields(cls)}
        for key, cap in (("beam_size", "max_beam_size"), ("max_len", "max_output_len")):
            if cap not in d:
                d[cap] = max(defaults[cap], d.get(key, defaults[key]))
        return dataclass_from_dict(cls, d)

    @classmethod
    def from_params(
        cls,
        task: str,
        mechanism: str,
        prepare_settings: dict,
        evaluate_settings: dict,
        serving_settings: dict | None = None,
        **overrides,
    ) -> ServingConfig:
        """The decoding settings of the evaluate stage (``params['evaluate']``, the task's overrides
        applied), the reader settings of ``params['prepare'][task]`` and the limits of
        ``params['serving']`` (an unknown key there is an error)."""
        decode = {k: evaluate_settings[k] for k in DECODE_KEYS if k in evaluate_settings}
        limits = vars(build(ServingSettings, serving_settings, "serving"))  # every limit, checked
        return cls(task=task, mechanism=mechanism, prepare=dict(prepare_settings), **{**decode, **limits, **overrides})

    def eval_config(self, **overrides) -> EvalConfig:
        d = {k: getattr(self, k) for k in DECODE_KEYS}
        d.update({k: v for k, v in overrides.items() if v is not None})
        return EvalConfig(**d, topk=d["beam_size"], splits=(), device=self.device)


class InputRejected(ValueError):
    """A request over a serving limit, or malformed: refused before anything is decoded (HTTP 400,
    ``predict`` exit code 2). ``index``: the offending text's row in the request (None: the request
    as a whole or a parameter); ``reason``: what is wrong, without the row."""

    def __init__(self, reason: str, index: int | None = None) -> None:
        self.reason, self.index = reason, index
        super().__init__(reason if index is None else f"text {index}: {reason}")


class ServerBusy(RuntimeError):
    """No decoding slot (``max_concurrent``) came free before the request's deadline (HTTP 503)."""


def refusal_message(err: Exception, timeout_s: float) -> str | None:
    """What the client of a refused or interrupted request is told (the HTTP error body, or ``predict``'s
    error line); None for any other error."""
    if isinstance(err, InputRejected):
        return f"request refused: {err}"
    if isinstance(err, DecodeTimeout):
        return (
            f"decoding stopped: the request took longer than its {timeout_s:g} s deadline "
            "(serving.request_timeout_s); send fewer or shorter texts, or a smaller beam_size or max_len"
        )
    if isinstance(err, DecodeCancelled):
        return "decoding stopped: the server is shutting down; retry the request"
    if isinstance(err, ServerBusy):
        return str(err)
    return None


def verify_files(config: ServingConfig, paths: Sequence[str | Path]) -> None:
    """The model files are those the model was logged with (``config.files``); a ValueError naming
    the file otherwise, before any of them is loaded."""
    for path in paths:
        expected = config.files.get(Path(path).name)
        if expected is not None and sha256_tree(path) != expected:  # a file, or a directory (a tokenizer)
            raise ValueError(
                f"{path}: sha256 differs from the one recorded when the model was logged; "
                "the stored model was changed, refusing to serve it"
            )


class RequestChecks:
    """The limits of a request, as every predictor applies them. A subclass sets ``config``,
    ``src_vocab``, ``features_vocab`` (or None), ``subword_model`` and, for a model on a pretrained
    backbone, ``backbone`` (its :class:`pipeline.vocab.tokenizer.BackboneTokenizer`), then calls
    :meth:`init_checks`."""

    config: ServingConfig
    src_vocab: Vocab
    features_vocab: Vocab | None
    subword_model: str | None
    backbone = None  # a model on a pretrained backbone: its tokenizer (source words -> pieces)

    def init_checks(self) -> None:
        self.split_features = features_splitter(self.config.prepare) if self.features_vocab else None
        self.tokenize = source_tokenizer(self.config.prepare, self.config.pretokenized, self.subword_model)
        self._tokenizers = {
            flag: source_tokenizer(self.config.prepare, flag, self.subword_model) for flag in (False, True)
        }
        self.stop = threading.Event()  # set: running decodes stop, new ones are refused (shutdown)
        self._slots = threading.BoundedSemaphore(self.config.max_concurrent)

    def check_params(self, beam_size: Any = None, max_len: Any = None) -> tuple[int, int]:
        """The request's ``(beam_size, max_len)``: the config's when None; :class:`InputRejected` when
        one is not an integer >= 1 or is over its limit (``max_beam_size``, ``max_output_len``)."""
        out = []
        for name, value, default, cap in (
            ("beam_size", beam_size, self.config.beam_size, "max_beam_size"),
            ("max_len", max_len, self.config.max_len, "max_output_len"),
        ):
            if value is None:
                value = default
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise InputRejected(f"{name} must be an integer >= 1, got {value!r}")
            limit = getattr(self.config, cap)
            if value > limit:
                raise InputRejected(f"{name}={value} is over this model's limit of {limit} (serving.{cap})")
            out.append(int(value))
        return out[0], out[1]

    def tokenizer(self, pretokenized: bool | None = None):
        """The source tokeniser: the reader's, or a whitespace split of pretokenised text."""
        if pretokenized is None:
            return self.tokenize
        if not isinstance(pretokenized, bool):
            raise InputRejected(f"pretokenized must be true or false, got {pretokenized!r}")
        return self._tokenizers[pretokenized]

    def check_text(self, index: int, text: str, pretokenized: bool | None = None) -> list[str]:
        """The source tokens of one text, or :class:`InputRejected` naming ``index`` (too many characters
        or tokens, or not tokenisable)."""
        cfg = self.config
        if len(text) > cfg.max_input_chars:
            raise InputRejected(
                f"{len(text)} characters, over the limit of {cfg.max_input_chars} (serving.max_input_chars)", index
            )
        tokenize = self.tokenizer(pretokenized)
        try:
            tokens = tokenize(text)
        except ValueError as err:
            raise InputRejected(f"cannot be tokenised: {err}", index) from None
        if len(tokens) > cfg.max_src_tokens:
            raise InputRejected(
                f"{len(tokens)} source tokens, over the limit of {cfg.max_src_tokens} (serving.max_src_tokens)", index
            )
        return tokens

    def check_inputs(self, texts: Sequence[str], pretokenized: bool | None = None) -> list[list[str]]:
        """The source tokens of every text, after the request-level and per-text limits."""
        if len(texts) > self.config.max_inputs:
            raise InputRejected(
                f"{len(texts)} texts in one request, over the limit of {self.config.max_inputs} "
                "(serving.max_inputs): send them in smaller requests"
            )
        return [self.check_text(i, t, pretokenized) for i, t in enumerate(texts)]

    def check_features(self, index: int, value: Any) -> list[str]:
        """The tags of one text's features (a text split as the corpus's column was, or a list of
        tags; none for None or ''), or :class:`InputRejected` naming ``index``."""
        if value is None or (isinstance(value, float) and value != value) or (isinstance(value, str) and not value):
            return []
        if isinstance(value, str):
            if len(value) > self.config.max_input_chars:
                raise InputRejected(f"features of {len(value)} characters, over serving.max_input_chars", index)
            tags = self.split_features(value) if self.split_features else value.split()
        elif not isinstance(value, bytes) and hasattr(value, "__iter__") and all(isinstance(t, str) for t in value):
            tags = [t.strip() for t in value if t.strip()]
        else:
            raise InputRejected(f"features must be a text such as 'V;PST' or a list of tags, not {value!r}", index)
        if tags and self.features_vocab is None:
            raise InputRejected("this model takes no features (its task has no features column)", index)
        return tags

    def features_warning(self, tags: Sequence[str]) -> str:
        """A warning naming the tags the model never saw in training; else ''."""
        unknown = [t for t in tags if self.features_vocab is not None and t not in self.features_vocab]
        return f"features {unknown} are outside the model's features vocabulary: read as <unk>" if unknown else ""

    def unknown_warning(self, tokens: Sequence[str]) -> str:
        """A warning when more than ``unknown_warning`` of the source tokens (a backbone's pieces, where
        the model has one: unknown where its tokenizer has <unk>) are outside the source vocabulary;
        else ''."""
        if not tokens:
            return ""
        if self.backbone is not None:
            tokens = self.backbone.words_to_pieces([tokens])[0]
        unknown = sum(t not in self.src_vocab for t in tokens)
        share = unknown / len(tokens)
        if share <= self.config.unknown_warning:
            return ""
        return (
            f"{unknown} of {len(tokens)} source tokens ({share:.0%}) are outside the model's vocabulary "
            f"(more than serving.unknown_warning={self.config.unknown_warning:g}): the output is likely unreliable"
        )

    def admit(
        self,
        texts: Sequence[str],
        beam_size: Any = None,
        max_len: Any = None,
        pretokenized: bool | None = None,
        features: Sequence[Any] | None = None,
    ) -> tuple[int, int, list[list[str]], list[list[str]], list[dict]]:
        """Every limit of a request, before anything is decoded: ``(beam_size, max_len, sources, tags,
        rows)``, ``rows`` one answer per text (empty output, its warning) for the decoder to fill."""
        beam_size, max_len = self.check_params(beam_size, max_len)
        sources = self.check_inputs(texts, pretokenized)
        if features is not None and len(features) != len(texts):
            raise InputRejected(f"{len(features)} features for {len(texts)} texts: give one per text (or none)")
        tags = [self.check_features(i, f) for i, f in enumerate(features)] if features is not None else None
        tags = tags or [[] for _ in sources]
        rows = []
        for s, t in zip(sources, tags):
            warning = "; ".join(w for w in (self.unknown_warning(s), self.features_warning(t)) if w)
            rows.append({"src": s, "tokens": [], "output": "", "copied": [], "score": 0.0, "warning": warning})
        return beam_size, max_len, sources, tags, rows

    @contextmanager
    def _slot(self, deadline: float) -> Iterator[None]:
        """One of the ``max_concurrent`` decoding slots, waited for until ``deadline``."""
        waited = time.monotonic()
        while not self._slots.acquire(timeout=0.05):
            if self.stop.is_set():
                raise DecodeCancelled("stopped while waiting for a decoding slot")
            if time.monotonic() > deadline:
                raise ServerBusy(
                    f"the server is busy: {self.config.max_concurrent} decoding(s) at a time (serving.max_concurrent) "
                    f"and none came free in {time.monotonic() - waited:.1f} s; retry later"
                )
        try:
            yield
        finally:
            self._slots.release()
