"""params.yaml: the single source of truth. Stages read their own slice through these helpers.

:func:`load_params` is the one reader of a params file: whatever is wrong with the file itself (not
there, a directory, not UTF-8, not YAML, a key written twice, not a mapping) is a
:class:`~pipeline.config.validation.SettingsError` of one line naming the file (and the line)."""

from __future__ import annotations

from pathlib import Path

import yaml

from pipeline.config.validation import SettingsError

REPO_ROOT = Path(__file__).resolve().parents[2]  # the repository: pipeline/config/params.py -> ../../..
MERGE_TAG = "tag:yaml.org,2002:merge"  # `<<: *anchor` keys: merged, not written twice


class UniqueKeyLoader(yaml.SafeLoader):
    """yaml's SafeLoader, except that a mapping holding a key twice is an error: YAML keeps the last
    one silently (``preset: cpu`` ... ``preset: paper`` runs the paper sizes with no word)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                first = seen.setdefault(key, line)
            except TypeError:
                continue  # an unhashable key: the SafeLoader itself refuses it below
            if first != line:
                raise DuplicateKey(key, first, line)
        return super().construct_mapping(node, deep)


class DuplicateKey(yaml.YAMLError):
    def __init__(self, key, first: int, second: int) -> None:
        super().__init__(f"key {key!r} appears twice (lines {first} and {second}); YAML would keep the second")
        self.line = second


def load_params(path: str | Path | None = None) -> dict:
    """The mapping in the params file ``path`` (default: the repository's params.yaml); a
    :class:`SettingsError` of one line, ``<file>[:<line>]: what is wrong``, when it cannot be one."""
    path = Path(path) if path else REPO_ROOT / "params.yaml"
    text = _read_text(path)
    try:
        params = yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506  (a SafeLoader)
    except DuplicateKey as err:
        raise SettingsError(f"{path}:{err.line}: {err}; keep one") from None
    except yaml.YAMLError as err:
        raise SettingsError(_yaml_problem(path, err)) from None
    if params is None:
        raise SettingsError(f"{path}: empty; a params file is a mapping of settings (as the repository's params.yaml)")
    if not isinstance(params, dict):
        raise SettingsError(
            f"{path}: expected a mapping of settings at the top level, got a {type(params).__name__} "
            "(as the repository's params.yaml)"
        )
    return params


def _read_text(path: Path) -> str:
    """The file's text; what stops it being read is a :class:`SettingsError` naming the file."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise SettingsError(f"{path}: no such params file") from None
    except IsADirectoryError:
        raise SettingsError(f"{path}: a directory, not a params file (give the YAML file itself)") from None
    except OSError as err:
        raise SettingsError(f"{path}: cannot read the params file ({err.strerror or err})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise SettingsError(
            f"{path}:{line}: byte 0x{data[err.start]:02x} (column {column}) is not UTF-8: save the params file as UTF-8"
        ) from None


def _yaml_problem(path: Path, err: yaml.YAMLError) -> str:
    """A YAML error on one line: the file, the line of the problem, what it is."""
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    context = getattr(err, "context", None)
    return f"{where}: not valid YAML: {problem}" + (f" ({context})" if context else "")


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
