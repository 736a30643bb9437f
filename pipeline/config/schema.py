"""The settings schema: every section of params.yaml as a typed pydantic dataclass, with its types,
ranges, choices and the one set of defaults (those of the shipped params.yaml), and
:func:`check_params`, which checks a whole params file before any stage or command does work.

The runtime settings objects are these classes or thin subclasses that add behaviour
(``pipeline.training.settings.TrainConfig``, ``pipeline.decoding.settings.EvalConfig`` ...): a value is
checked once, where the class is built, and a refusal is a :class:`SettingsError` of one line that
names the setting, its value and what is allowed (:func:`build`).

Scalars are strict (``lr: fast``, ``epochs: 1.5``, ``deterministic: "yes"`` are refused, not
coerced); lists become tuples. An unknown key is refused with the nearest known name.

Across sections, :func:`check_params` also checks the rows of ``mechanisms`` against the declared
mechanisms and the variants, ``retrain`` against the tasks, rows and metrics, and each
``prepare.<task>.subword`` (:mod:`pipeline.config.checks`).

Not here: the rest of the ``prepare.<task>`` sections (each corpus reader's own settings class checks them, at
the prepare stage, before reading) and each mechanism's ``model.<mechanism>`` options (the mechanism's
options class, ``models.registry.model_config``, at the vocab, train and evaluate stages' start);
``python -m pipeline.config.schema`` writes ``params.schema.json`` (for editors) from these classes.
"""

from __future__ import annotations

import difflib
import json
import re
import sys
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

from pydantic import BeforeValidator, ConfigDict, Field, Strict, TypeAdapter, ValidationError
from pydantic.dataclasses import dataclass

from pipeline.config.arguments import OneLineParser, run_command
from pipeline.config.checks import check_cron, check_metric_key, check_subword
from pipeline.config.mechanisms import declared_mechanisms
from pipeline.config.params import REPO_ROOT, load_params
from pipeline.config.tasks import (
    MECHANISM_SECTIONS,
    TASK_SECTIONS,
    effective_params,
    selection_split_of,
    task_names,
    task_settings,
)
from pipeline.config.validation import SettingsError
from pipeline.config.variants import check_variants, resolve, variants_section

T = TypeVar("T")

# Scalars are strict: YAML already gives ints, floats and booleans their types, so a string or a bool
# where a number belongs is a mistake to name, not a value to convert (strict floats take ints).
Int = Annotated[int, Strict()]
PosInt = Annotated[int, Strict(), Field(ge=1)]
NonNegInt = Annotated[int, Strict(), Field(ge=0)]
Number = Annotated[float, Strict()]
NonNegNumber = Annotated[float, Strict(), Field(ge=0)]
PosNumber = Annotated[float, Strict(), Field(gt=0)]
Bool = Annotated[bool, Strict()]
Str = Annotated[str, Strict()]
Fraction = Annotated[float, Strict(), Field(ge=0, le=1)]
DEVICE = r"^(auto|cpu|cuda(:\d+)?)$"
Device = Annotated[str, Strict(), Field(pattern=DEVICE)]


def _pairs(value: Any) -> Any:
    """A YAML mapping as a sorted tuple of (key, value) pairs (hashable, order-free)."""
    return tuple(sorted(value.items())) if isinstance(value, Mapping) else value


def _items(value: Any) -> Any:
    """A YAML mapping as a tuple of (key, value) pairs in the file's order."""
    return tuple(value.items()) if isinstance(value, Mapping) else value


def _empty(value: Any) -> Any:
    """``null`` for a list or mapping: empty."""
    return () if value is None else value


StrPairs = Annotated[tuple[tuple[Str, Str], ...], BeforeValidator(_pairs, json_schema_input_type=dict[str, str])]
Match = Annotated[tuple[tuple[Str, Any], ...], BeforeValidator(_items, json_schema_input_type=dict[str, Any])]
Names = Annotated[tuple[Str, ...], BeforeValidator(_empty, json_schema_input_type=list[str] | None)]
SETTINGS = ConfigDict(extra="forbid")


