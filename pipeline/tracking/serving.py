"""A trained model as an MLflow pyfunc model: raw text in, output text (and copied words) out.

:class:`Predictor` is the whole path, with no MLflow in it: raw text -> the corpus reader's source
tokens (:mod:`pipeline.data.corpora.raw_input`) -> the project's batched beam search
(:func:`pipeline.evaluate.decode_table`, so a prediction here equals the evaluate stage's for the
same tokens) -> extended ids back to words, a source word outside the decoder vocabulary coming
out as itself when the model copies it (:func:`pipeline.vocab.extended.ext_ids_to_tokens`) ->
text (:func:`pipeline.data.corpora.raw_input.detokenize`). ``copied`` lists those output tokens that are
source words outside the decoder vocabulary: only a copy (pointer) can produce them, so they
are the copies one can be sure of (a copy of an in-vocabulary word looks like a generated one).

:class:`CopySeqModel` wraps a Predictor as an ``mlflow.pyfunc.PythonModel`` whose artifacts are
``model.pt``, ``src.vocab``, ``tgt.vocab``, ``serving.json`` (:class:`ServingConfig`) and, for a
subword corpus, ``subword.model``. :func:`log_pyfunc_model` logs it under a run with pinned
requirements, a signature (input column ``text``; outputs ``output``, ``copied``, ``tokens``,
``warning``; params ``beam_size``, ``max_len``) and the ``pipeline``/``models`` packages as code paths, so
``mlflow models serve -m models:/<task>@champion --env-manager local`` answers with this code.

Limits (``params['serving']``, kept in ``serving.json``; docs/tracking.md): texts per request,
characters per text, source tokens per text, the largest ``beam_size``/``max_len`` a client may
ask for, a decoding deadline per request and the number of decodes at once. A violation is refused
before anything is decoded (:class:`InputRejected`; HTTP 400 from ``mlflow models serve``, exit
code 2 from ``predict``), never silently clamped. A source whose tokens are mostly outside the
source vocabulary is decoded but its row carries a ``warning``. Decoding checks the deadline and a
stop event between steps: a request that runs too long is answered 504, and SIGTERM/SIGINT to the
server stops a running decode (503) instead of waiting for it.
"""

from __future__ import annotations

import importlib.metadata
import json
import numbers
import os
import signal
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import mlflow
import pandas as pd
import pyarrow as pa
from mlflow.exceptions import MlflowException

from pipeline.checkpoints import load_model
from pipeline.config.params import REPO_ROOT
from pipeline.config.validation import dataclass_from_dict
from pipeline.data.corpora.raw_input import detokenize, source_tokenizer
from pipeline.evaluate import EvalConfig, decode_table
from pipeline.io.files import sha256_file, write_json_atomic
from pipeline.search import DecodeCancelled, DecodeTimeout
from pipeline.vocab.vocabulary import Vocab

