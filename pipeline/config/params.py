"""params.yaml: the single source of truth. Stages read their own slice through these helpers."""

from __future__ import annotations

from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]  # the repository: pipeline/config/params.py -> ../../..


def load_params(path: str | Path | None = None) -> dict:
    path = Path(path) if path else REPO_ROOT / "params.yaml"
    try:
        with open(path, encoding="utf-8") as f:
            params = yaml.safe_load(f)
    except yaml.YAMLError as err:
        raise ValueError(f"{path}: not valid YAML: {err}") from err
    if not isinstance(params, dict):
        raise ValueError(f"{path}: expected a mapping at the top level")
    return params


def section(params: dict, *keys: str) -> dict:
    """params[k1][k2]..., with an error that names the missing key path."""
    node = params
    for i, key in enumerate(keys):
        if not isinstance(node, dict) or key not in node:
            raise KeyError(f"params.yaml has no '{'.'.join(keys[: i + 1])}'")
        node = node[key]
    return node


def project_root(params_path: str | Path | None) -> Path:
    """The directory whose data/ a run reads and writes: the params file's own directory."""
    return Path(params_path).resolve().parent if params_path else REPO_ROOT