@dataclass(frozen=True, config=SETTINGS)
class TrainSettings:
    """``train``: how every row is trained (docs/training.md)."""

    epochs: PosInt = 10
    max_steps: PosInt | None = None  # stop after N optimizer steps (fairseq --max-update)
    batch_size: PosInt = 32  # sentences per batch (per process)
    max_tokens: PosInt | None = None  # padded source + target positions per batch (fairseq --max-tokens)
    update_freq: PosInt = 1  # batches accumulated per optimizer step (OpenNMT-py accum_count)
    lr: PosNumber = 0.002
    clip: PosNumber = 5.0  # max gradient L2 norm
    seed: NonNegInt = 1234
    device: Device = "auto"  # auto | cpu | cuda | cuda:N
    amp: Literal["auto", "bf16", "off"] = "auto"  # auto: bf16 autocast on CUDA only | bf16: also on the CPU
    compile: Bool = False  # torch.compile the decoder's per-step recurrence (Seq2Seq.compile_recurrence)
    cuda_graphs: Bool = False  # replay the recurrent decoder's teacher forcing from CUDA graphs (CUDA only)
    max_src_len: PosInt | None = None
    threads: NonNegInt = 2  # torch CPU threads (0: torch's default); a fixed count fixes the reduction order
    deterministic: Bool = True  # torch.use_deterministic_algorithms: the same params give the same weights
    optimizer: Literal["adam", "sgd"] = "adam"  # Read-Again 4.1: SGD, lr 2, halved after epoch 5
    lr_halve_after: PosInt | None = None  # halve the learning rate after every epoch >= this one
    warmup_steps: NonNegInt = 0  # linear warm-up over the first N optimizer steps
    lr_decay: Literal["none", "inverse_sqrt", "plateau"] = "none"
    plateau_factor: Annotated[float, Strict(), Field(gt=0, le=1)] = (
        0.5  # lr x this after plateau_patience bad validations
    )
    plateau_patience: PosInt = 1
    min_lr: NonNegNumber = 0.0
    patience: PosInt | None = None  # early stopping: validations without improvement (null: never)
    min_delta: NonNegNumber = 0.0  # an improvement must beat the best by more than this
    validate_every: PosInt | None = None  # optimizer steps between validations (null: at each epoch's end)
    checkpoint_every: PosInt | None = None  # optimizer steps between checkpoints (besides validations)
    checkpoint_minutes: PosNumber | None = None  # minutes between checkpoints
    keep_checkpoints: NonNegInt = 0  # weights of the last K validations in steps/ (evaluate.average_last)
    log_every: PosInt = 50  # optimizer steps between step_loss / step_lr points
    workers: NonNegInt = 0  # DataLoader processes building batches (0: the training process)
    nproc: PosInt = 1  # processes per machine (> 1: torchrun, one per GPU)
    nnodes: PosInt = 1  # machines (> 1: rdzv_endpoint)
    rdzv_endpoint: Str | None = None  # host:port of torchrun's c10d rendezvous (several machines)
    rdzv_timeout: PosInt = 600  # seconds the first machine waits for the others, and a collective for a silent peer
    max_train_examples: PosInt | None = None  # the first N training rows only (cpu presets)
    max_valid_examples: PosInt | None = None  # the first N validation rows only
    seeds: PosInt = 1  # trainings of the row, with seeds seed, seed + 1, ... (the first is the registered model)
    select_by: Literal["auto", "loss", "metric"] = "auto"  # the best checkpoint and early stopping by
    select_beam: PosInt = 1  # the beam that decodes the validation split for select_by: metric (1: greedy)

    def __post_init__(self) -> None:
        if self.compile and self.cuda_graphs:
            raise ValueError("train.compile and train.cuda_graphs both replace the recurrence: choose one")
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise ValueError(
                f"train.nnodes is {self.nnodes} but train.rdzv_endpoint is not set: several machines need "
                "host:port of the rendezvous (this machine's address, reachable from the others)"
            )


@dataclass(frozen=True, config=SETTINGS)
class HeatmapSettings:
    """``evaluate.heatmap``: the example of the CopyNet Figure 3-style heat map, the first row of
    ``split`` (null: the first scored split) whose shard columns equal ``match``."""

    split: Str | None = "test"
    match: Match = ()  # (column, value) pairs, e.g. rule_type: x->xx


