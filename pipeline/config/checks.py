"""The checks of a task's settings beyond the types and ranges of the settings schema
(:mod:`pipeline.config.schema`) that ``python -m pipeline.data.tasks add`` and every stage share,
run before any work: a value that a stage would fail on later (or, worse, accept and silently turn
into empty output) is refused here, with the setting named.

* :func:`check_task_name`: lowercase letters, digits and ``_``, starting with a letter, at most
  :data:`MAX_TASK_NAME` characters (a task's name becomes file and directory names, MLflow
  experiment and registered-model names);
* :func:`check_serving`: the evaluate defaults within the ``serving`` limits (a model whose default
  ``beam_size``/``max_len`` a server would refuse is never registered);
* :func:`check_subword`: the prepare stage's ``subword`` settings;
* :func:`check_cron`: ``retrain.cron``, a cron expression as Prefect's schedules take it;
* :func:`check_metric_key`: a ``valid.<key>`` a decision is taken on, among the keys its split's scores have.

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
# Far above any subword vocabulary in use (8k-64k pieces; the papers' word vocabularies are 30k-150k): sentencepiece's
# trainer grows with the size (2**31 - 1 pieces ran at full CPU for over 12 minutes until it was killed; 2**31 is
# not an int32 to it at all).
MAX_SUBWORD_VOCAB = 1_000_000
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
    """The prepare stage's ``subword`` settings: ``vocab_size`` an integer from :data:`MIN_SUBWORD_VOCAB`
    to :data:`MAX_SUBWORD_VOCAB`,
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
    if size > MAX_SUBWORD_VOCAB:
        raise SettingsError(
            f"{where}.vocab_size must be at most {MAX_SUBWORD_VOCAB:,} pieces, got {size} (subword vocabularies "
            "are 8,000 to 64,000 pieces; sentencepiece's training grows with the size)"
        )
    model_type = subword.get("model_type", "unigram")
    if model_type not in SUBWORD_MODEL_TYPES:
        raise SettingsError(f"{where}.model_type must be one of {SUBWORD_MODEL_TYPES}, got {model_type!r}")


# retrain.cron: the grammar of Prefect's cron schedules (its croniter; Prefect itself may only be imported by the
# flows, and loads in seconds): five fields, or six with seconds, or seven with the year; or an @alias.
CRON_ALIASES = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
CRON_FIELDS = (  # name, lowest, highest, the names standing for lowest, lowest + 1, ...
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day of month", 1, 31, ()),
    ("month", 1, 12, MONTHS),
    ("day of week", 0, 7, DAYS),
    ("second", 0, 59, ()),
    ("year", 1970, 2099, ()),
)
CRON_ITEM = re.compile(r"(?P<range>\*|\?|[0-9a-z]+(?:-[0-9a-z]+)?)(?:/(?P<step>[0-9]+))?(?:#(?P<nth>[1-5]))?")


def check_cron(cron: object, where: str = "cron") -> None:
    """``cron`` a schedule Prefect takes (``0 3 * * 0``, ``30 2 * * mon-fri``, ``@weekly``), else a
    :class:`SettingsError` naming ``where`` and the field that is wrong."""
    text = cron.strip().lower() if isinstance(cron, str) else ""
    if text in CRON_ALIASES:
        return
    parts = text.split()
    example = "e.g. '0 3 * * 0' (minute hour day-of-month month day-of-week: Sundays 03:00) or @weekly"
    if not 5 <= len(parts) <= 7:
        raise SettingsError(f"{where} is {cron!r}: not a cron expression; {example}")
    for part, (name, low, high, names) in zip(parts, CRON_FIELDS, strict=False):
        if not all(_cron_item(item, name, low, high, names) for item in part.split(",")):
            raise SettingsError(f"{where} is {cron!r}: its {name} field {part!r} is not {low}-{high}; {example}")


def _cron_item(item: str, name: str, low: int, high: int, names: tuple[str, ...]) -> bool:
    """One comma-separated item of a cron field: ``*``, ``N``, ``N-M``, any of them ``/step``; a name
    (``mon``, ``jan``) for a number; ``L`` (last) in the day of month; ``N#k`` (k-th) in the day of week."""
    match = CRON_ITEM.fullmatch(item)
    if match is None or (match["step"] is not None and int(match["step"]) == 0):
        return False
    if match["nth"] is not None and (name != "day of week" or match["step"] is not None or "-" in match["range"]):
        return False
    if match["range"] in ("*", "?"):
        return match["range"] == "*" or name in ("day of month", "day of week")
    return all(_cron_value(v, name, low, high, names) for v in match["range"].split("-"))


def _cron_value(value: str, name: str, low: int, high: int, names: tuple[str, ...]) -> bool:
    if value.isdigit():
        return low <= int(value) <= high
    return value in names or (value == "l" and name == "day of month")


# The keys of one split's scores, per evaluate.metric (pipeline.metrics.registry; the config package may not import
# it): exact match's top1 and top<evaluate.topk>, and each text metric's; tests/pipeline/config checks them against
# what the metrics return.
ROUGE_KEYS = tuple(f"rouge{n}{part}" for n in ("1", "2", "L") for part in ("", "_r", "_p", "_f"))
METRIC_KEYS = {
    "rouge_f": ROUGE_KEYS,
    "rouge_f_chars": ROUGE_KEYS,
    "rouge_recall_75": ROUGE_KEYS,
    "bleu": ("bleu",),
    "bleu_sari": ("bleu", "sari"),
}


def metric_keys(kind: str, topk: int) -> tuple[str, ...] | None:
    """The keys the scores of a split scored by ``kind`` have (None: a kind this table does not know,
    which the evaluate stage refuses itself)."""
    return tuple(dict.fromkeys(("top1", f"top{topk}"))) if kind == "exact_match" else METRIC_KEYS.get(kind)


def check_metric_key(key: str, kind: str, topk: int, where: str) -> None:
    """``key`` (``top1``, ``rouge2``; ``groups.<group>.top1`` for exact match's groups) is a score a split
    scored by ``kind`` has: a decision on a key that is never computed fails only at its end."""
    keys = metric_keys(kind, topk)
    if keys is None:
        return
    parts = key.split(".")
    if kind == "exact_match" and len(parts) == 3 and parts[0] == "groups":
        parts = parts[2:]  # a group's own top1/topk
    if len(parts) != 1 or parts[0] not in keys:
        raise SettingsError(
            f"{where} is 'valid.{key}': the validation split is scored by {kind}, whose scores are "
            f"{', '.join(keys)}; write valid.<one of them>"
        )
