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
import shutil
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path

import mlflow
import pandas as pd

from pipeline.io.files import sha256_tree, write_json_atomic
from pipeline.serving.limits import ServingConfig, verify_files
from pipeline.serving.predictor import Predictor
from pipeline.serving.pyfunc_common import (
    answer,
    copy_packages,
    in_scoring_server,
    quiet_type_hint_notice,
    signature,
    stop_on_server_exit,
)
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


_previous_showwarning, warnings.showwarning = warnings.showwarning, quiet_type_hint_notice


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
        return answer(self.predictor, model_input, params)


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


def pinned_requirements() -> list[str]:
    """``name==version`` of each served dependency as installed here (a CPU build's local version
    suffix, ``+cpu``, dropped: the index serves the plain version)."""
    return [f"{name}=={importlib.metadata.version(name).split('+')[0]}" for name in REQUIREMENTS]


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
            code_paths=copy_packages(Path(tmp) / "code", SERVED_PACKAGES),
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