@dataclass(frozen=True, config=SETTINGS)
class EvalSettings:
    """``evaluate``: how every row is decoded and scored (docs/paper_tasks.md)."""

    beam_size: PosInt = 10  # CopyNet 5.1: "bin size = 10"
    max_len: PosInt = 50
    min_len: NonNegInt = 0
    length_penalty: Number = 0.0
    block_ngram: NonNegInt = 0
    batch_size: PosInt = 100
    topk: PosInt = 10
    splits: Names = ("test",)
    group_by: Str | None = None  # shard column to break metrics down by (e.g. rule_type)
    max_src_len: PosInt | None = None
    device: Device = "auto"
    # exact_match (CopyNet 5.1) or a text metric of pipeline.metrics.registry (checked by the evaluate
    # stage): rouge_f, rouge_f_chars, rouge_recall_75, bleu, bleu_sari; split_metrics overrides it per split.
    metric: Str = "exact_match"
    split_metrics: StrPairs = ()
    optional_splits: Names = ()  # evaluated when their shards exist (e.g. DUC 2004)
    max_examples: PosInt | None = None  # the first N rows of each split only (cpu presets)
    threads: NonNegInt = 2  # torch CPU threads (0: torch's default); fixed for the same results everywhere
    deterministic: Bool = True  # torch.use_deterministic_algorithms while decoding
    heatmap: HeatmapSettings = Field(default_factory=HeatmapSettings)
    replace_unk: Bool = False  # each output <unk> -> the most attended source word at that step
    ban_unk: Bool = False  # the search never emits <unk>
    average_last: NonNegInt = 0  # > 0: score the mean weights of the last K kept checkpoints

    def __post_init__(self) -> None:
        if self.min_len > self.max_len:
            raise ValueError(f"evaluate.min_len ({self.min_len}) must be at most evaluate.max_len ({self.max_len})")


@dataclass(frozen=True, config=SETTINGS)
class VocabSettings:
    """``vocab``: the vocabulary sizes the vocab stage builds."""

    src_max_size: PosInt | None = None  # specials included; null: every training token
    tgt_max_size: PosInt | None = None
    min_count: PosInt = 1


@dataclass(frozen=True, config=ConfigDict(extra="allow"))
class ModelSettings:
    """``model``: the sizes every mechanism shares (CopyNet 5.1's paper size: emb 150, hidden 300), and
    one mapping per mechanism (``model.pointer_softmax``, ``model.wean`` ...), which that mechanism's
    options class checks (``models.registry.model_config``, at the vocab, train and evaluate stages)."""

    emb: PosInt = 64
    hidden: PosInt = 128
    dropout: Annotated[float, Strict(), Field(ge=0, lt=1)] = 0.0
    encoder: Literal["bigru", "transformer"] = "bigru"
    encoder_hidden: PosInt | None = None  # encoder size per direction; memory M = 2 * encoder_hidden (null: hidden)
    transformer_layers: PosInt = 2  # encoder: transformer (d_model = 2 * encoder_hidden)
    transformer_heads: PosInt = 4  # must divide 2 * encoder_hidden
    decoder: Literal["recurrent", "transformer"] = "recurrent"
    decoder_layers: PosInt = 2  # decoder: transformer (pre-norm, d_model = hidden)
    decoder_heads: PosInt = 4  # must divide hidden
    decoder_ff: PosInt | None = None  # feed-forward size (null: 4 * hidden)
    backbone: Str | None = None  # a pretrained encoder-decoder (directory or hub name), backbone_* rows only

    def __post_init__(self) -> None:
        shared = [f.name for f in fields(ModelSettings)]
        for key, value in vars(self).items():
            if key not in shared and value is not None and not isinstance(value, Mapping):
                near = difflib.get_close_matches(key, shared, n=1, cutoff=0.5)
                raise ValueError(
                    f"model.{key} is {_shown(value)}: not a shared size"
                    + (f" (did you mean {near[0]}?)" if near else "")
                    + " nor a mechanism's section (a mapping of its options)"
                )


