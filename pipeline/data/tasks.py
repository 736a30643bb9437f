"""Which tasks can run here, and switching them on: ``python -m pipeline.data.tasks list|enable``.

``list`` shows every task of ``params.yaml`` (``tasks`` and ``task_settings``) and whether its data
is present: the raw input and every path its reader settings name (the rule of
:func:`pipeline.data.prepare.resolve_paths`), the optional Python modules it needs, a training
split. ``enable --available`` (or ``enable NAME ...``) rewrites the ``tasks`` block of params.yaml
to the tasks whose data is present (the others stay as comments, with the reason they are
skipped), so `dvc repro` never fails on a corpus that is not there; ``--preset`` also sets
``preset``. What a task's settings mean: :mod:`pipeline.config.tasks`.
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import os
import re
from pathlib import Path

import yaml

from pipeline.config.params import REPO_ROOT, load_params, section
from pipeline.config.tasks import task_names, task_settings
from pipeline.data.prepare import raw_input_paths
from pipeline.io.files import write_text_atomic


def _exists(path: Path) -> bool:
    return path.exists() or bool(glob.glob(str(path)))


def missing_inputs(params: dict, task: str, raw: str | None, root: Path = REPO_ROOT) -> list[str]:
    """The raw files/directories ``task``'s reader settings name that are absent (relative paths
    resolve against ``raw``, as :func:`pipeline.data.prepare.resolve_paths` resolves them)."""
    if raw is None:
        return [f"task_settings.{task}.raw is not set"]
    raw_root = root / raw
    if not raw_root.exists():
        return [str(raw_root)]
    settings = section(params, "prepare", task)
    missing = []
    for values in raw_input_paths(settings).values():
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
        "# `python -m pipeline.data.tasks enable ...`; editing it by hand is fine too.",
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
    text = params_path.read_text(encoding="utf-8")
    pattern = re.compile(r"(?:^#[^\n]*\n)*^tasks:[^\n]*\n(?:^(?:[ \t]+[^\n]*|[ \t]*)\n)*", re.M)
    match = pattern.search(text)
    if match is None:
        raise ValueError(f"{params_path}: no top-level 'tasks:' block to rewrite")
    new_text = text[: match.start()] + block + "\n" + text[match.end() :]
    yaml.safe_load(new_text)  # never write a file YAML cannot read
    write_text_atomic(params_path, new_text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.data.tasks", description=__doc__.split("\n\n")[0])
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
        write_text_atomic(params_path, new_text)
    print(f"enabled: {', '.join(enabled) or '(none)'}" + (f"; preset {args.preset}" if args.preset else ""))
    for task, status in statuses.items():
        if task not in enabled:
            print(f"  skipped {task}: {status}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
