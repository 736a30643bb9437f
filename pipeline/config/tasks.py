"""Tasks: what `dvc repro` trains and evaluates, and each task's own settings.

``params.yaml``:

* ``tasks`` maps each task to run to its raw input (the file or directory DVC watches; a task's
  shards are ``data/shards/<task>``, prepared by the reader ``prepare.<task>`` names);
* ``task_settings.<task>`` holds what differs per task: ``raw`` (the default raw input, used by
  ``python -m pipeline.data.tasks enable``), ``champion`` (``valid.<metric>`` that picks the best model),
  overrides of the shared ``vocab``/``model``/``train``/``evaluate``/``compare`` sections, and
  ``presets.<name>`` with further overrides (``paper``: the papers' sizes; ``cpu``: minutes on a
  laptop), of which ``preset`` selects one.

A stage reads ``effective_params(params, task)``: the shared sections deep-merged with the task's
overrides, then its preset's. A task without settings runs on the shared sections as they are. The
train and evaluate stages of one mechanism read ``effective_params(params, task, mechanism)``, which
also merges ``task_settings.<task>.mechanisms.<mechanism>`` (and the same under the preset) last:
e.g. ``mechanisms: {copynet: {train: {epochs: 20}}}`` when one mechanism needs more steps. A variant
(``params['variants']``, :mod:`pipeline.config.variants`: a mechanism under other settings, a row of
its own) gets its base mechanism's entries, then its own sections, then its own entries
(``mechanisms: {copynet_transformer: {train: {epochs: 6}}}``).

Which tasks can run here (their data present) and rewriting the ``tasks`` block:
:mod:`pipeline.data.tasks` (``python -m pipeline.data.tasks list|enable``).
"""

from __future__ import annotations

from copy import deepcopy

from pipeline.config.variants import resolve

TASK_SECTIONS = ("vocab", "model", "train", "evaluate", "compare")
MECHANISM_SECTIONS = ("model", "train", "evaluate")  # what task_settings.<task>.mechanisms.<m> may override


def deep_merge(base: dict, *overrides: dict) -> dict:
    """``base`` with each override applied in turn; nested mappings merge, anything else replaces."""
    out = deepcopy(base)
    for override in overrides:
        for key, value in (override or {}).items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = deep_merge(out[key], value)
            else:
                out[key] = deepcopy(value)
    return out


def task_names(params: dict) -> list[str]:
    return list(params.get("tasks") or {})


def task_settings(params: dict, task: str) -> dict:
    return (params.get("task_settings") or {}).get(task) or {}


def preset_overrides(params: dict, task: str) -> dict:
    """The overrides of the selected preset (``params['preset']``) for ``task``; {} when it has none."""
    presets = task_settings(params, task).get("presets") or {}
    name = params.get("preset")
    if not presets or name is None:
        return {}
    if name not in presets:
        raise KeyError(f"params.yaml: task_settings.{task}.presets has no preset {name!r} (has {sorted(presets)})")
    return presets[name] or {}


def effective_params(params: dict, task: str, mechanism: str | None = None, task_overrides: bool = True) -> dict:
    """params with the shared sections overridden by the task's settings and its preset; with
    ``mechanism`` (a mechanism or a variant's name), then by that mechanism's overrides in the task's
    settings and in its preset. For a variant, in this order: its base's overrides there, the
    variant's own sections (``variants.<name>``), its own overrides there. ``task_overrides=False``
    leaves out the task's per-mechanism entries (a variant's own sections still apply)."""
    settings, preset = task_settings(params, task), preset_overrides(params, task)
    unknown = sorted(set(preset) - {*TASK_SECTIONS, "mechanisms"})
    if unknown:
        raise KeyError(
            f"params.yaml: task_settings.{task}.presets.{params.get('preset')} has unknown sections "
            f"{unknown}; allowed: {[*TASK_SECTIONS, 'mechanisms']}"
        )
    layers = [settings, preset]
    if mechanism is not None:
        row = resolve(params, mechanism)

        def entries(name: str) -> list[dict]:
            if not task_overrides:
                return []
            return [_mechanism_overrides(settings, task, name), _mechanism_overrides(preset, task, name)]

        layers += entries(row.mechanism)
        if row.is_variant:
            layers += [row.overrides, *entries(row.name)]
    out = dict(params)
    for name in TASK_SECTIONS:
        out[name] = deep_merge(params.get(name) or {}, *(layer.get(name) or {} for layer in layers))
    return out


def _mechanism_overrides(settings: dict, task: str, mechanism: str) -> dict:
    """``settings['mechanisms'][mechanism]``, checked: only the sections one mechanism may change."""
    overrides = (settings.get("mechanisms") or {}).get(mechanism) or {}
    unknown = sorted(set(overrides) - set(MECHANISM_SECTIONS))
    if unknown:
        raise KeyError(
            f"params.yaml: task_settings.{task}...mechanisms.{mechanism} has unknown sections {unknown}; "
            f"allowed: {list(MECHANISM_SECTIONS)}"
        )
    return overrides


SELECTION_SPLIT = "valid"  # every choice (checkpoints, epochs, champion, promotion) reads this split only


def selection_split_of(spec: str, setting: str) -> tuple[str, str]:
    """``(split, key)`` of a metric named ``valid.<key>`` (or ``<key>``); a ValueError naming ``setting``
    for any other split: nothing is chosen on a test split."""
    split, _, key = spec.partition(".") if spec.startswith(f"{SELECTION_SPLIT}.") else ("", "", spec)
    split = split or SELECTION_SPLIT
    first = spec.split(".")[0]
    if not key or ("." in spec and first != SELECTION_SPLIT):
        raise ValueError(
            f"params.yaml: {setting} is {spec!r}: models are chosen on the validation split only; "
            f"write '{SELECTION_SPLIT}.<metric>' (e.g. {SELECTION_SPLIT}.{key.split('.')[-1] or 'top1'})"
        )
    return split, key


def selection_metric(params: dict, task: str) -> tuple[str, str, bool]:
    """``(split, metric key, higher_is_better)`` that ranks the mechanisms of ``task`` (the champion)
    and chooses their checkpoints (``train.select_by: metric``): always on the validation split."""
    spec = str(task_settings(params, task).get("champion", f"{SELECTION_SPLIT}.top1"))
    split, key = selection_split_of(spec, f"task_settings.{task}.champion")
    return split, key, True
