"""Raw input as every reader reads it: opening files (plain or gzip), and the limits that turn hostile
input into quarantine records instead of shards.

* :func:`open_input` -- the one way readers open an input file: gzip data (the ``.gz`` suffix or
  the gzip magic bytes) is decompressed, and a truncated or corrupt stream raises
  ``CorpusFormatError`` naming the file and the line reached (never a bare ``EOFError``);
  :func:`resolve_input` finds ``name.gz`` where a reader builds the file name ``name`` itself;
  a path that cannot be read as a file (a directory, a symlink loop, permission denied, a name too
  long for the file system) is a ``CorpusFormatError`` naming it and why (:func:`unreadable`,
  :func:`check_input_files`, which also names the setting), never an ``OSError`` traceback;
* :class:`TextLimits` -- ``max_line_chars`` / ``max_token_chars`` (every reader's ``Config`` has
  both): a record with a NUL character (``nul_byte``), a line over ``max_line_chars`` characters
  (``line_too_long``) or a whitespace-separated token over ``max_token_chars`` characters
  (``token_too_long``) is quarantined with its ``file:line``, never written to a shard.
"""

from __future__ import annotations

import errno
import gzip
import os
import stat
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from pipeline.data.corpora.common import CorpusFormatError, Quarantined

MAX_LINE_CHARS = 10_000  # default per-line limit (characters): longer lines are absurd input
MAX_TOKEN_CHARS = 500  # default per-token limit: the longest token in ../shared/data has 154 (a URL)
GZIP_MAGIC = b"\x1f\x8b"
PREVIEW_CHARS = 300  # characters of a hostile line kept in its quarantine record