CONFIG_NAME = "serving.json"
ARTIFACT_NAME = "model"  # the logged model's name under its run
# What the served code imports (pipeline/, models/ and their third-party imports), pinned to the
# installed versions so the model's environment is the one it was logged from.
REQUIREMENTS = (
    "torch",
    "mlflow",
    "pandas",
    "numpy",
    "pyarrow",
    "polars",
    "pyyaml",
    "tqdm",
    "jieba",
    "sacremoses",
    "sentencepiece",
)
DECODE_KEYS = ("beam_size", "max_len", "min_len", "length_penalty", "block_ngram", "batch_size", "max_src_len")
# params['serving']: the limits a served model applies (ServingConfig fields of the same names)
LIMIT_KEYS = (
    "max_inputs",
    "max_input_chars",
    "max_src_tokens",
    "max_beam_size",
    "max_output_len",
    "request_timeout_s",
    "max_concurrent",
    "max_batch_positions",
    "unknown_warning",
)


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
    device: str = "cpu"  # cpu | auto | cuda[:N]
    pretokenized: bool = False  # True: inputs are already the corpus's tokens, space-separated
    extra: dict = field(default_factory=dict)  # free-form provenance (run id, git commit ...)
    files: dict = field(default_factory=dict)  # artifact file name -> sha256 at logging, checked at loading
    # Limits (params['serving']; a serving.json written before they existed gets these defaults)
    max_inputs: int = 64  # texts per request (predict: lines per decoding chunk)
    max_input_chars: int = 20_000  # characters per text, checked before tokenising
    max_src_tokens: int = 400  # source tokens per text, after tokenising
    max_beam_size: int = 20  # the largest beam_size a request may ask for
    max_output_len: int = 200  # the largest max_len a request may ask for
    request_timeout_s: float = 30.0  # decoding stops after this many seconds (HTTP 504)
    max_concurrent: int = 1  # decodes at once per server process; others wait up to the timeout (HTTP 503)
    max_batch_positions: int = 100_000  # beam rows x source tokens per decoding batch (bounds memory)
    unknown_warning: float = 0.5  # warn above this fraction of source tokens outside the source vocabulary

    def __post_init__(self) -> None:
        ints = ("max_inputs", "max_input_chars", "max_src_tokens", "max_beam_size", "max_output_len")
        ints += ("max_concurrent", "max_batch_positions")
        bad = [k for k in ints if isinstance(getattr(self, k), bool) or not isinstance(getattr(self, k), int)]
        bad += [k for k in ints if k not in bad and getattr(self, k) < 1]
        timeout = self.request_timeout_s
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            bad.append("request_timeout_s")
        share = self.unknown_warning
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
            bad.append("unknown_warning")
        if bad:
            shown = ", ".join(f"{k}={getattr(self, k)!r}" for k in bad)
            raise ValueError(
                f"serving limits must be integers >= 1 (request_timeout_s a number > 0, unknown_warning "
                f"a fraction in [0, 1]): {shown}"
            )
        for key, cap in (("beam_size", "max_beam_size"), ("max_len", "max_output_len")):
            if getattr(self, key) > getattr(self, cap):
                raise ValueError(
                    f"the default {key}={getattr(self, key)} (evaluate settings) is over the serving limit "
                    f"{cap}={getattr(self, cap)}: raise serving.{cap}"
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
        limits = dict(serving_settings or {})
        unknown = sorted(set(limits) - set(LIMIT_KEYS))
        if unknown:
            raise ValueError(f"params.yaml: unknown serving settings {unknown}; known: {list(LIMIT_KEYS)}")
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


def _texts(model_input: Any) -> list[str]:
    """A DataFrame with a ``text`` column (or a single column), a Series, a list/tuple of str, a
    dict ``{"text": [...]}`` or one str -> the list of input texts."""
    if isinstance(model_input, pd.DataFrame):
        if "text" in model_input.columns:
            col = model_input["text"]
        elif model_input.shape[1] == 1:
            col = model_input.iloc[:, 0]
        else:
            raise InputRejected(f"input DataFrame needs a 'text' column, has {list(model_input.columns)}")
        values = col.tolist()
    elif isinstance(model_input, pd.Series):
        values = model_input.tolist()
    elif isinstance(model_input, dict) and "text" in model_input:
        values = list(model_input["text"]) if not isinstance(model_input["text"], str) else [model_input["text"]]
    elif isinstance(model_input, str):
        values = [model_input]
    elif isinstance(model_input, (list, tuple)):
        values = list(model_input)
    else:
        raise InputRejected(
            f"expected a DataFrame with a 'text' column or a list of str, got {type(model_input).__name__}"
        )
    bad = [i for i, v in enumerate(values) if not isinstance(v, str)]
    if bad:
        raise InputRejected(f"is {type(values[bad[0]]).__name__}, not str", bad[0])
    return values


def verify_files(config: ServingConfig, paths: Sequence[str | Path]) -> None:
    """The model files are those the model was logged with (``config.files``); a ValueError naming
    the file otherwise, before any of them is loaded."""
    for path in paths:
        expected = config.files.get(Path(path).name)
        if expected is not None and sha256_file(path) != expected:
            raise ValueError(
                f"{path}: sha256 differs from the one recorded when the model was logged; "
                "the stored model was changed, refusing to serve it"
            )


class Predictor:
    """Raw text -> output text with one trained model (no MLflow involved), within the limits of
    its :class:`ServingConfig`."""

    def __init__(
        self,
        checkpoint: str | Path,
        src_vocab: str | Path,
        tgt_vocab: str | Path,
        config: ServingConfig,
        subword_model: str | Path | None = None,
    ) -> None:
        from pipeline.train import resolve_device

        self.config = config
        self.device = resolve_device(config.device)
        self.src_vocab, self.tgt_vocab = Vocab.load(src_vocab), Vocab.load(tgt_vocab)
        self.model, _ = load_model(checkpoint, config.mechanism, self.device, (self.src_vocab, self.tgt_vocab))
        self.subword_model = str(subword_model) if subword_model else None
        self.tokenize = source_tokenizer(config.prepare, config.pretokenized, self.subword_model)
        self.stop = threading.Event()  # set: running decodes stop, new ones are refused (shutdown)
        self._slots = threading.BoundedSemaphore(config.max_concurrent)

    @classmethod
    def from_checkpoint_dir(
        cls,
        checkpoint_dir: str | Path,
        vocab_dir: str | Path,
        config: ServingConfig,
        subword_model: str | Path | None = None,
    ) -> Predictor:
        """``<checkpoint_dir>/model.pt`` with ``<vocab_dir>/{src,tgt}.vocab`` (the stage outputs)."""
        checkpoint_dir, vocab_dir = Path(checkpoint_dir), Path(vocab_dir)
        return cls(checkpoint_dir / "model.pt", vocab_dir / "src.vocab", vocab_dir / "tgt.vocab", config, subword_model)

    # ----------------------------------------------------------------------------- the limits
    def check_params(self, beam_size: Any = None, max_len: Any = None) -> tuple[int, int]:
        """The request's ``(beam_size, max_len)``: the config's when None; an :class:`InputRejected`
        when one is not an integer >= 1 or is over its limit (``max_beam_size``, ``max_output_len``)."""
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

    def check_text(self, index: int, text: str) -> list[str]:
        """The source tokens of one text, or an :class:`InputRejected` naming ``index`` when the text
        is longer than ``max_input_chars`` characters or ``max_src_tokens`` tokens (or cannot be
        tokenised)."""
        cfg = self.config
        if len(text) > cfg.max_input_chars:
            raise InputRejected(
                f"{len(text)} characters, over the limit of {cfg.max_input_chars} (serving.max_input_chars)", index
            )
        try:
            tokens = self.tokenize(text)
        except ValueError as err:
            raise InputRejected(f"cannot be tokenised: {err}", index) from None
        if len(tokens) > cfg.max_src_tokens:
            raise InputRejected(
                f"{len(tokens)} source tokens, over the limit of {cfg.max_src_tokens} (serving.max_src_tokens)", index
            )
        return tokens

    def check_inputs(self, texts: Sequence[str]) -> list[list[str]]:
        """The source tokens of every text, after the request-level and per-text limits."""
        if len(texts) > self.config.max_inputs:
            raise InputRejected(
                f"{len(texts)} texts in one request, over the limit of {self.config.max_inputs} "
                "(serving.max_inputs): send them in smaller requests"
            )
        return [self.check_text(i, t) for i, t in enumerate(texts)]

    def unknown_warning(self, tokens: Sequence[str]) -> str:
        """A warning when more than ``unknown_warning`` of the source tokens are outside the source
        vocabulary (another language, another domain: the output is made up); else ''."""
        if not tokens:
            return ""
        unknown = sum(t not in self.src_vocab for t in tokens)
        share = unknown / len(tokens)
        if share <= self.config.unknown_warning:
            return ""
        return (
            f"{unknown} of {len(tokens)} source tokens ({share:.0%}) are outside the model's vocabulary "
            f"(more than serving.unknown_warning={self.config.unknown_warning:g}): the output is likely unreliable"
        )

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

    # ----------------------------------------------------------------------------- decoding
    def predict(
        self,
        texts: Sequence[str],
        beam_size: int | None = None,
        max_len: int | None = None,
        deadline: float | None = None,
    ) -> list[dict]:
        """One dict per text, in order: ``src`` (tokens), ``tokens`` (output tokens), ``output``
        (text), ``copied`` (output tokens that are source words outside the decoder vocabulary),
        ``score`` (log-probability of the best hypothesis), ``warning`` ('' or why the output is
        likely unreliable). An empty source gives an empty output.

        Every limit is checked before decoding (:class:`InputRejected`). ``deadline`` (a
        ``time.monotonic()`` value; default: now + ``request_timeout_s``) ends decoding with
        :class:`pipeline.search.DecodeTimeout`; :attr:`stop` set ends it with
        :class:`pipeline.search.DecodeCancelled`; no slot free before the deadline: :class:`ServerBusy`."""
        if deadline is None:
            deadline = time.monotonic() + float(self.config.request_timeout_s)
        beam_size, max_len = self.check_params(beam_size, max_len)
        sources = self.check_inputs(texts)
        out = [
            {"src": s, "tokens": [], "output": "", "copied": [], "score": 0.0, "warning": self.unknown_warning(s)}
            for s in sources
        ]
        todo = [i for i, s in enumerate(sources) if s]
        if not todo:
            return out
        if self.stop.is_set():
            raise DecodeCancelled("stopped before decoding")
        list_type = pa.list_(pa.string())
        table = pa.table(
            {
                "id": pa.array([str(i) for i in todo]),
                "src": pa.array([sources[i] for i in todo], type=list_type),
                "tgt": pa.array([[] for _ in todo], type=list_type),
            }
        )
        # Memory is about beam rows x source positions per batch: fewer rows per batch for long sources.
        longest = max(len(sources[i]) for i in todo)
        rows = max(1, min(self.config.batch_size, self.config.max_batch_positions // (beam_size * longest)))
        cfg = self.config.eval_config(beam_size=beam_size, max_len=max_len, batch_size=rows)
        with self._slot(deadline):
            records = decode_table(
                self.model,
                table,
                self.src_vocab,
                self.tgt_vocab,
                cfg,
                self.device,
                desc="predict",
                deadline=deadline,
                stop=self.stop,
            )
        for i, rec in zip(todo, records):
            tokens = rec["pred"]
            out[i].update(
                tokens=tokens,
                copied=rec["copied"],
                score=rec["scores"][0],
                output=detokenize(tokens, self.config.prepare, self.subword_model),
            )
        return out


class ServingException(MlflowException):
    """What a client of ``mlflow models serve`` is told: the scoring server answers an
    MlflowException raised by ``predict`` with its error code's HTTP status and its message
    (INVALID_PARAMETER_VALUE: 400, TEMPORARILY_UNAVAILABLE: 503, DEADLINE_EXCEEDED: 504).
    ``index``: the offending text's row in the request, when one is to blame (also a field of the
    JSON error body)."""

    def __init__(self, message: str, error_code: int, index: int | None = None) -> None:
        super().__init__(message, error_code=error_code, **({} if index is None else {"index": index}))
        self.index = index


def serving_exception(err: Exception, timeout_s: float) -> ServingException | None:
    """The client-facing form of a refused or interrupted request; None for any other error."""
    from mlflow.protos.databricks_pb2 import (
        DEADLINE_EXCEEDED,
        INVALID_PARAMETER_VALUE,
        TEMPORARILY_UNAVAILABLE,
    )

    if isinstance(err, InputRejected):
        return ServingException(f"request refused: {err}", INVALID_PARAMETER_VALUE, err.index)
    if isinstance(err, DecodeTimeout):
        return ServingException(
            f"decoding stopped: the request took longer than its {timeout_s:g} s deadline "
            "(serving.request_timeout_s); send fewer or shorter texts, or a smaller beam_size or max_len",
            DEADLINE_EXCEEDED,
        )
    if isinstance(err, DecodeCancelled):
        return ServingException(
            "decoding stopped: the server is shutting down; retry the request", TEMPORARILY_UNAVAILABLE
        )
    if isinstance(err, ServerBusy):
        return ServingException(str(err), TEMPORARILY_UNAVAILABLE)
    return None


def server_timeout_s() -> float | None:
    """Inside ``mlflow models serve``: its request timeout (``-t``, MLFLOW_SCORING_SERVER_REQUEST_TIMEOUT,
    default 60 s), after which it answers 504 whatever the model does; else None."""
    from mlflow.environment_variables import (
        _MLFLOW_IS_IN_SERVING_ENVIRONMENT,
        MLFLOW_SCORING_SERVER_REQUEST_TIMEOUT,
    )

    if not _MLFLOW_IS_IN_SERVING_ENVIRONMENT.get():
        return None
    return float(MLFLOW_SCORING_SERVER_REQUEST_TIMEOUT.get())


def in_scoring_server() -> bool:
    """This process is `mlflow models serve`'s server (it was started with the model path set)."""
    from mlflow.pyfunc import scoring_server

    return bool(os.environ.get(getattr(scoring_server, "_SERVER_MODEL_PATH", "__pyfunc_model_path__")))


def stop_on_signals(event: threading.Event, signals: Sequence[int] = (signal.SIGTERM, signal.SIGINT)) -> bool:
    """Set ``event`` when one of ``signals`` arrives, then do what the handler in place did (uvicorn's
    graceful shutdown, which waits for running requests: with the event set, their decoding stops at
    its next step). Only from the main thread (signal handlers live there); returns whether installed."""
    if threading.current_thread() is not threading.main_thread():
        return False
    for sig in signals:
        previous = signal.getsignal(sig)

        def handler(signum, frame, previous=previous):
            event.set()
            if callable(previous):
                previous(signum, frame)
            elif previous == signal.SIG_DFL:
                signal.signal(signum, signal.SIG_DFL)
                signal.raise_signal(signum)

        signal.signal(sig, handler)
    return True


def stop_on_server_exit(event: threading.Event, interval_s: float = 0.2) -> None:
    """Set ``event`` as soon as the server process is told to stop. uvicorn (which `mlflow models
    serve` runs) may load the model before it installs its own SIGTERM/SIGINT handler, which then
    replaces ours until its graceful shutdown has waited for the running requests: so besides our
    handler (:func:`stop_on_signals`, for a server that loads the model after installing its own),
    a daemon thread watches the handler in place and sets ``event`` once the server object it
    belongs to says ``should_exit`` (uvicorn.Server's shutdown flag)."""
    stop_on_signals(event)

    def watch() -> None:
        while not event.wait(interval_s):
            owner = getattr(signal.getsignal(signal.SIGTERM), "__self__", None)
            if getattr(owner, "should_exit", False) is True:
                event.set()

    threading.Thread(target=watch, name="copyseq-stop-on-server-exit", daemon=True).start()


def _quiet_type_hint_notice(message, category, filename, lineno, file=None, line=None, _show=warnings.showwarning):
    """MLflow warns, when the class below is created, that predict() has no type hints (under its
    own warning filter, so a filter here cannot silence it); it has an explicit signature instead
    (type hints would make MLflow infer and enforce a schema of its own)."""
    if "Add type hints to the `predict` method" not in str(message):
        _show(message, category, filename, lineno, file, line)


_previous_showwarning, warnings.showwarning = warnings.showwarning, _quiet_type_hint_notice


class CopySeqModel(mlflow.pyfunc.PythonModel):
    """The MLflow pyfunc face of a :class:`Predictor` (artifacts listed in the module docstring)."""

    def __init__(self, predictor: Predictor | None = None) -> None:
        self.predictor = predictor

    def __getstate__(self) -> dict:  # logged without the loaded model: load_context rebuilds it
        return {"predictor": None}

    def load_context(self, context) -> None:
        art = context.artifacts
        config = ServingConfig.from_dict(json.loads(Path(art["config"]).read_text(encoding="utf-8")))
        verify_files(config, [path for key, path in art.items() if key != "config"])
        self.predictor = Predictor(art["model"], art["src_vocab"], art["tgt_vocab"], config, art.get("subword_model"))
        if in_scoring_server():  # SIGTERM/SIGINT stop a running decode instead of waiting for it
            stop_on_server_exit(self.predictor.stop)

    def predict(self, context, model_input, params=None):
        """``model_input``: a DataFrame with a ``text`` column (or a list of str). Returns a
        DataFrame with ``output`` (text), ``copied`` and ``tokens`` (lists of str) and ``warning``
        ('' or why the output is likely unreliable), one row per input. ``params``: optional
        ``beam_size``, ``max_len`` (at most the limits). A refused or interrupted request raises a
        :class:`ServingException` (its error code gives the server's HTTP status)."""
        if self.predictor is None:
            raise RuntimeError("CopySeqModel has no model loaded (load it with mlflow.pyfunc.load_model)")
        params = params or {}
        timeout = float(self.predictor.config.request_timeout_s)
        server = server_timeout_s()
        if server is not None:  # end before the server answers 504 on its own, so the client sees why
            timeout = min(timeout, max(server - 1.0, server / 2))
        try:
            rows = self.predictor.predict(
                _texts(model_input),
                params.get("beam_size"),
                params.get("max_len"),
                deadline=time.monotonic() + timeout,
            )
        except (InputRejected, DecodeTimeout, DecodeCancelled, ServerBusy) as err:
            raise serving_exception(err, timeout) from err
        return pd.DataFrame(
            {
                "output": [r["output"] for r in rows],
                "copied": [r["copied"] for r in rows],
                "tokens": [r["tokens"] for r in rows],
                "warning": [r["warning"] for r in rows],
            }
        )


warnings.showwarning = _previous_showwarning


def copy_packages(dest: Path, packages: Sequence[str] = ("pipeline", "models")) -> list[str]:
    """Snapshot the ``.py`` files of the project's packages under ``dest`` (the model's code paths):
    only sources, so caches, editor temp files or a file being rewritten elsewhere never break
    the copy and the model carries exactly the code that was imported."""
    import shutil

    out = []
    for name in packages:
        src = REPO_ROOT / name
        for path in sorted(src.rglob("*.py")):
            target = dest / name / path.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
        out.append(str(dest / name))
    return out


def pinned_requirements() -> list[str]:
    """``name==version`` of each served dependency as installed here (a CPU build's local version
    suffix, ``+cpu``, dropped: the index serves the plain version)."""
    return [f"{name}=={importlib.metadata.version(name).split('+')[0]}" for name in REQUIREMENTS]


def signature(config: ServingConfig):
    from mlflow.models.signature import ModelSignature
    from mlflow.types.schema import (
        Array,
        ColSpec,
        DataType,
        ParamSchema,
        ParamSpec,
        Schema,
    )

    return ModelSignature(
        inputs=Schema([ColSpec(DataType.string, "text")]),
        outputs=Schema(
            [
                ColSpec(DataType.string, "output"),
                ColSpec(Array(DataType.string), "copied"),
                ColSpec(Array(DataType.string), "tokens"),
                # '' or why the output is likely unreliable (mostly unknown source words)
                ColSpec(DataType.string, "warning"),
            ]
        ),
        params=ParamSchema(
            [
                ParamSpec("beam_size", DataType.long, int(config.beam_size)),
                ParamSpec("max_len", DataType.long, int(config.max_len)),
            ]
        ),
    )


def log_pyfunc_model(
    run_id: str,
    checkpoint_dir: str | Path,
    vocab_dir: str | Path,
    config: ServingConfig | dict,
    input_example: Sequence[str] | None = None,
    subword_model: str | Path | None = None,
) -> str:
    """Log ``checkpoint_dir/model.pt`` + ``vocab_dir/{src,tgt}.vocab`` as a pyfunc model named
    ``model`` under the run ``run_id`` (reused when it is the active run, else reopened); returns
    the model URI to register (``models:/m-...``). ``input_example``: a few raw texts (stored with
    the model and shown by the UI; the first is decoded once at logging to validate the model)."""
    config = config if isinstance(config, ServingConfig) else ServingConfig.from_dict(config)
    checkpoint_dir, vocab_dir = Path(checkpoint_dir), Path(vocab_dir)
    with tempfile.TemporaryDirectory(prefix="serving-") as tmp:
        config_path = Path(tmp) / CONFIG_NAME
        artifacts = {
            "model": str(checkpoint_dir / "model.pt"),
            "src_vocab": str(vocab_dir / "src.vocab"),
            "tgt_vocab": str(vocab_dir / "tgt.vocab"),
        }
        if subword_model:
            artifacts["subword_model"] = str(subword_model)
        missing = [p for p in artifacts.values() if not Path(p).is_file()]
        if missing:
            raise FileNotFoundError(f"cannot log the model: missing {', '.join(missing)}")
        files = {Path(path).name: sha256_file(path) for path in artifacts.values()}
        write_json_atomic(config_path, asdict(replace(config, files=files)))
        artifacts["config"] = str(config_path)
        example = pd.DataFrame({"text": list(input_example)}) if input_example else None
        kwargs = dict(
            name=ARTIFACT_NAME,
            python_model=CopySeqModel(),
            artifacts=artifacts,
            code_paths=copy_packages(Path(tmp) / "code"),
            pip_requirements=pinned_requirements(),
            signature=signature(config),
            input_example=example,
            tags={"task": config.task, "mechanism": config.mechanism},
        )
        active = mlflow.active_run()
        if active is not None and active.info.run_id == run_id:
            info = mlflow.pyfunc.log_model(**kwargs)
        else:
            with mlflow.start_run(run_id=run_id, nested=active is not None):
                info = mlflow.pyfunc.log_model(**kwargs)
    return info.model_uri


class LocalModel:
    """A :class:`CopySeqModel` built from files on disk, called like a loaded pyfunc model:
    ``predict(data, params=None)`` (no MLflow store, no signature enforcement)."""

    def __init__(self, python_model: CopySeqModel) -> None:
        self.python_model = python_model

    def predict(self, data, params: dict | None = None) -> pd.DataFrame:
        return self.python_model.predict(None, data, params)


def local_model(
    checkpoint_dir: str | Path, vocab_dir: str | Path, config: ServingConfig, subword_model: str | Path | None = None
) -> LocalModel:
    """The same pyfunc object built from files on disk (``predict --checkpoint``): no MLflow store."""
    return LocalModel(CopySeqModel(Predictor.from_checkpoint_dir(checkpoint_dir, vocab_dir, config, subword_model)))
