"""The MLflow face of an exported model: a pyfunc model served by onnxruntime, without torch, that
answers as the PyTorch one (:mod:`pipeline.serving.pyfunc`): the same input (``text``, optional
``features``), outputs (``output``, ``copied``, ``tokens``, ``warning``), params (``beam_size``,
``max_len``, ``pretokenized``), limits and HTTP statuses (400 refused, 503 busy or shutting down, 504
past the deadline).

:class:`OnnxSeqModel` wraps an :class:`pipeline.serving.onnx_predictor.OnnxPredictor`; its one
artifact is the export directory (``export``: graphs, vocabularies, ``serving.json`` with the sha256 of
each file, checked at loading, and ``manifest.json``). :func:`log_onnx_model` logs it as the model
``model_onnx`` of a run, with ``metadata.runtime: onnx``; :func:`register_twin` registers it as a
version of ``<registered name>_onnx`` carrying the source version's alias, so

    copyseq export --model models:/copy_rules@champion --out onnx/ --log
    mlflow models serve -m models:/copy_rules_onnx@champion --env-manager local

serves the champion with onnxruntime (docs/export.md). The registered model of the task itself keeps
only PyTorch versions: the comparison and retraining choose its champion among them alone.
"""

from __future__ import annotations

import importlib.metadata
import json
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import mlflow
import pandas as pd
from mlflow.exceptions import MlflowException

from pipeline.serving.limits import ServingConfig
from pipeline.serving.onnx_predictor import OnnxPredictor
from pipeline.serving.pyfunc_common import (
    answer,
    copy_packages,
    in_scoring_server,
    quiet_type_hint_notice,
    signature,
    stop_on_server_exit,
)
from pipeline.tracking.registry import REGISTERED_URI, register
from pipeline.tracking.runs import tracking_uri
from pipeline.vocab.tokenizer import RECORD

ARTIFACT_NAME = "model_onnx"  # the logged model's name under the source model's run
EXPORT_ARTIFACT = "export"  # the export directory, as the model's one artifact
TWIN_SUFFIX = "_onnx"  # registered model <name>_onnx: the ONNX twin of <name>'s versions
RUNTIME = "onnx"  # the logged model's metadata.runtime
MODEL_CODE = Path(__file__).with_name("onnx_model_code.py")  # builds OnnxSeqModel when MLflow loads it
REQUIREMENTS = (
    "onnxruntime",
    "mlflow",
    "pandas",
    "numpy",
    "pyarrow",
    "pyyaml",
    "pydantic",
    "tqdm",
    "jieba",
    "sacremoses",
    "sentencepiece",
)
BACKBONE_REQUIREMENTS = ("transformers", "tokenizers")  # an export with a backbone's tokenizer loads it with these
# The code the logged model carries: the torch-free path (pipeline/serving's onnx modules and what they
# import; the packages are copied whole, their torch modules are never imported by it).
SERVED_PACKAGES = (
    "models/__init__.py",
    "models/specials.py",
    "models/backbone_ids.py",  # a backbone's special ids (pipeline.vocab.tokenizer)
    "pipeline/__init__.py",
    "pipeline/config",
    "pipeline/runtime",
    "pipeline/io",
    "pipeline/data",
    "pipeline/vocab",
    "pipeline/decoding",
    "pipeline/tracking",
    "pipeline/serving",
)


_previous_showwarning, warnings.showwarning = warnings.showwarning, quiet_type_hint_notice


class OnnxSeqModel(mlflow.pyfunc.PythonModel):
    """The MLflow pyfunc face of an :class:`OnnxPredictor` (its artifact: the export directory)."""

    def __init__(self, predictor: OnnxPredictor | None = None) -> None:
        self.predictor = predictor

    def __getstate__(self) -> dict:
        return {"predictor": None}

    def load_context(self, context) -> None:
        threads = (context.model_config or {}).get("threads")  # load_model(..., model_config={"threads": N})
        self.predictor = OnnxPredictor(context.artifacts[EXPORT_ARTIFACT], threads=threads)  # checks every sha256
        if in_scoring_server():
            stop_on_server_exit(self.predictor.stop)

    def predict(self, context, model_input, params=None):
        """As :meth:`pipeline.serving.pyfunc.CopySeqModel.predict`: a DataFrame with ``output``,
        ``copied``, ``tokens`` and ``warning``, one row per input text."""
        if self.predictor is None:
            raise RuntimeError("OnnxSeqModel has no model loaded (load it with mlflow.pyfunc.load_model)")
        return answer(self.predictor, model_input, params)


warnings.showwarning = _previous_showwarning


class LocalModel:
    """An :class:`OnnxSeqModel` on an export directory, called like a loaded pyfunc model
    (``predict --runtime onnx --model DIR``): no MLflow store, no signature enforcement."""

    def __init__(self, python_model: OnnxSeqModel) -> None:
        self.python_model = python_model

    def predict(self, data, params: dict | None = None) -> pd.DataFrame:
        return self.python_model.predict(None, data, params)


def local_model(export_dir: str | Path, threads: int | None = None) -> LocalModel:
    return LocalModel(OnnxSeqModel(OnnxPredictor(export_dir, threads=threads)))


# ----------------------------------------------------------------------------------- the store
class StoreError(ValueError):
    """The MLflow store refused: no such model or alias, a store that cannot be read (the message is
    MLflow's): ``copyseq export`` reports it as one line, exit code 2."""


@contextmanager
def store_errors() -> Iterator[None]:
    try:
        yield
    except MlflowException as err:
        raise StoreError(err.message) from err


def _use_store() -> None:
    mlflow.set_tracking_uri(tracking_uri())
    mlflow.set_registry_uri(tracking_uri())


