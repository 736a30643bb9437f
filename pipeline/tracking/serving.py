"""A trained model as an MLflow pyfunc model: raw text in, output text (and copied words) out.

:class:`Predictor` is the whole path, with no MLflow in it: raw text -> the corpus reader's source
tokens (:mod:`pipeline.corpora.raw_input`) -> the project's batched beam search
(:func:`pipeline.evaluate.decode_table`, so a prediction here equals the evaluate stage's for the
same tokens) -> extended ids back to words, a source word outside the decoder vocabulary coming
out as itself when the model copies it (:func:`pipeline.extended_vocab.ext_ids_to_tokens`) ->
text (:func:`pipeline.corpora.raw_input.detokenize`). ``copied`` lists those output tokens that are
source words outside the decoder vocabulary: only a copy (pointer) can produce them, so they
are the copies one can be sure of (a copy of an in-vocabulary word looks like a generated one).

:class:`CopySeqModel` wraps a Predictor as an ``mlflow.pyfunc.PythonModel`` whose artifacts are
``model.pt``, ``src.vocab``, ``tgt.vocab``, ``serving.json`` (:class:`ServingConfig`) and, for a
subword corpus, ``subword.model``. :func:`log_pyfunc_model` logs it under a run with pinned
requirements, a signature (input column ``text``; outputs ``output``, ``copied``, ``tokens``;
params ``beam_size``, ``max_len``) and the ``pipeline``/``models`` packages as code paths, so
``mlflow models serve -m models:/<task>@champion --env-manager local`` answers with this code.
"""

from __future__ import annotations

import importlib.metadata
import json
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import mlflow
import pandas as pd
import pyarrow as pa

from models.config import dataclass_from_dict
from pipeline.corpora.raw_input import detokenize, source_tokenizer
from pipeline.evaluate import EvalConfig, decode_table, load_checkpoint
from pipeline.params import REPO_ROOT
from pipeline.shards import write_json_atomic
from pipeline.vocab import Vocab

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

    @classmethod
    def from_dict(cls, d: dict) -> ServingConfig:
        return dataclass_from_dict(cls, d)

    @classmethod
    def from_params(
        cls, task: str, mechanism: str, prepare_settings: dict, evaluate_settings: dict, **overrides
    ) -> ServingConfig:
        """The decoding settings of the evaluate stage (``params['evaluate']``, the task's overrides
        applied) and the reader settings of ``params['prepare'][task]``."""
        decode = {k: evaluate_settings[k] for k in DECODE_KEYS if k in evaluate_settings}
        return cls(task=task, mechanism=mechanism, prepare=dict(prepare_settings), **{**decode, **overrides})

    def eval_config(self, **overrides) -> EvalConfig:
        d = {k: getattr(self, k) for k in DECODE_KEYS}
        d.update({k: v for k, v in overrides.items() if v is not None})
        return EvalConfig(**d, topk=d["beam_size"], splits=(), device=self.device)


def _texts(model_input: Any) -> list[str]:
    """A DataFrame with a ``text`` column (or a single column), a Series, a list/tuple of str, a
    dict ``{"text": [...]}`` or one str -> the list of input texts."""
    if isinstance(model_input, pd.DataFrame):
        if "text" in model_input.columns:
            col = model_input["text"]
        elif model_input.shape[1] == 1:
            col = model_input.iloc[:, 0]
        else:
            raise ValueError(f"input DataFrame needs a 'text' column, has {list(model_input.columns)}")
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
        raise TypeError(f"expected a DataFrame with a 'text' column or a list of str, got {type(model_input).__name__}")
    bad = [i for i, v in enumerate(values) if not isinstance(v, str)]
    if bad:
        raise TypeError(f"input row {bad[0]} is {type(values[bad[0]]).__name__}, not str")
    return values


class Predictor:
    """Raw text -> output text with one trained model (no MLflow involved)."""

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
        self.model, _ = load_checkpoint(Path(checkpoint), config.mechanism, self.device)
        self.src_vocab, self.tgt_vocab = Vocab.load(src_vocab), Vocab.load(tgt_vocab)
        self.subword_model = str(subword_model) if subword_model else None
        self.tokenize = source_tokenizer(config.prepare, config.pretokenized, self.subword_model)

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

    def predict(self, texts: Sequence[str], beam_size: int | None = None, max_len: int | None = None) -> list[dict]:
        """One dict per text, in order: ``src`` (tokens), ``tokens`` (output tokens), ``output``
        (text), ``copied`` (output tokens that are source words outside the decoder vocabulary),
        ``score`` (log-probability of the best hypothesis). An empty source gives an empty output."""
        sources = [self.tokenize(t) for t in texts]
        todo = [i for i, s in enumerate(sources) if s]
        out = [{"src": s, "tokens": [], "output": "", "copied": [], "score": 0.0} for s in sources]
        if not todo:
            return out
        list_type = pa.list_(pa.string())
        table = pa.table(
            {
                "id": pa.array([str(i) for i in todo]),
                "src": pa.array([sources[i] for i in todo], type=list_type),
                "tgt": pa.array([[] for _ in todo], type=list_type),
            }
        )
        cfg = self.config.eval_config(beam_size=beam_size, max_len=max_len)
        records = decode_table(self.model, table, self.src_vocab, self.tgt_vocab, cfg, self.device, desc="predict")
        for i, rec in zip(todo, records):
            tokens = rec["pred"]
            out[i].update(
                tokens=tokens,
                copied=rec["copied"],
                score=rec["scores"][0],
                output=detokenize(tokens, self.config.prepare, self.subword_model),
            )
        return out


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
        self.predictor = Predictor(art["model"], art["src_vocab"], art["tgt_vocab"], config, art.get("subword_model"))

    def predict(self, context, model_input, params=None):
        """``model_input``: a DataFrame with a ``text`` column (or a list of str). Returns a
        DataFrame with ``output`` (text), ``copied`` and ``tokens`` (lists of str), one row per
        input. ``params``: optional ``beam_size``, ``max_len``."""
        if self.predictor is None:
            raise RuntimeError("CopySeqModel has no model loaded (load it with mlflow.pyfunc.load_model)")
        params = params or {}
        rows = self.predictor.predict(_texts(model_input), params.get("beam_size"), params.get("max_len"))
        return pd.DataFrame(
            {
                "output": [r["output"] for r in rows],
                "copied": [r["copied"] for r in rows],
                "tokens": [r["tokens"] for r in rows],
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
        write_json_atomic(config_path, asdict(config))
        artifacts = {
            "model": str(checkpoint_dir / "model.pt"),
            "src_vocab": str(vocab_dir / "src.vocab"),
            "tgt_vocab": str(vocab_dir / "tgt.vocab"),
            "config": str(config_path),
        }
        if subword_model:
            artifacts["subword_model"] = str(subword_model)
        missing = [p for p in artifacts.values() if not Path(p).is_file()]
        if missing:
            raise FileNotFoundError(f"cannot log the model: missing {', '.join(missing)}")
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
