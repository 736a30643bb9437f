"""Each row's settings in a file of its own, so that a change to one row reruns that row alone.

DVC reruns a stage when a params key it lists changes, and a key is a whole section: the train stage
of every row would list ``task_settings.<task>`` (every row's entries) and ``variants`` (every
variant), so a change to one row's epochs would retrain all of them. Instead the ``settings`` stage
(``python -m pipeline.config.rows``) writes, from params.yaml,

* ``data/settings/<task>/<row>.json``: :func:`row_params`, all that the train and evaluate stages of
  that row read (its merged sections, the task's reader settings and champion metric), and
* ``data/settings/<task>/vocab.json``: :func:`vocab_params`, what the vocab stage reads (the merged
  ``vocab`` section and the backbone each row runs on);

the other stages depend on these files, not on params sections. The stages themselves read only
these slices (``row_params(load_params(...), task, row)``), so a setting they read is in the file by
construction, and a file whose bytes did not change reruns nothing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pipeline.config.backbones import row_backbone
from pipeline.config.params import load_params, project_root
from pipeline.config.tasks import effective_params, task_names, task_settings
from pipeline.config.validation import SettingsError
from pipeline.config.variants import resolve

ROW_SECTIONS = ("vocab", "model", "train", "evaluate")  # merged for the row (its task, preset, variant, entries)
SHARED_SECTIONS = ("serving", "tracking", "data")  # read as they are
SETTINGS_DIR = Path("data") / "settings"


def row_params(params: dict, task: str, row: str) -> dict:
    """The params of one row of one task as its train and evaluate stages read them: the merged
    sections, the shared ones, the task's raw input, reader settings and champion metric, and the
    row's variant declaration (its overrides are merged already). ``effective_params`` of the
    result for (task, row) gives the same sections as of ``params`` (``model`` without the other
    mechanisms' options)."""
    merged = effective_params(params, task, row)
    out = {name: merged.get(name) or {} for name in ROW_SECTIONS}
    base = resolve(params, row).mechanism  # of model.<mechanism>, the row's base's own options only
    out["model"] = {k: v for k, v in out["model"].items() if not isinstance(v, dict) or k == base}
    out.update({name: params[name] for name in SHARED_SECTIONS if name in params})
    out["tasks"] = {task: (params.get("tasks") or {}).get(task)}
    out["prepare"] = {task: (params.get("prepare") or {}).get(task) or {}}
    champion = task_settings(params, task).get("champion")
    out["task_settings"] = {task: {"champion": champion} if champion is not None else {}}
    out["mechanisms"] = [row]
    variant = resolve(params, row)
    if variant.is_variant:  # its name and base; its sections are in the merged ones above
        out["variants"] = {
            row: {"mechanism": variant.mechanism, **({"display": variant.display} if variant.display else {})}
        }
    return out


def stage_params(params: dict, task: str, row: str) -> dict:
    """The params the train and evaluate stages of a row run on: :func:`row_params`, merged
    (nothing outside the row's settings file reaches them)."""
    return effective_params(row_params(params, task, row), task, row)


def vocab_params(params: dict, task: str) -> dict:
    """What the vocab stage of ``task`` reads: the merged ``vocab`` section and, for each row of
    ``mechanisms``, the pretrained backbone it runs on (null: none)."""
    rows = list(params.get("mechanisms") or [])
    backbones = {}
    for row in rows:
        merged = effective_params(params, task, row)
        backbones[row] = row_backbone(merged.get("model"), resolve(merged, row).mechanism)
    return {"vocab": effective_params(params, task).get("vocab") or {}, "backbones": backbones}


def settings_files(params: dict) -> dict[Path, dict]:
    """Every file of ``data/settings`` (relative to the project root) and its content."""
    files = {}
    for task in task_names(params):
        files[SETTINGS_DIR / task / "vocab.json"] = vocab_params(params, task)
        for row in params.get("mechanisms") or []:
            files[SETTINGS_DIR / task / f"{row}.json"] = row_params(params, task, row)
    return files


def settings_text(content: dict) -> str:
    """A settings file's text: its bytes decide whether the stages that depend on it rerun."""
    return json.dumps(content, indent=1, sort_keys=True, default=str) + "\n"


def stale_files(params: dict, root: Path) -> dict[Path, dict]:
    """The settings files (relative to ``root``) that the settings stage would write anew from
    ``params``: absent, or another text on disk; with their new content. A dry run does not run the
    settings stage, so the stages that depend on these files would run although their deps look
    unchanged (``copyseq repro --dry`` and ``run --dry`` say so)."""
    stale = {}
    for path, content in settings_files(params).items():
        target = Path(root) / path
        if not target.is_file() or target.read_text(encoding="utf-8") != settings_text(content):
            stale[path] = content
    return stale


def rows_with_new_vocab_records(old: dict | None, new: dict) -> set[str]:
    """The rows whose vocab record (``data/vocab/<task>/rows/<row>.json``, which their stages depend
    on) the vocab stage would rewrite when its settings go from ``old`` to ``new`` (:func:`vocab_params`;
    ``old`` None: never written): every row when the vocab section changes, else the rows added or on
    another backbone. A backbone added for one row changes no other row's record."""
    if old is None or old.get("vocab") != new["vocab"]:
        return set(new["backbones"])
    before = old.get("backbones") or {}
    return {row for row, backbone in new["backbones"].items() if row not in before or before[row] != backbone}


def write(params_path: str | None = None) -> list[Path]:
    """Write ``data/settings`` of the project of ``params_path``: one file per task and row (and
    the vocab stage's per task), nothing else (a file of a row no longer listed is removed)."""
    params = load_params(params_path)
    root = project_root(params_path)
    files = settings_files(params)
    for path, content in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        text = settings_text(content)
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
    for old in sorted((root / SETTINGS_DIR).glob("*/*.json")):
        if old.relative_to(root) not in files:
            old.unlink()
    return sorted(files)


def main(argv: list[str] | None = None) -> int:
    """``python -m pipeline.config.rows [--params FILE]``: the settings stage."""
    args = list(sys.argv[1:] if argv is None else argv)
    params_path = args[args.index("--params") + 1] if "--params" in args else None
    try:
        written = write(params_path)
    except SettingsError as err:  # the params file itself (missing, not YAML ...): its one line
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"settings: {len(written)} files in {SETTINGS_DIR}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
