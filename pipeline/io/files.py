"""Files written whole or not at all, and their hashes.

Every file a stage writes goes through :func:`atomic_path` (a temporary file in the same directory,
renamed onto the target only once it is complete): a reader sees the old file or the new one, never
a prefix, and a crash leaves the old file in place. :func:`copy_dir_atomic` does the same for a
directory. :func:`sha256_file` is the one file hash (manifests, checkpoints, registered models).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

UMASK = os.umask(0o022)  # the process's umask (read by setting it, then restored on the next line)
os.umask(UMASK)


@contextmanager
def atomic_path(path: str | Path, suffix: str = ".tmp") -> Iterator[Path]:
    """Yield a temp path in ``path``'s directory; on success it is renamed onto ``path``.

    The parent directory is created if needed. Readers see either the old file or the complete
    new one, never a prefix; on an exception the temp file is removed and ``path`` is untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~UMASK)  # mkstemp makes it 0600: give the file the mode open() would
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (see ``atomic_path``)."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8", newline="") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())


def write_json_atomic(path: str | Path, obj: Any) -> None:
    """Atomically write ``obj`` as pretty, key-sorted JSON (trailing newline) to ``path``."""
    text = json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    write_text_atomic(path, text)


def sha256_file(path: str | Path, chunk_size: int = 1 << 20) -> str:
    """Hex SHA-256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_tree(directory: str | Path) -> str:
    """sha256 over a directory's files (relative names and bytes, in name order); a file's own
    sha256_file when ``directory`` is a file."""
    directory = Path(directory)
    if directory.is_file():
        return sha256_file(directory)
    digest = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(directory)).encode("utf-8") + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


def write_jsonl_atomic(path: str | Path, records: list[dict]) -> None:
    """Atomically write one JSON object per line (UTF-8, not ASCII-escaped) to ``path``."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for rec in records:
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")


def read_jsonl(path: str | Path) -> list[dict]:
    """The records of a JSON Lines file (what :func:`write_jsonl_atomic` writes)."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def copy_dir_atomic(src: Path, dst: Path, extra: list[Path] = ()) -> None:
    """Copy directory ``src`` (and the files ``extra``) to ``dst`` via a temp sibling + rename:
    ``dst`` is whole or absent."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}.tmp-", dir=dst.parent))
    try:
        shutil.copytree(src, tmp, dirs_exist_ok=True)
        for path in extra:
            shutil.copy2(path, tmp / path.name)
        os.replace(tmp, dst)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