@dataclass(frozen=True, config=SETTINGS)
class CompareSettings:
    """``compare``: what a task's comparison page shows."""

    splits: Names = ("test",)  # the splits compared, in order (the first is charted)
    topk: PosInt = 10  # exact match: the top-k column (as evaluate.topk)
    columns: Names = ()  # metric keys (text tasks) or group names (exact match)
    paper_tables: dict[Str, Str] = Field(default_factory=dict)  # paper table id -> the split of ours beside it
    lead: Annotated[tuple[PosInt, ...], BeforeValidator(_empty)] = ()  # model-free lead-N rows
    resample_by: Str | None = None  # the shard column of the test set's natural groups (null: the reader's)


@dataclass(frozen=True, config=SETTINGS)
class ServingSettings:
    """``serving``: the limits of a registered model's server and of ``predict`` (docs/tracking.md)."""

    max_inputs: PosInt = 64  # texts per request (predict: lines per decoding chunk)
    max_input_chars: PosInt = 20_000  # characters per text, checked before tokenising
    max_src_tokens: PosInt = 400  # source tokens per text (longer: refused, not truncated)
    max_beam_size: PosInt = 20  # the largest beam_size a request may ask for
    max_output_len: PosInt = 200  # the largest max_len a request may ask for
    request_timeout_s: PosNumber = 30.0  # decoding stops after this (HTTP 504)
    max_concurrent: PosInt = 1  # decodes at once per server process; the others wait (then 503)
    max_batch_positions: PosInt = 100_000  # beam rows x source tokens per decoding batch
    unknown_warning: Fraction = 0.5  # warn above this share of out-of-vocabulary source tokens


@dataclass(frozen=True, config=SETTINGS)
class TrackingSettings:
    """``tracking``: the names runs and models are kept under."""

    experiment_prefix: Str | None = ""  # MLflow experiment = prefix + task name (null: no prefix)
    registry_prefix: Str | None = ""  # registered model = prefix + task name (alias `champion`)


@dataclass(frozen=True, config=SETTINGS)
class RetrainSettings:
    """``retrain``: scheduled champion/challenger retraining (flows/retrain.py, docs/tracking.md)."""

    task: Str = "copy_rules"  # the task retrained
    mechanism: Str | None = None  # the challenger's mechanism; null: the champion's
    cron: Str = "0 3 * * 0"  # the deployment's schedule (Sundays 03:00)
    deployment: Str | None = None  # null: retrain-<task>
    metric: Str | None = None  # valid.<key>: decided on validation only; null: the task's champion metric
    higher_is_better: Bool = True
    margin: NonNegNumber = 0.5  # promote iff the challenger is better by MORE than this
    pull: Bool = True  # `dvc pull` before reproducing
    pull_required: Bool = False  # a failed pull fails the run only when true
    repro_targets: Names = ("vocab@{task}",)  # `dvc repro` targets ({task} filled in); [] skips
    frozen_test: Literal["pin", "current"] = "pin"  # pin: the champion's frozen validation copy
    command_timeout_s: PosNumber = 3600.0
    retries: NonNegInt = 2
    retry_delay_s: NonNegNumber = 30.0

    def __post_init__(self) -> None:
        if not self.task:
            raise ValueError("retrain.task must name a task")
        if self.metric is not None:
            selection_split_of(self.metric, "retrain.metric")
        check_cron(self.cron, "retrain.cron")


@dataclass(frozen=True, config=SETTINGS)
class ParallelSettings:
    """``parallel``: how the prepare flow maps CPU-bound chunks (docs/corpora.md)."""

    task_runner: Literal["local", "dask"] = "local"  # local: a process pool | dask: DaskTaskRunner
    workers: NonNegInt = 0  # 0: one per CPU core
    dask_address: Str | None = None  # scheduler address of an existing Dask cluster (dask runner only)


@dataclass(frozen=True, config=SETTINGS)
class DataSettings:
    """``data``: where the real corpora are read from (never copied into the project)."""

    shared_root: Str = "../shared/data"


@dataclass(frozen=True, config=SETTINGS)
class VariantSettings:
    """``variants.<row>``: a mechanism under other settings, a row of its own (docs/training.md)."""

    mechanism: Str
    display: Str | None = None
    model: dict[Str, Any] = Field(default_factory=dict)
    train: dict[Str, Any] = Field(default_factory=dict)
    evaluate: dict[Str, Any] = Field(default_factory=dict)


Overrides = dict[Str, dict[Str, Any]]  # section -> its overrides (checked where they are merged)