# --------------------------------------------------------------------------- #
# Hostile input: NUL characters, absurd lines and tokens
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class TextLimits:
    """A reader's ``max_line_chars`` / ``max_token_chars`` (picklable, for worker specs).

    :meth:`problem` is the check: the first rule a decoded line breaks, in this order --
    ``nul_byte`` (a NUL character: binary data, not text), ``line_too_long`` (more than
    ``max_line_chars`` characters), ``token_too_long`` (a whitespace-separated token of more than
    ``max_token_chars`` characters). A line no longer than ``max_token_chars`` is not split, so the
    check costs one ``in`` and one ``len`` on ordinary lines.
    """

    max_line_chars: int = MAX_LINE_CHARS
    max_token_chars: int = MAX_TOKEN_CHARS

    def __post_init__(self) -> None:
        for name in ("max_line_chars", "max_token_chars"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")

    @classmethod
    def of(cls, cfg: Any) -> TextLimits:
        """The limits of a reader ``Config`` (its ``max_line_chars`` and ``max_token_chars``)."""
        return cls(cfg.max_line_chars, cfg.max_token_chars)

    def problem(self, text: str) -> tuple[str, dict] | None:
        """``(reason, details)`` for the first rule ``text`` (one decoded line) breaks, or None."""
        found = self.line_problem(text)
        if found is None and len(text) > self.max_token_chars:
            return self.token_problem(text.split())
        return found

    def line_problem(self, text: str) -> tuple[str, dict] | None:
        """The NUL and ``max_line_chars`` rules only (for text whose tokens are not whitespace
        separated, e.g. Chinese: its tokens are checked with :meth:`token_problem` once made)."""
        if "\x00" in text:
            return "nul_byte", {"char_offset": text.index("\x00")}
        if len(text) > self.max_line_chars:
            return "line_too_long", {"chars": len(text), "max_line_chars": self.max_line_chars}
        return None

    def token_problem(self, tokens: Iterable[str]) -> tuple[str, dict] | None:
        """``("token_too_long", details)`` if a token is over ``max_token_chars``, else None."""
        longest = max(tokens, key=len, default="")
        if len(longest) > self.max_token_chars:
            return "token_too_long", {
                "token_chars": len(longest),
                "max_token_chars": self.max_token_chars,
                "token_head": longest[:50],
            }
        return None

    def check(self, text: str, where: str, record: dict | None = None) -> Quarantined | None:
        """A ``Quarantined`` for ``text`` (one line, found at ``where``) if it breaks a rule."""
        found = self.problem(text)
        if found is None:
            return None
        reason, details = found
        return Quarantined(reason, where, {**details, **(record if record is not None else {"line": _head(text)})})

    def check_lines(
        self, text: str, path: str | Path, first_line: int, record: dict | None = None
    ) -> Quarantined | None:
        """The first line of multi-line ``text`` (starting at line ``first_line`` of ``path``)
        that breaks a rule, quarantined at ``path:<its line>``; None if none does."""
        if "\x00" not in text and len(text) <= min(self.max_line_chars, self.max_token_chars):
            return None  # no line can break a rule (fast path for ordinary records)
        for offset, line in enumerate(text.split("\n")):
            bad = self.check(line.removesuffix("\r"), f"{path}:{first_line + offset}", record)
            if bad is not None:
                return bad
        return None


DEFAULT_LIMITS = TextLimits()


def _head(text: str) -> str:
    return text[:PREVIEW_CHARS].replace("\x00", "\\x00")


# --------------------------------------------------------------------------- #
# Opening input files (plain or gzip)
# --------------------------------------------------------------------------- #

_GZIP_ERRORS = (EOFError, gzip.BadGzipFile, zlib.error)


class GzipInput:
    """A gzip input file read as bytes, like ``open(path, "rb")``: iteration by lines, ``read``,
    ``readline``, a context manager. Decompression errors (a truncated or corrupt stream) become
    ``CorpusFormatError`` at ``path:<line being read>`` (lines counted by iteration/readline)."""

    def __init__(self, path: Path, raw: IO[bytes]) -> None:
        self.path, self.name = path, str(path)
        self._raw = raw
        self._gz = gzip.GzipFile(fileobj=raw, mode="rb")
        self.lines = 0  # complete lines handed out so far

    def _error(self, err: Exception) -> CorpusFormatError:
        what = "truncated or corrupt gzip data" if not isinstance(err, gzip.BadGzipFile) else "not valid gzip data"
        return CorpusFormatError(self.path, self.lines + 1, f"{what} ({type(err).__name__}: {err})")

    def __iter__(self) -> Iterator[bytes]:
        try:
            for line in self._gz:
                self.lines += 1
                yield line
        except _GZIP_ERRORS as err:
            raise self._error(err) from err

    def readline(self, size: int = -1) -> bytes:
        try:
            line = self._gz.readline(size)
        except _GZIP_ERRORS as err:
            raise self._error(err) from err
        self.lines += line.endswith(b"\n")
        return line

    def read(self, size: int = -1) -> bytes:
        try:
            data = self._gz.read(size)
        except _GZIP_ERRORS as err:
            raise self._error(err) from err
        self.lines += data.count(b"\n")
        return data

    def close(self) -> None:
        try:
            self._gz.close()
        finally:
            self._raw.close()

    def __enter__(self) -> GzipInput:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


NO_SUCH_FILE = "no such file"
_WHY = {
    errno.ELOOP: "a symlink loop (a link that leads back to itself), not a file",
    errno.ENAMETOOLONG: "a name too long for the file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EISDIR: "a directory, not a file",
}


def _why(err: OSError, path: str | Path) -> str:
    if err.errno in (errno.ENOENT, errno.ENOTDIR):  # ENOTDIR: a part of its path is a file, so it is not there
        return f"a symbolic link to a missing file ({os.readlink(path)})" if os.path.islink(path) else NO_SUCH_FILE
    return _WHY.get(err.errno, (err.strerror or type(err).__name__).lower())


def unreadable(path: str | Path) -> str | None:
    """Why ``path`` cannot be read as an input file, in words, or None when it can: ``no such file``
    (:data:`NO_SUCH_FILE`), a symlink loop, a directory, a FIFO or device, permission denied, a name too
    long for the file system ... Found as a reader finds it: by opening the file (never a FIFO)."""
    try:
        mode = os.stat(path).st_mode
        if stat.S_ISDIR(mode):
            return _WHY[errno.EISDIR]
        if not stat.S_ISREG(mode):
            return "not a regular file (a FIFO, socket or device)"
        with open(path, "rb"):
            pass
    except OSError as err:
        return _why(err, path)
    return None


def check_input_files(named: Iterable[tuple[str, str | Path]]) -> None:
    """Every ``(setting, path)`` names a readable file (``path.gz`` will do, see :func:`resolve_input`),
    checked before anything is written: absent ones are one ``FileNotFoundError`` naming them all, any
    other problem a ``CorpusFormatError`` naming the file, the setting and why."""
    missing = []
    for setting, path in named:
        why = unreadable(path)
        if why == NO_SUCH_FILE and unreadable(f"{path}.gz") != NO_SUCH_FILE:  # the gzipped file is there
            path = f"{path}.gz"
            why = unreadable(path)
        if why == NO_SUCH_FILE:
            missing.append(str(path))
        elif why is not None:
            raise CorpusFormatError(path, None, f"{setting}: {why}")
    if missing:
        raise FileNotFoundError(f"missing input file(s): {', '.join(missing)}")


def open_input(path: str | Path) -> IO[bytes] | GzipInput:
    """Open a reader's input file for reading bytes: gzip data (a ``.gz`` name or the gzip magic
    bytes) is decompressed on the fly, with errors naming the file (:class:`GzipInput`); anything
    else is the plain file. Every reader opens its inputs here (counting lines too). A path that is
    not a readable file is a ``CorpusFormatError`` saying why (a missing one stays ``FileNotFoundError``)."""
    path = Path(path)
    try:
        raw = open(path, "rb")
    except FileNotFoundError:
        raise
    except OSError as err:
        raise CorpusFormatError(path, None, f"cannot be read: {_why(err, path)}") from None
    try:
        if path.name.endswith(".gz") or raw.peek(2)[:2] == GZIP_MAGIC:
            return GzipInput(path, raw)
    except BaseException:
        raw.close()
        raise
    return raw


def read_input(path: str | Path) -> bytes:
    """The whole (decompressed) content of an input file, through :func:`open_input`."""
    with open_input(path) as fh:
        return fh.read()


def count_lines(path: str | Path) -> int:
    """Lines of an input file (a last line without its newline counts), read in 1 MiB blocks
    through :func:`open_input` (so a ``.gz`` counts its decompressed lines)."""
    n, last = 0, b"\n"
    with open_input(path) as fh:
        while block := fh.read(1 << 20):
            n += block.count(b"\n")
            last = block[-1:]
    return n + (last != b"\n")


def resolve_input(path: str | Path) -> Path:
    """``path``, or ``path.gz`` when only the gzipped file exists (for readers that build their
    file names from a directory and a stem)."""
    path = Path(path)
    if unreadable(path) == NO_SUCH_FILE:
        gz = path.with_name(path.name + ".gz")
        if unreadable(gz) != NO_SUCH_FILE:
            return gz
    return path


def row_name(name: str) -> str:
    """A file name as it appears in row ids: without a ``.gz`` suffix, so compressing an input
    does not change its rows (quarantine ``where`` keeps the real file name)."""
    return name[:-3] if name.endswith(".gz") else name
