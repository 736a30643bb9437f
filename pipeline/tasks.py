"""Tasks: what `dvc repro` trains and evaluates, and each task's own settings.

``params.yaml``:

* ``tasks`` maps each task to run to its raw input (the file or directory DVC watches; a task's
  shards are ``data/shards/<task>``, prepared by the reader ``prepare.<task>`` names);
* ``task_settings.<task>`` holds what differs per task: ``raw`` (the default raw input, used by
  ``python -m pipeline.tasks enable``), ``champion`` (``split.metric`` that picks the best model),
  overrides of the shared ``vocab``/``model``/``train``/``evaluate``/``compare`` sections, and
  ``presets.<name>`` with further overrides (``paper``: the papers' sizes; ``cpu``: minutes on a
  laptop), of which ``preset`` selects one.

A stage reads ``effective_params(params, task)``: the shared sections deep-merged with the task's
overrides, then its preset's. A task without settings runs on the shared sections as they are. The
train and evaluate stages of one mechanism read ``effective_params(params, task, mechanism)``, which
also merges ``task_settings.<task>.mechanisms.<mechanism>`` (and the same under the preset) last:
e.g. ``mechanisms: {copynet: {train: {epochs: 20}}}`` when one mechanism needs more steps.

``python -m pipeline.tasks list`` shows every known task and whether its data is present;
``python -m pipeline.tasks enable --available`` (or ``enable NAME ...``) rewrites the ``tasks``
block of params.yaml to the tasks whose data is present (the others stay as comments, with the
reason they are skipped), so `dvc repro` never fails on a corpus that is not there.
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import os
import re
from copy import deepcopy
from pathlib import Path

import yaml

from pipeline.params import REPO_ROOT, load_params, section

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


def effective_params(params: dict, task: str, mechanism: str | None = None) -> dict:
    """params with the shared sections overridden by the task's settings and its preset; with
    ``mechanism``, then by that mechanism's overrides in the task's settings and in its preset."""
    settings, preset = task_settings(params, task), preset_overrides(params, task)
    unknown = sorted(set(preset) - {*TASK_SECTIONS, "mechanisms"})
    if unknown:
        raise KeyError(
            f"params.yaml: task_settings.{task}.presets.{params.get('preset')} has unknown sections "
            f"{unknown}; allowed: {[*TASK_SECTIONS, 'mechanisms']}"
        )
    layers = [settings, preset]
    if mechanism is not None:
        layers += [_mechanism_overrides(settings, task, mechanism), _mechanism_overrides(preset, task, mechanism)]
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


def primary_metric(params: dict, task: str) -> tuple[str, str, bool]:
    """``(split, metric key, higher_is_better)`` that ranks mechanisms on ``task`` (the champion)."""
    spec = task_settings(params, task).get("champion", "test.top1")
    split, _, key = spec.partition(".")
    if not key:
        raise ValueError(f"params.yaml: task_settings.{task}.champion must be 'split.metric', got {spec!r}")
    return split, key, True


# --------------------------------------------------------------------------- #
# Which tasks can run here
# --------------------------------------------------------------------------- #


def _exists(path: Path) -> bool:
    return path.exists() or bool(glob.glob(str(path)))


def missing_inputs(params: dict, task: str, raw: str | None, root: Path = REPO_ROOT) -> list[str]:
    """The raw files/directories ``task``'s reader settings name that are absent (relative paths
    resolve against ``raw``, as ``flows.prepare`` resolves them)."""
    if raw is None:
        return [f"task_settings.{task}.raw is not set"]
    raw_root = root / raw
    if not raw_root.exists():
        return [str(raw_root)]
    settings = section(params, "prepare", task)
    missing = []
    for key, value in settings.items():
        if key == "cache_dir" or value is None:
            continue
        if key.endswith(("_dir", "_file")):
            values = [value]
        elif key.endswith("_files"):
            values = list(value)
        else:
            continue
        missing += [str(raw_root / v) for v in values if not os.path.isabs(v) and not _exists(raw_root / v)]
    for name, extra in (settings.get("extra_splits") or {}).items():
        if not extra.get("optional") and not (raw_root / extra["raw"]).exists():
            missing.append(f"{raw_root / extra['raw']} (split {name})")
    return missing


def task_status(params: dict, task: str, root: Path = REPO_ROOT) -> str:
    """'ready', or why the task cannot run here."""
    settings = task_settings(params, task)
    raw = (params.get("tasks") or {}).get(task) or settings.get("raw")
    if "prepare" not in params or task not in params["prepare"]:
        return f"no prepare.{task} reader settings"
    missing = missing_inputs(params, task, raw, root)
    if missing:
        return "data absent: " + ", ".join(missing)
    for module in settings.get("needs_modules", []):
        if importlib.util.find_spec(module) is None:
            return f"needs the Python module {module!r} ({settings.get('needs_hint', 'an optional extra')})"
    if settings.get("trainable") is False:
        return f"no training split: {settings.get('why_not_trainable', '')}".rstrip(": ")
    return "ready"


def tasks_block(params: dict, enabled: list[str], statuses: dict[str, str]) -> str:
    """The ``tasks:`` block of params.yaml for ``enabled`` tasks, the others listed as comments."""
    raws = {t: (params.get("tasks") or {}).get(t) or task_settings(params, t).get("raw") for t in statuses}
    lines = [
        "# The tasks `dvc repro` runs: task -> its raw input (the file or directory DVC watches; the",
        "# reader settings prepare.<task> resolve their *_dir/*_file paths against it). Rewritten by",
        "# `python -m pipeline.tasks enable ...`; editing it by hand is fine too.",
        "tasks:",
    ]
    for task in enabled:
        lines.append(f"  {task}: {raws[task]}")
    for task, status in statuses.items():
        if task not in enabled:
            lines.append(f"  # {task}: {raws[task]}   # {status}")
    return "\n".join(lines) + "\n"


def rewrite_tasks_block(params_path: Path, block: str) -> None:
    """Replace the top-level ``tasks:`` block (and the comment lines just above it) in place."""
    from pipeline.shards import write_text_atomic

    text = params_path.read_text(encoding="utf-8")
    pattern = re.compile(r"(?:^#[^\n]*\n)*^tasks:[^\n]*\n(?:^(?:[ \t]+[^\n]*|[ \t]*)\n)*", re.M)
    match = pattern.search(text)
    if match is None:
        raise ValueError(f"{params_path}: no top-level 'tasks:' block to rewrite")
    new_text = text[: match.start()] + block + "\n" + text[match.end() :]
    yaml.safe_load(new_text)  # never write a file YAML cannot read
    write_text_atomic(params_path, new_text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.tasks", description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", default=str(REPO_ROOT / "params.yaml"))
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="every known task and whether it can run here")
    enable = sub.add_parser("enable", help="rewrite params.yaml's tasks block")
    enable.add_argument("names", nargs="*", help="tasks to enable (default: --available)")
    enable.add_argument("--available", action="store_true", help="every task whose data is present")
    enable.add_argument("--preset", choices=["paper", "cpu"], help="also set params.yaml's preset")
    args = parser.parse_args(argv)

    params_path = Path(args.params).resolve()
    params = load_params(params_path)
    known = list(dict.fromkeys(task_names(params) + list(params.get("task_settings") or {})))
    statuses = {t: task_status(params, t, params_path.parent) for t in known}
    if args.command == "list":
        width = max(map(len, known))
        for task in known:
            mark = "*" if task in task_names(params) else " "
            print(f"{mark} {task:<{width}}  {statuses[task]}")
        print(f"(* enabled; preset: {params.get('preset')})")
        return 0
    unknown = sorted(set(args.names) - set(known))
    if unknown:
        parser.error(f"unknown tasks {unknown}; known: {known}")
    enabled = [t for t in known if (t in args.names or (args.available and statuses[t] == "ready"))]
    blocked = {t: statuses[t] for t in args.names if statuses[t] != "ready"}
    if blocked:
        parser.error("cannot enable: " + "; ".join(f"{t}: {s}" for t, s in blocked.items()))
    rewrite_tasks_block(params_path, tasks_block(params, enabled, statuses))
    if args.preset:
        text = params_path.read_text(encoding="utf-8")
        new_text, n = re.subn(r"^preset:[ \t]*[^\s#]*", f"preset: {args.preset}", text, count=1, flags=re.M)
        if n != 1:
            raise ValueError(f"{params_path}: no top-level 'preset:' line")
        from pipeline.shards import write_text_atomic

        write_text_atomic(params_path, new_text)
    print(f"enabled: {', '.join(enabled) or '(none)'}" + (f"; preset {args.preset}" if args.preset else ""))
    for task, status in statuses.items():
        if task not in enabled:
            print(f"  skipped {task}: {status}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
