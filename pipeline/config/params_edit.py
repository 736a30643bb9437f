"""Editing params.yaml as text, so that its comments and layout survive: entries are inserted at the
end of a top-level block mapping, and the result must load as the expected mapping.

The edits work on text with ``\n`` line ends; :func:`read_params_text` gives that text and the file as
it is, and :func:`with_line_endings` puts each kept line's own ending back (a CRLF file stays CRLF, not
a whole-file diff), new lines taking the file's usual one."""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from pathlib import Path

import yaml

from pipeline.config.validation import SettingsError

LINE = re.compile(
    r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z"
)  # a line with its own ending (str.splitlines also splits at \f, \x1c ...)


def read_params_text(path: Path) -> tuple[str, str]:
    """``(text, raw)``: the params file with ``\n`` line ends (what the edits take), and as it is."""
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            raw = fh.read()
    except UnicodeDecodeError as err:
        raise SettingsError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start}): save it as UTF-8") from None
    return raw.replace("\r\n", "\n").replace("\r", "\n"), raw


def with_line_endings(raw: str, edited: str) -> str:
    """``edited`` (``\n`` line ends) with the line endings of ``raw`` (the file it was made from): a
    line kept from ``raw`` keeps its own ending; a new line takes the ending most lines of ``raw`` have."""
    old = LINE.findall(raw)
    endings = [line[len(line.rstrip("\r\n")) :] for line in old]
    usual = max(("\n", "\r\n", "\r"), key=endings.count) if any(endings) else "\n"
    if usual == "\n" and set(endings) <= {"\n", ""}:
        return edited  # nothing to restore
    old_bodies = [line.rstrip("\r\n") for line in old]
    new = LINE.findall(edited)
    new_bodies = [line.rstrip("\n") for line in new]
    out = [line.removesuffix("\n") + (usual if line.endswith("\n") else "") for line in new]
    matcher = difflib.SequenceMatcher(None, old_bodies, new_bodies, autojunk=False)
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            i, j = block.a + k, block.b + k
            if new[j].endswith("\n") and endings[i]:
                out[j] = new_bodies[j] + endings[i]
    return "".join(out)


def block_end(text: str, key: str) -> int:
    """The offset just after the last indented line of the top-level block mapping ``key:`` (whose
    value starts on the next line). ``ValueError`` when there is no such block."""
    match = re.search(rf"^{re.escape(key)}:[ \t]*(?:#[^\n]*)?$", text, re.M)
    if match is None:
        raise ValueError(f"params.yaml has no top-level block '{key}:' (with its entries on the lines below)")
    end = match.end()
    pos = end + 1
    for line in text[end + 1 :].splitlines(keepends=True):
        if line.strip() and not line[0].isspace():
            break  # the next top-level key, or a column-0 comment above it
        pos += len(line)
        if line.strip():
            end = pos
    return min(end, len(text))


def insert_entries(text: str, key: str, lines: Sequence[str], blank_line: bool = False) -> str:
    """``text`` with ``lines`` (indented already) added at the end of the top-level block ``key``."""
    end = block_end(text, key)
    head, tail = text[:end], text[end:]
    if not head.endswith("\n"):  # a block without entries (or a last line without its newline)
        head, tail = head + "\n", tail.removeprefix("\n")
    block = ("\n" if blank_line else "") + "".join(line + "\n" for line in lines)
    return head + block + tail


def flow_yaml(value) -> str:
    """One value in YAML flow style on one line (``[a, b]``, ``{k: v}``, a scalar)."""
    dumped = yaml.safe_dump(value, default_flow_style=True, width=10**6, allow_unicode=True)
    return dumped.removesuffix("\n").removesuffix("\n...").strip()


def indented_yaml(mapping: dict, indent: int = 2, top: bool = True) -> list[str]:
    """``mapping`` as block YAML lines indented by ``indent`` spaces: its own values that are
    mappings, and deeper mappings that hold mappings, are blocks; anything else is one line in flow
    style, as params.yaml writes its entries."""
    lines = []
    for key, value in mapping.items():
        if isinstance(value, dict) and value and (top or any(isinstance(v, dict) for v in value.values())):
            lines.append(f"{' ' * indent}{flow_yaml(key)}:")
            lines.extend(indented_yaml(value, indent + 2, top=False))
        else:
            lines.append(f"{' ' * indent}{flow_yaml(key)}: {flow_yaml(value)}")
    return lines


def block_style(text: str, key: str, value: dict | None) -> str:
    """``text`` with the top-level entry ``key`` in block style, so :func:`insert_entries` can add to
    it: an entry written inline (``tasks: {}``, ``tasks: {copy_rules: pipeline/...}``, a flow mapping
    that may go on over indented lines) is rewritten as ``key:`` and one line per entry (``value``,
    the entry as loaded; comments inside the flow mapping are not kept); an absent one is added at
    the end. A block entry is returned as it is."""
    match = re.search(rf"^{re.escape(key)}:[ \t]*([^#\s][^\n]*)?$", text, re.M)
    if match is None:
        return text + ("" if text.endswith("\n") or not text else "\n") + f"\n{key}:\n"
    if match.group(1) is None:
        return text  # a block already (its entries, if any, on the lines below)
    end = match.end()
    for line in text[end + 1 :].splitlines(keepends=True):
        if line.strip() and not line[0].isspace():
            break
        if line.strip() and not line.lstrip().startswith("#"):
            end += len(line)  # a flow mapping going on over indented lines
        else:
            break
    lines = [f"{key}:", *indented_yaml(value or {})]
    return text[: match.start()] + "\n".join(lines) + text[end:]
