"""The MLflow face of a :class:`pipeline.serving.predictor.Predictor`: raw text in, output text (and
copied words) out, from ``mlflow models serve`` or ``mlflow.pyfunc.load_model``.

:class:`CopySeqModel` wraps a Predictor as an ``mlflow.pyfunc.PythonModel`` whose artifacts are
``model.pt``, ``src.vocab``, ``tgt.vocab``, ``serving.json``
(:class:`pipeline.serving.predictor.ServingConfig`), for a subword corpus ``subword.model`` and for a
corpus with a features column ``features.vocab``. :func:`log_pyfunc_model` logs it under a run with
pinned requirements, a signature (input column ``text``, and the optional ``features`` for a model
with features; outputs ``output``, ``copied``, ``tokens``, ``warning``; params ``beam_size``,
``max_len``) and, as code paths, the packages the served code imports (:data:`SERVED_PACKAGES`), so
``mlflow models serve -m models:/<task>@champion --env-manager local`` answers with this code.

A refused request (:class:`pipeline.serving.predictor.InputRejected`) is answered HTTP 400 by
``mlflow models serve``; a request that runs past its deadline 504, and SIGTERM/SIGINT to the
server stops a running decode (503) instead of waiting for it.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import signal
import tempfile
import threading
import time
import warnings
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import mlflow
import pandas as pd
from mlflow.exceptions import MlflowException

from pipeline.config.params import REPO_ROOT
from pipeline.decoding.search import DecodeCancelled, DecodeTimeout
from pipeline.io.files import sha256_tree, write_json_atomic
from pipeline.serving.predictor import InputRejected, Predictor, ServerBusy, ServingConfig, verify_files
from pipeline.vocab.tokenizer import RECORD as BACKBONE_RECORD
from pipeline.vocab.tokenizer import TOKENIZER_DIR
from pipeline.vocab.vocabulary import FEATURES_VOCAB

CONFIG_NAME = "serving.json"
MODEL_CODE = Path(__file__).with_name("model_code.py")  # builds CopySeqModel when MLflow loads the model
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
    "transformers",  # a model on a pretrained backbone (its architecture and tokenizer)
    "tokenizers",
    "safetensors",
)


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


def _features(model_input: Any) -> list | None:
    """The ``features`` of each input text (a DataFrame column or a dict key), or None when not given."""
    if isinstance(model_input, pd.DataFrame) and "features" in model_input.columns:
        return model_input["features"].tolist()
    if isinstance(model_input, dict) and "features" in model_input:
        value = model_input["features"]
        return [value] if isinstance(value, str) else list(value)
    return None


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
        self.predictor = Predictor(
            art["model"],
            art["src_vocab"],
            art["tgt_vocab"],
            config,
            art.get("subword_model"),
            art.get("backbone_tokenizer"),
            art.get("features_vocab"),
        )
        if in_scoring_server():  # SIGTERM/SIGINT stop a running decode instead of waiting for it
            stop_on_server_exit(self.predictor.stop)

    def predict(self, context, model_input, params=None):
        """``model_input``: a DataFrame with a ``text`` column (or a list of str), and for a model with
        features an optional ``features`` column (``V;PST;3;SG`` or a list of tags per text). Returns a
        DataFrame with ``output`` (text), ``copied`` and ``tokens`` (lists of str) and ``warning``
        ('' or why the output is likely unreliable), one row per input. ``params``: optional
        ``beam_size``, ``max_len`` (at most the limits), ``pretokenized`` (the texts are already
        the corpus's tokens, space-separated). A refused or interrupted request raises a
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
                pretokenized=params.get("pretokenized"),
                features=_features(model_input),
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


# The code a logged model carries (its code paths): every package the served code imports
# (pipeline.serving.pyfunc and what it reaches; tests/test_import_direction.py checks the list), and
# nothing it does not (no training loop's callers, metrics, reporting, tracking or retraining).
SERVED_PACKAGES = (
    "models",
    "pipeline/__init__.py",
    "pipeline/config",
    "pipeline/runtime",
    "pipeline/io",
    "pipeline/data",
    "pipeline/vocab",
    "pipeline/training",
    "pipeline/decoding",
    "pipeline/serving",
)


def copy_packages(dest: Path, packages: Sequence[str] = SERVED_PACKAGES) -> list[str]:
    """Snapshot the ``.py`` files of the served packages (:data:`SERVED_PACKAGES`, paths relative to
    the repository) under ``dest`` (the model's code paths: one per top-level package): only
    sources, so caches, editor temp files or a file being rewritten elsewhere never break the copy."""

    tops = []
    for name in packages:
        src = REPO_ROOT / name
        for path in sorted([src] if src.is_file() else src.rglob("*.py")):
            target = dest / path.relative_to(REPO_ROOT)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
        top = name.split("/")[0]
        if top not in tops:
            tops.append(top)
    return [str(dest / top) for top in tops]


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

    inputs = [ColSpec(DataType.string, "text")]
    if config.prepare.get("features_col") is not None:  # the tags of each text, as the features column held them
        inputs.append(ColSpec(DataType.string, "features", required=False))
    return ModelSignature(
        inputs=Schema(inputs),
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
                # true: the texts are already the corpus's tokens, space-separated (not tokenised again)
                ParamSpec("pretokenized", DataType.boolean, bool(config.pretokenized)),
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
        if (vocab_dir / FEATURES_VOCAB).is_file():  # the task has a features column
            artifacts["features_vocab"] = str(vocab_dir / FEATURES_VOCAB)
        missing = [p for p in artifacts.values() if not Path(p).is_file()]
        if missing:
            raise FileNotFoundError(f"cannot log the model: missing {', '.join(missing)}")
        if (vocab_dir / BACKBONE_RECORD).is_file():  # a pretrained backbone's tokenizer and its record
            backbone = Path(tmp) / "backbone_tokenizer"
            shutil.copytree(vocab_dir / TOKENIZER_DIR, backbone / TOKENIZER_DIR)
            shutil.copy2(vocab_dir / BACKBONE_RECORD, backbone / BACKBONE_RECORD)
            artifacts["backbone_tokenizer"] = str(backbone)
        files = {Path(path).name: sha256_tree(path) for path in artifacts.values()}
        write_json_atomic(config_path, asdict(replace(config, files=files)))
        artifacts["config"] = str(config_path)
        example = pd.DataFrame({"text": list(input_example)}) if input_example else None
        kwargs = dict(
            name=ARTIFACT_NAME,
            python_model=str(MODEL_CODE),  # models from code: no CloudPickle of an object
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
