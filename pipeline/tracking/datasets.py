"""A task's splits as MLflow dataset inputs: the runs table's Dataset column says which data version
each model saw.

One dataset per split, built from the split's shard manifest (:mod:`pipeline.io.shards`) without
reading a row:

* name ``<task>/<split>`` (``copy_rules/test``);
* digest: the first :data:`DIGEST_CHARS` hex digits of the manifest's ``content_sha256`` (MLflow
  stores at most 36 characters; the whole hash is in the profile and in the run's
  ``data.<split>.content_sha256`` tags);
* source: the shard folder (``data/shards/<task>/<split>``, absolute), a local source;
* schema: the shard columns (from the first part's Arrow schema) as an MLflow schema;
* profile: ``num_rows``, ``rows_in``, ``rows_quarantined``, ``parts`` and ``content_sha256``.

The context (input tag ``mlflow.data.context``) is the split's role for the stage that logs it
(:func:`context`): the train stage logs ``train`` as ``training`` and ``valid`` as
``validation``; the evaluate stage, which reopens the training's run, logs every split it scores
as ``evaluation`` (a split logged already keeps its first context: MLflow records a dataset once per
run). Input tags ``stage`` and, for the evaluate stage, ``rows_scored`` say who read how much.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pyarrow as pa

from pipeline.io.shards import read_manifest

DIGEST_CHARS = 16  # as pipeline.tracking.runs.pipeline_key; MLflow allows 36
TRAIN_CONTEXTS = {"train": "training", "valid": "validation"}
EVALUATION = "evaluation"


def context(stage: str, split: str) -> str:
    """The split's role for ``stage``: the train stage's ``training``/``validation``, else ``evaluation``."""
    if stage == "train":
        return TRAIN_CONTEXTS.get(split, split)
    return EVALUATION


def mlflow_schema(schema: pa.Schema):
    """The Arrow schema as an MLflow schema (strings, integers, floats, booleans, lists of them);
    None when a column has another type."""
    from mlflow.types import ColSpec, DataType, Schema
    from mlflow.types.schema import Array

    def convert(t: pa.DataType):
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            inner = convert(t.value_type)
            return None if inner is None else Array(inner)
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            return DataType.string
        if pa.types.is_boolean(t):
            return DataType.boolean
        if pa.types.is_integer(t):
            return DataType.long if t.bit_width > 32 else DataType.integer
        if pa.types.is_floating(t):
            return DataType.double if t.bit_width > 32 else DataType.float
        return None

    specs = [(f.name, convert(f.type)) for f in schema]
    if any(t is None for _, t in specs):
        return None
    return Schema([ColSpec(t, name) for name, t in specs])


@functools.cache
def _dataset_class():
    """``ShardDataset``: a MetaDataset that also carries a profile (MetaDataset leaves it out);
    defined on first use, as MLflow is imported lazily (~2 s)."""
    from mlflow.data.meta_dataset import MetaDataset

    class ShardDataset(MetaDataset):
        def __init__(self, profile: dict, **kwargs):
            self._profile = profile
            super().__init__(**kwargs)

        @property
        def profile(self) -> dict:
            return self._profile

        def to_dict(self) -> dict[str, str]:
            return {**super().to_dict(), "profile": json.dumps(self._profile)}

    return ShardDataset


def split_dataset(task: str, split: str, split_dir: Path):
    """The MLflow dataset of ``split`` (``split_dir``: its shard folder with ``manifest.json``)."""
    from mlflow.data import get_dataset_source_from_json

    split_dir = Path(split_dir).resolve()
    manifest = read_manifest(split_dir)
    parts = manifest.get("parts") or []
    schema = None
    if parts:
        with pa.memory_map(str(split_dir / parts[0]["file"]), "r") as source:
            schema = mlflow_schema(pa.ipc.open_file(source).schema)
    content = manifest["content_sha256"]
    return _dataset_class()(
        profile={
            "num_rows": manifest["rows"],
            "rows_in": manifest.get("rows_in", manifest["rows"]),
            "rows_quarantined": manifest.get("rows_quarantined", 0),
            "parts": len(parts),
            "content_sha256": content,
        },
        source=get_dataset_source_from_json(json.dumps({"uri": str(split_dir)}), "local"),
        name=f"{task}/{split}",
        digest=content[:DIGEST_CHARS],
        schema=schema,
    )


def split_inputs(
    task: str, split_dirs: dict[str, Path], stage: str, tags: dict[str, dict[str, str]] | None = None
) -> tuple[list, list[str], list[dict[str, str]]]:
    """(datasets, contexts, input tags) of ``split_dirs`` (``{split: shard folder}``) for
    ``mlflow.log_inputs``; ``tags``: extra input tags per split."""
    datasets, contexts, tags_list = [], [], []
    for split, path in split_dirs.items():
        datasets.append(split_dataset(task, split, path))
        contexts.append(context(stage, split))
        tags_list.append({"stage": stage, **((tags or {}).get(split) or {})})
    return datasets, contexts, tags_list