@dataclass(frozen=True, config=SETTINGS)
class PresetSettings:
    """``task_settings.<task>.presets.<name>``: overrides of one preset (paper, cpu)."""

    vocab: dict[Str, Any] = Field(default_factory=dict)
    model: dict[Str, Any] = Field(default_factory=dict)
    train: dict[Str, Any] = Field(default_factory=dict)
    evaluate: dict[Str, Any] = Field(default_factory=dict)
    compare: dict[Str, Any] = Field(default_factory=dict)
    mechanisms: dict[Str, Overrides | None] = Field(default_factory=dict)


@dataclass(frozen=True, config=SETTINGS)
class TaskSettings(PresetSettings):
    """``task_settings.<task>``: what differs for one task (docs/own_data.md, docs/paper_tasks.md): the
    overrides a preset has, and these."""

    raw: Str | None = None  # the default raw input `tasks enable` writes under `tasks`
    champion: Str = "valid.top1"  # valid.<metric>: picks the best row (the registry alias `champion`)
    needs_modules: tuple[Str, ...] = ()  # Python modules the task's reader needs (an extra)
    needs_hint: Str | None = None  # how to install them
    trainable: Bool = True  # false: the task has no training split here (`tasks list` says why)
    why_not_trainable: Str | None = None
    presets: dict[Str, PresetSettings | None] = Field(default_factory=dict)


@dataclass(frozen=True, config=SETTINGS)
class ParamsFile:
    """The whole of params.yaml (its shape; the merged sections are checked by :func:`check_params`)."""

    tasks: dict[Str, Str] | None = None  # task -> its raw input (the file or directory DVC watches)
    mechanisms: tuple[Str, ...] = ()  # the rows every task runs: mechanisms and variants
    variants: dict[Str, VariantSettings] = Field(default_factory=dict)
    preset: Str | None = None  # the presets' name (paper | cpu) each task_settings.<task>.presets may define
    parallel: ParallelSettings = Field(default_factory=ParallelSettings)
    data: DataSettings = Field(default_factory=DataSettings)
    prepare: dict[Str, dict[Str, Any]] = Field(default_factory=dict)  # task -> its reader's settings
    vocab: VocabSettings = Field(default_factory=VocabSettings)
    model: ModelSettings = Field(default_factory=ModelSettings)
    train: TrainSettings = Field(default_factory=TrainSettings)
    evaluate: EvalSettings = Field(default_factory=EvalSettings)
    serving: ServingSettings = Field(default_factory=ServingSettings)
    compare: CompareSettings = Field(default_factory=CompareSettings)
    tracking: TrackingSettings = Field(default_factory=TrackingSettings)
    retrain: RetrainSettings = Field(default_factory=RetrainSettings)
    task_settings: dict[Str, TaskSettings | None] = Field(default_factory=dict)


# the sections a task's layers override, and the class that checks each once merged
SECTION_CLASSES = {
    "vocab": VocabSettings,
    "model": ModelSettings,
    "train": TrainSettings,
    "evaluate": EvalSettings,
    "compare": CompareSettings,
}


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _problem(error: dict, known: list[str]) -> str:
    """One pydantic error as 'what must hold' (the setting's name is added by the caller)."""
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind == "unexpected_keyword_argument":
        near = difflib.get_close_matches(str(error["loc"][-1]), known, n=1, cutoff=0.5)
        if near:
            return f"is not a setting (did you mean {near[0]}?)"
        listed = ", ".join(known) if len(known) <= 12 else f"{len(known)} settings, listed in params.schema.json"
        return f"is not a setting (known: {listed})"
    if kind in ("missing_argument", "missing"):
        return "is required"
    bounds = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}
    if kind in bounds:
        limit = next(iter(ctx.values()))
        return f"is {_shown(error['input'])}: must be {bounds[kind]} {limit}"
    wants = {
        "int_type": "an integer",
        "int_from_float": "an integer",
        "float_type": "a number",
        "bool_type": "true or false",
        "string_type": "a string",
        "dict_type": "a mapping (key: value)",
        "tuple_type": "a list",
        "list_type": "a list",
        "string_pattern_mismatch": "auto, cpu, cuda or cuda:N",
    }
    if kind in wants:
        hint = ""
        if kind == "float_type" and isinstance(error["input"], str) and re.fullmatch(r"[\d.]+e-?\d+", error["input"]):
            hint = " (YAML reads 1e-3 as text: write 1.0e-3)"
        return f"is {_shown(error['input'])}: must be {wants[kind]}{hint}"
    if kind == "literal_error":
        return f"is {_shown(error['input'])}: must be one of {ctx.get('expected')}"
    if kind == "value_error":
        return str(ctx.get("error", error["msg"]))
    return f"is {_shown(error['input'])}: {error['msg']}"


