"""What both MLflow faces of a model share, without torch (:mod:`pipeline.serving.pyfunc` for the
PyTorch model, :mod:`pipeline.serving.onnx_pyfunc` for an exported one): reading a request's texts and
features, the client-facing form of a refused or interrupted request (HTTP 400 / 503 / 504 from
``mlflow models serve``), stopping a running decode when the server is told to stop, and the code a
logged model carries.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from mlflow.exceptions import MlflowException

from pipeline.config.params import REPO_ROOT
from pipeline.decoding.outcomes import DecodeCancelled, DecodeTimeout
from pipeline.serving.limits import InputRejected, ServerBusy, ServingConfig, refusal_message


def input_texts(model_input: Any) -> list[str]:
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


def input_features(model_input: Any) -> list | None:
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

    message = refusal_message(err, timeout_s)
    if message is None:
        return None
    if isinstance(err, InputRejected):
        return ServingException(message, INVALID_PARAMETER_VALUE, err.index)
    if isinstance(err, DecodeTimeout):
        return ServingException(message, DEADLINE_EXCEEDED)
    return ServingException(message, TEMPORARILY_UNAVAILABLE)  # shutting down, or busy


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


def quiet_type_hint_notice(message, category, filename, lineno, file=None, line=None, _show=warnings.showwarning):
    """A ``warnings.showwarning`` for the creation of a flavour's PythonModel class: MLflow warns then that predict() has no type hints (under its
    own warning filter, so a filter here cannot silence it); it has an explicit signature instead
    (type hints would make MLflow infer and enforce a schema of its own)."""
    if "Add type hints to the `predict` method" not in str(message):
        _show(message, category, filename, lineno, file, line)


def copy_packages(dest: Path, packages: Sequence[str]) -> list[str]:
    """Snapshot the ``.py`` files of the served packages (a flavour's ``SERVED_PACKAGES``, paths relative to
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


def answer(predictor, model_input: Any, params: dict | None) -> pd.DataFrame:
    """A flavour's ``predict``: ``model_input``'s texts (and features) decoded by ``predictor`` (either
    runtime's) within the request's deadline, as a DataFrame with ``output``, ``copied``, ``tokens``
    and ``warning``, one row per text; a refused or interrupted request as a :class:`ServingException`."""
    params = params or {}
    timeout = float(predictor.config.request_timeout_s)
    server = server_timeout_s()
    if server is not None:  # end before the server answers 504 on its own, so the client sees why
        timeout = min(timeout, max(server - 1.0, server / 2))
    try:
        rows = predictor.predict(
            input_texts(model_input),
            params.get("beam_size"),
            params.get("max_len"),
            deadline=time.monotonic() + timeout,
            pretokenized=params.get("pretokenized"),
            features=input_features(model_input),
        )
    except (InputRejected, DecodeTimeout, DecodeCancelled, ServerBusy) as err:
        raise serving_exception(err, timeout) from err
    return pd.DataFrame({key: [r[key] for r in rows] for key in ("output", "copied", "tokens", "warning")})


def signature(config: ServingConfig):
    """The model signature both flavours log (inputs ``text`` and, with a features column, ``features``; outputs; params)."""
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