def is_onnx_model(uri: str) -> bool:
    """Whether the MLflow model at ``uri`` is an exported one (its ``metadata.runtime``), read from its
    MLmodel without loading it."""
    _use_store()
    info = mlflow.models.get_model_info(uri)
    return (info.metadata or {}).get("runtime") == RUNTIME


def load_model(uri: str, threads: int | None = None):
    """``mlflow.pyfunc.load_model`` of a registered or logged ONNX model, its sessions with ``threads``
    intra-op threads (None: onnxruntime's default); a ValueError naming its twin when ``uri`` is a
    PyTorch model (loading that would load torch), or when the model's own logged code does not take
    ``threads`` (logged by an older version: export it again)."""
    if not is_onnx_model(uri):
        raise ValueError(
            f"{uri} is a PyTorch model; its ONNX twin (copyseq export --model {uri} --out DIR --log) is "
            f"{twin_uri(uri) or 'registered as <name>_onnx'}"
        )
    model = mlflow.pyfunc.load_model(uri, model_config={"threads": threads} if threads is not None else None)
    if threads is not None and getattr(model.unwrap_python_model().predictor.model, "threads", None) != threads:
        raise ValueError(
            f"--threads {threads}: {uri} was logged by a version of copyseq whose model code does not take it; "
            f"export it again (copyseq export --model <its PyTorch model> --out DIR --log) or leave --threads out"
        )
    return model


def twin_uri(uri: str) -> str | None:
    """``models:/<name>@<alias>`` -> ``models:/<name>_onnx@<alias>`` (a version: the same form); None for
    a URI that names no registered model."""
    match = REGISTERED_URI.match(uri)
    if match is None:
        return None
    rest = f"@{match['alias']}" if match["alias"] else f"/{match['version']}"
    return f"models:/{match['name']}{TWIN_SUFFIX}{rest}"


def download_model(uri: str, dst: Path) -> tuple[Path, str | None]:
    """The logged model at ``uri`` (``models:/<task>@champion``, ``runs:/...``) downloaded under ``dst``:
    (its directory (MLmodel, artifacts/), the id of the run that logged it); :class:`StoreError`."""
    _use_store()
    with store_errors():
        run_id = mlflow.models.get_model_info(uri).run_id
        return Path(mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=str(dst))), run_id


def log_onnx_model(run_id: str, export_dir: str | Path, input_example: Sequence[str] | None = None) -> str:
    """Log the export directory as the pyfunc model ``model_onnx`` of run ``run_id`` (models from code:
    :data:`MODEL_CODE`; pinned requirements without torch; the PyTorch model's signature); returns its
    model URI. :class:`StoreError` when the store refuses."""
    with store_errors():
        return _log_onnx_model(run_id, Path(export_dir), input_example)


def _log_onnx_model(run_id: str, export_dir: Path, input_example: Sequence[str] | None) -> str:
    _use_store()
    config = ServingConfig.from_dict(json.loads((export_dir / "serving.json").read_text(encoding="utf-8")))
    manifest = json.loads((export_dir / "manifest.json").read_text(encoding="utf-8"))
    requirements = REQUIREMENTS + (BACKBONE_REQUIREMENTS if (export_dir / RECORD).is_file() else ())
    with tempfile.TemporaryDirectory(prefix="onnx-serving-") as tmp:
        kwargs = dict(
            name=ARTIFACT_NAME,
            python_model=str(MODEL_CODE),
            artifacts={EXPORT_ARTIFACT: str(export_dir)},
            code_paths=copy_packages(Path(tmp) / "code", SERVED_PACKAGES),
            pip_requirements=[f"{n}=={importlib.metadata.version(n).split('+')[0]}" for n in requirements],
            signature=signature(config),
            input_example=pd.DataFrame({"text": list(input_example)}) if input_example else None,
            metadata={"runtime": RUNTIME, "source_sha256": manifest["source"]["sha256"]},
            tags={"task": config.task, "mechanism": config.mechanism, "runtime": RUNTIME},
            model_config={"threads": None},  # the keys a load may set (predict --threads); null: onnxruntime's
        )
        active = mlflow.active_run()
        if active is not None and active.info.run_id == run_id:
            info = mlflow.pyfunc.log_model(**kwargs)
        else:
            with mlflow.start_run(run_id=run_id, nested=active is not None):
                info = mlflow.pyfunc.log_model(**kwargs)
    return info.model_uri


def register_twin(model_uri: str, source_uri: str, task: str, mechanism: str) -> tuple[str, str]:
    """Register ``model_uri`` (from :func:`log_onnx_model`) as a version of the source's twin
    ``<name>_onnx`` (tags: task, mechanism, runtime, the source URI and version; the sha256 of its
    files, as every registered version), and give it the source URI's alias when it names one.
    Returns (the twin's registered name, its new version); :class:`StoreError` when the store refuses."""
    with store_errors():
        return _register_twin(model_uri, source_uri, task, mechanism)


def _register_twin(model_uri: str, source_uri: str, task: str, mechanism: str) -> tuple[str, str]:
    _use_store()
    match = REGISTERED_URI.match(source_uri)
    name = (match["name"] if match else task) + TWIN_SUFFIX
    source_version = None
    if match:
        client = mlflow.MlflowClient()
        source = (
            client.get_model_version_by_alias(match["name"], match["alias"])
            if match["alias"]
            else client.get_model_version(match["name"], match["version"])
        )
        source_version = str(source.version)
    tags = {"task": task, "mechanism": mechanism, "runtime": RUNTIME, "source_model": source_uri}
    if source_version is not None:
        tags["source_version"] = source_version
    version = register(model_uri, name, tags)  # pipeline.tracking.registry: <prefix ""><name>
    if match and match["alias"]:
        mlflow.MlflowClient().set_registered_model_alias(name, match["alias"], version)
    return name, version