def _known_at(cls: type, path: list[str]) -> list[str]:
    """The setting names of the section at ``path`` below ``cls`` (a mapping's keys are skipped)."""
    node: Any = cls
    parts = list(path)
    while parts:
        hints = {f.name: f.type for f in fields(node)} if _is_settings(node) else {}
        node = _unwrap(hints.get(parts.pop(0)))
        while node is not None and get_origin(node) is dict and parts:
            parts.pop(0)  # a key of the mapping (a task, a row, a preset)
            node = _unwrap(get_args(node)[1])
        if node is None:
            return []
    return sorted(f.name for f in fields(node)) if _is_settings(node) else []


def _is_settings(node: Any) -> bool:
    return isinstance(node, type) and hasattr(node, "__pydantic_fields__")


def _unwrap(hint: Any) -> Any:
    """``X`` of ``X | None`` and of ``Annotated[X, ...]``; strings resolved against this module."""
    if isinstance(hint, str):
        hint = eval(hint, globals())  # noqa: S307  (the module's own annotations, never user input)
    while get_origin(hint) is Annotated:
        hint = get_args(hint)[0]
    if isinstance(hint, UnionType) or get_origin(hint) is Union:
        options = [a for a in get_args(hint) if a is not type(None)]
        hint = _unwrap(options[0]) if len(options) == 1 else None
    return hint


def describe(err: ValidationError, where: str, cls: type) -> str:
    """A pydantic error of ``cls`` built from the section at ``where`` ("" for the whole file) as
    one problem per setting, each naming it (``where.key``); a rule across settings is its message."""
    lines = []
    for error in err.errors():
        loc = [str(part) for part in error["loc"] if not isinstance(part, int)]
        problem = _problem(error, _known_at(cls, loc[:-1]))
        if error["type"] == "value_error":
            lines.append(problem.removeprefix("params.yaml: "))  # the file is named once, by check_params
        else:
            lines.append(f"{'.'.join([where, *loc]) if where else '.'.join(loc)} {problem}")
    return "; ".join(lines)


def build(cls: type[T], section: Mapping | None, where: str) -> T:
    """``cls`` from a params section (``None``: the defaults); a :class:`SettingsError` of one line
    naming every bad setting (``where.key``) otherwise."""
    if section is None:
        section = {}
    if not isinstance(section, Mapping):
        raise SettingsError(f"{where} must be a mapping (key: value), got {_shown(section)}")
    try:
        return cls(**section)
    except ValidationError as err:
        raise SettingsError(describe(err, where, cls)) from None


def _check_overrides(overrides: Mapping | None, where: str, sections: tuple[str, ...]) -> None:
    """One layer of overrides (a task's, a preset's, a row's): known sections, known keys, good values
    (each key as if alone, over the defaults); the merged result is checked afterwards."""
    for name, values in (overrides or {}).items():
        if name not in sections:
            continue  # not a section this layer may hold: the layer's own class refused it already
        cls = SECTION_CLASSES.get(name)
        if cls is None or not values:
            continue
        for key, value in values.items():
            try:
                cls(**{key: value})
            except ValidationError as err:
                if all(e["type"] == "value_error" and not e["loc"] for e in err.errors()):
                    continue  # a cross-setting rule: judged on the merged section
                raise SettingsError(describe(err, f"{where}.{name}", cls)) from None


def check_params(params: Mapping, path: str | Path | None = None) -> None:
    """Check a whole params file before any work: its shape, every shared section, every override
    layer, and every task's merged sections for each of its rows; the first problem found is a
    :class:`SettingsError` of one line, ``<file>: <setting> ...``."""
    name = Path(path).name if path else "params.yaml"
    try:
        _check(params)
    except SettingsError as err:
        raise SettingsError(f"{name}: {err}") from None
    except (KeyError, ValueError) as err:  # the merging and variant helpers' own refusals
        message = err.args[0] if err.args else str(err)
        raise SettingsError(f"{name}: {str(message).removeprefix('params.yaml: ')}") from None


