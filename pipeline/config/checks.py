"""The checks of a task's settings beyond the types and ranges of the settings schema
(:mod:`pipeline.config.schema`) that ``python -m pipeline.data.tasks add`` and every stage share,
run before any work: a value that a stage would fail on later (or, worse, accept and silently turn
into empty output) is refused here, with the setting named.

* :func:`check_task_name`: lowercase letters, digits and ``_``, starting with a letter, at most
  :data:`MAX_TASK_NAME` characters (a task's name becomes file and directory names, MLflow
  experiment and registered-model names);
* :func:`check_serving`: the evaluate defaults within the ``serving`` limits (a model whose default
  ``beam_size``/``max_len`` a server would refuse is never registered);
* :func:`check_subword`: the prepare stage's ``subword`` settings.

Every refusal is a :class:`~pipeline.config.validation.SettingsError` (a ``ValueError``): the
commands print its message alone and exit 2.
"""

from __future__ import annotations

import re

from pipeline.config.validation import SettingsError

TASK_NAME = re.compile(r"[a-z][a-z0-9_]*")
MAX_TASK_NAME = 64  # well under a file name's 255 bytes, with room for the suffixes stages add
SUBWORD_MODEL_TYPES = ("unigram", "bpe")
SUBWORD_KEYS = (  # pipeline.data.text.subword.train_sentencepiece's settings, and drop_columns
    "vocab_size",
    "model_type",
    "drop_columns",
    "character_coverage",
    "seed",
    "num_threads",
    "input_sentence_size",
    "hard_vocab_limit",
)
MIN_SUBWORD_VOCAB = 260  # byte fallback's 256 byte pieces and <unk> <s> </s> come first; below it cannot train
# the serving limit each evaluate default must be within (pipeline.serving.predictor.ServingConfig)
SERVING_CAPS = {"beam_size": ("max_beam_size", 20), "max_len": ("max_output_len", 200)}


def check_task_name(name: object) -> str:
    """``name`` if it can name a task, else a :class:`SettingsError` saying why."""
    if not isinstance(name, str) or not TASK_NAME.fullmatch(name):
        raise SettingsError(f"task name {name!r}: use lowercase letters, digits and _ (starting with a letter)")
    if len(name) > MAX_TASK_NAME:
        raise SettingsError(
            f"task name of {len(name)} characters: at most {MAX_TASK_NAME} (it names files, folders and MLflow "
            "experiments)"
        )
    return name


def check_serving(evaluate: dict, serving: dict | None, where: str = "evaluate") -> None:
    """The evaluate defaults ``beam_size``/``max_len`` are within the ``serving`` limits
    ``max_beam_size``/``max_output_len``: a model decoded with settings its server would refuse is
    refused before it is decoded, not after."""
    serving = serving or {}
    for key, (cap, default_cap) in SERVING_CAPS.items():
        value, limit = evaluate.get(key), serving.get(cap, default_cap)
        if isinstance(value, int) and isinstance(limit, int) and value > limit:
            raise SettingsError(
                f"{where}.{key}={value} is over the serving limit serving.{cap}={limit}: the model could not be "
                f"served as it is scored; lower {key} or raise serving.{cap}"
            )


def check_subword(subword: object, where: str = "subword") -> None:
    """The prepare stage's ``subword`` settings: ``vocab_size`` an integer >= :data:`MIN_SUBWORD_VOCAB`,
    ``model_type`` one of :data:`SUBWORD_MODEL_TYPES`, no unknown keys."""
    if subword is None:
        return
    if not isinstance(subword, dict):
        raise SettingsError(f"{where} must be a mapping such as {{vocab_size: 8000}}, got {subword!r}")
    unknown = sorted(set(subword) - set(SUBWORD_KEYS))
    if unknown:
        raise SettingsError(f"{where}: unknown settings {unknown}; known: {list(SUBWORD_KEYS)}")
    size = subword.get("vocab_size")
    if isinstance(size, bool) or not isinstance(size, int) or size < MIN_SUBWORD_VOCAB:
        raise SettingsError(f"{where}.vocab_size must be an integer >= {MIN_SUBWORD_VOCAB}, got {size!r}")
    model_type = subword.get("model_type", "unigram")
    if model_type not in SUBWORD_MODEL_TYPES:
        raise SettingsError(f"{where}.model_type must be one of {SUBWORD_MODEL_TYPES}, got {model_type!r}")