def _check(params: Mapping) -> None:
    document = build(ParamsFile, params, "")
    _check_rows(params, document.mechanisms)
    _check_retrain(params, document)
    for task, reader in document.prepare.items():  # the rest of a reader's settings: its own class, at prepare
        check_subword(reader.get("subword"), f"prepare.{task}.subword")
    for row in document.mechanisms:
        resolve(params, row)
    for variant, spec in document.variants.items():
        for section in MECHANISM_SECTIONS:
            _check_overrides({section: getattr(spec, section)}, f"variants.{variant}", MECHANISM_SECTIONS)
    for task, settings in document.task_settings.items():
        if settings is None:
            continue
        where = f"task_settings.{task}"
        _check_validation_metric(params, task, settings.champion, f"{where}.champion")
        _check_overrides({s: getattr(settings, s) for s in TASK_SECTIONS}, where, TASK_SECTIONS)
        for row, overrides in settings.mechanisms.items():
            _check_overrides(overrides, f"{where}.mechanisms.{row}", MECHANISM_SECTIONS)
        for preset, spec in settings.presets.items():
            if spec is None:
                continue
            at = f"{where}.presets.{preset}"
            _check_overrides({s: getattr(spec, s) for s in TASK_SECTIONS}, at, TASK_SECTIONS)
            for row, overrides in spec.mechanisms.items():
                _check_overrides(overrides, f"{at}.mechanisms.{row}", MECHANISM_SECTIONS)
    for task in task_names(dict(params)):
        for row in (None, *document.mechanisms):
            merged = effective_params(dict(params), task, row)
            for section, cls in SECTION_CLASSES.items():
                if row is not None and section not in MECHANISM_SECTIONS:
                    continue
                what = f"{section} (task {task}" + (f", row {row})" if row else ")")
                build(cls, merged.get(section), what)
            if row is not None:
                _check_selection_beam(params, merged, task, row)


def _check_rows(params: Mapping, rows: tuple[str, ...]) -> None:
    """Each row of ``mechanisms`` once, and each a declared mechanism or a variant of ``variants``;
    each variant based on a declared mechanism. Otherwise the train stage is the first to notice,
    after the data stages have run."""
    known = declared_mechanisms()
    if not known:
        return  # the models' sources are not there to read (an install without them): the train stage checks
    variants = variants_section(params)
    twice = sorted({row for row in rows if rows.count(row) > 1})
    if twice:
        raise SettingsError(
            f"mechanisms lists {', '.join(map(repr, twice))} twice: list each row once (its checkpoints, runs and "
            "results are named after it)"
        )
    for row in rows:
        if row not in known and row not in variants:
            raise SettingsError(
                f"mechanisms lists {row!r}: neither a mechanism ({', '.join(known)}) nor a variant under "
                f"variants ({', '.join(sorted(variants)) or 'none'})"
            )
    check_variants(params, known)


def _check_retrain(params: Mapping, document: ParamsFile) -> None:
    """``retrain`` against the rest of the file: its task a task of the project, its mechanism a row
    of ``mechanisms`` (the rows the champion is chosen among), its metric a score the task's validation
    split has (``evaluate.metric``, or ``evaluate.split_metrics.valid``). A task with ``task_settings`` that is
    not enabled is let through (as is the default when ``retrain.task`` is not written): a project
    that runs other tasks keeps the shipped ``retrain`` section, which only the retrain command reads."""
    retrain = document.retrain
    tasks = dict(document.tasks or {})
    written = "task" in (params.get("retrain") or {})  # the default names the shipped task, which may be gone
    if written and retrain.task not in tasks and retrain.task not in document.task_settings:
        raise SettingsError(f"retrain.task is {retrain.task!r}: not a task under tasks ({', '.join(tasks) or 'none'})")
    if retrain.metric is not None:
        _check_validation_metric(params, retrain.task, retrain.metric, "retrain.metric")
    if retrain.mechanism is not None and retrain.mechanism not in document.mechanisms:
        raise SettingsError(
            f"retrain.mechanism is {retrain.mechanism!r}: not a row under mechanisms "
            f"({', '.join(document.mechanisms) or 'none'}); null takes the champion's"
        )


def _valid_kind(evaluate: Mapping) -> str:
    """The metric that scores the validation split: ``split_metrics.valid``, else ``metric``."""
    return dict(_pairs(evaluate.get("split_metrics") or {})).get("valid", evaluate.get("metric", "exact_match"))


AUTO_SELECT_BY = {"exact_match": "metric"}  # train.select_by: auto, by the validation split's metric kind


def resolved_select_by(select_by: str, valid_kind: str) -> str:
    """``train.select_by`` made concrete: ``auto`` is the metric for a task scored by exact match (its
    validation loss bottoms out epochs before accuracy stops rising: docs/training.md, "Which
    checkpoint"), the loss for the text metrics."""
    return select_by if select_by != "auto" else AUTO_SELECT_BY.get(valid_kind, "loss")


def _check_selection_beam(params: Mapping, merged: Mapping, task: str, row: str) -> None:
    """A row whose checkpoints are chosen by the champion's metric decodes the validation split with a
    beam of ``train.select_beam``: a champion ``valid.top<k>`` needs k hypotheses, which a narrower
    beam never gives (the first validation would fail on a score that is not there)."""
    train, evaluate = merged.get("train") or {}, merged.get("evaluate") or {}
    if resolved_select_by(train.get("select_by", "auto"), _valid_kind(evaluate)) != "metric":
        return
    _, key = selection_split_of(str(task_settings(dict(params), task).get("champion", "valid.top1")), "champion")
    beam = train.get("select_beam", 1)
    if key.startswith("top") and key[3:].isdigit() and int(key[3:]) > beam:
        raise SettingsError(
            f"task_settings.{task}.champion is 'valid.{key}' and the checkpoints of {row} are chosen by it, "
            f"but train.select_beam is {beam}: a beam of {beam} gives {key} no value; set train.select_beam to "
            f"{key[3:]} or more, train.select_by: loss, or champion: valid.top1"
        )


def _check_validation_metric(params: Mapping, task: str, value: str, where: str) -> None:
    """``value`` (``valid.<key>``) names a score the validation split of ``task`` has under the task's
    effective ``evaluate`` settings (its ``split_metrics.valid``, else its ``metric``): a champion or a
    decision on a key that is never computed would fail only after training."""
    _, key = selection_split_of(value, where)
    evaluate = effective_params(dict(params), task).get("evaluate") or {}
    check_metric_key(key, _valid_kind(evaluate), evaluate.get("topk", 10), where)


def check_params_file(path: str | Path | None = None) -> dict:
    """Load ``path`` (default: the repository's params.yaml), check it (:func:`check_params`) and
    return it; a problem is a :class:`SettingsError` of one line."""
    path = Path(path) if path else REPO_ROOT / "params.yaml"
    params = load_params(path)  # the file itself (there, a file, UTF-8, YAML, no key twice): one line
    check_params(params, path)
    return params


def json_schema() -> dict:
    """The JSON Schema of params.yaml (editors: ``# yaml-language-server: $schema=params.schema.json``)."""
    schema = TypeAdapter(ParamsFile).json_schema()
    schema["title"] = "params.yaml"
    return schema


SCHEMA_FILE = REPO_ROOT / "params.schema.json"


def main(argv: list[str] | None = None) -> int:
    """``copyseq check [--params FILE] [--write]``: check a params file (exit 2 with one line when it is
    wrong); ``--write`` also rewrites params.schema.json from the classes."""
    parser = OneLineParser(prog="copyseq check", description=main.__doc__)
    parser.add_argument("--params", default=None, help="params file (default: the repository's params.yaml)")
    parser.add_argument("--write", action="store_true", help="rewrite params.schema.json (for editors)")
    args = parser.parse_args(argv)
    try:
        check_params_file(args.params)
    except SettingsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.write:
        SCHEMA_FILE.write_text(json.dumps(json_schema(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
        print(f"wrote {SCHEMA_FILE.name}")
    print("params: ok")
    return 0


if __name__ == "__main__":
    sys.exit(run_command(main))
