"""Atomic Arrow IPC shards: the on-disk contract between pipeline stages.

A *split* is a directory holding

* ``part-00000.arrow``, ``part-00001.arrow``, ... -- Arrow IPC *file* format,
  at most ``rows_per_part`` rows each;
* ``quarantine.jsonl`` -- one JSON line ``{"reason": ..., "record": ...}`` per
  raw record that could not be turned into a row (always present, maybe empty);
* ``manifest.json`` -- row counts, quarantine counts by reason, per-part
  SHA-256, the schema, and the parameters that produced the split.

:class:`ShardWriter` builds the whole split in a hidden sibling temporary
directory and only swaps it into place when :meth:`ShardWriter.close`
succeeds, so readers never observe a half-written split, and a failed run
leaves a previously written split untouched. A writer holds an exclusive
``flock`` on its temporary directory while it lives; a process killed mid-write
(SIGKILL, power loss) cannot remove its directory, so every new writer first
removes the siblings of its own split that a dead writer left: temporary
directories ``.<split>.tmp-XXXXXXXX`` whose lock nobody holds, and
``.<split>.old-XXXXXXXX`` directories of an interrupted swap once ``<split>``
exists again. Nothing else in the folder is touched.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile
import uuid
import weakref
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc

from pipeline.io.files import UMASK, sha256_file, write_json_atomic

MANIFEST_NAME = "manifest.json"
QUARANTINE_NAME = "quarantine.jsonl"

BASE_SCHEMA_FIELDS: tuple[pa.Field, ...] = (
    pa.field("id", pa.string()),
    pa.field("src", pa.list_(pa.string())),
    pa.field("tgt", pa.list_(pa.string())),
    pa.field("refs", pa.list_(pa.list_(pa.string()))),
)


def make_schema(extra: Iterable[pa.Field] = ()) -> pa.Schema:
    """The base shard schema (id, src, tgt, refs) followed by ``extra`` fields."""
    fields = [*BASE_SCHEMA_FIELDS, *extra]
    names = [f.name for f in fields]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"duplicate schema field names: {duplicates}")
    return pa.schema(fields)


def content_sha256(part_hashes: Iterable[str]) -> str:
    """Hash identifying a split's content: SHA-256 over the part hashes, in order, one per line."""
    digest = hashlib.sha256()
    for h in part_hashes:
        digest.update(h.encode("ascii") + b"\n")
    return digest.hexdigest()


# --------------------------------------------------------------------------- #
# Paths in manifests: relative, so the same data gives the same bytes in any checkout
# --------------------------------------------------------------------------- #

_PATH_BASES: list[tuple[str, str]] = []  # (label, absolute normalised base), most specific first


@contextlib.contextmanager
def portable_paths(bases: Iterable[tuple[str, str | Path]]) -> Iterator[None]:
    """While the block runs, every manifest this process writes (:class:`ShardWriter`) names a path
    under one of ``bases`` relative to it: ``(label, base)``, the path written as ``label/<relative>``
    (the label ``""``: the relative path alone). The prepare stage passes the project root (label
    ``""``) and ``data.shared_root`` (label ``{data.shared_root}``): a manifest is hashed by DVC, and
    the same data prepared in two checkouts in different folders must give the same bytes."""
    saved = list(_PATH_BASES)
    found = [(label, os.path.normpath(os.path.abspath(base))) for label, base in bases]
    _PATH_BASES[:] = sorted(found, key=lambda item: -len(item[1]))  # the deepest base first
    try:
        yield
    finally:
        _PATH_BASES[:] = saved


def portable(value):
    """``value`` (a manifest's params: dicts, lists, strings) with every absolute path under a base of
    :func:`portable_paths` made relative; other values as they are."""
    if isinstance(value, dict):
        return {k: portable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [portable(v) for v in value]
    if not isinstance(value, str) or not _PATH_BASES or not os.path.isabs(value):
        return value
    path = os.path.normpath(value)
    for label, base in _PATH_BASES:
        if path == base or path.startswith(base.rstrip(os.sep) + os.sep):
            rel = os.path.relpath(path, base)
            return rel if not label else (label if rel == "." else f"{label}/{rel}")
    return value


# --------------------------------------------------------------------------- #
# Writer
# --------------------------------------------------------------------------- #


def _part_name(index: int) -> str:
    return f"part-{index:05d}.arrow"


class _DirLock:
    """An exclusive ``flock`` on a directory, held until :meth:`release` (or the process dies:
    the kernel drops the lock of a killed process, which is how a dead writer is recognised)."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    @classmethod
    def try_acquire(cls, path: Path, blocking: bool = False) -> _DirLock | None:
        """The lock on ``path``; None if another process holds it, ``path`` is gone, or the file
        system has no ``flock`` (then no directory counts as dead). ``blocking``: wait for a
        holder to let go, and on a file system without ``flock`` return an unlocked handle."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        except (FileNotFoundError, NotADirectoryError):
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return None
        except OSError:  # ENOLCK, EOPNOTSUPP ...: locks unsupported here
            if blocking:
                return cls(fd)
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        return cls(fd)

    def same_inode(self, path: Path) -> bool:
        """Whether ``path`` is still the directory this lock was taken on."""
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return False
        own = os.fstat(self._fd)
        return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)

    def release(self) -> None:
        """Unlock (explicitly: a forked worker may hold a copy of the descriptor) and close."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            except OSError:
                pass
            finally:
                os.close(fd)


def _temp_name_patterns(split_name: str) -> tuple[re.Pattern, re.Pattern]:
    """What a writer of ``split_name`` names its temporary (``tempfile.mkdtemp``: 8 characters of
    ``[a-z0-9_]``) and its swapped-out old directories (8 hex digits)."""
    stem = re.escape(f".{split_name}.")
    return re.compile(stem + r"tmp-[a-z0-9_]{8}"), re.compile(stem + r"old-[0-9a-f]{8}")


def remove_stale_temp_dirs(out_dir: str | Path) -> list[Path]:
    """Remove what dead writers of ``out_dir`` left beside it; return the removed paths.

    A sibling ``.<split>.tmp-XXXXXXXX`` directory is removed only if its lock can be taken (no
    live writer holds it); a ``.<split>.old-XXXXXXXX`` directory only if ``out_dir`` exists (the
    interrupted swap's new split is in place; without it the old directory holds the last
    published split and is left alone). Other entries, and other splits' directories, are never
    touched.
    """
    out_dir = Path(out_dir)
    parent = out_dir.parent
    if not parent.is_dir():
        return []
    tmp_pattern, old_pattern = _temp_name_patterns(out_dir.name)
    removed = []
    for path in sorted(parent.iterdir()):
        if path.is_symlink() or not path.is_dir():
            continue
        if tmp_pattern.fullmatch(path.name):
            lock = _DirLock.try_acquire(path)
            if lock is None:
                continue  # a live writer's directory
            try:
                shutil.rmtree(path, ignore_errors=True)
            finally:
                lock.release()
        elif old_pattern.fullmatch(path.name) and out_dir.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            continue
        removed.append(path)
    return removed


_SCRATCH_FOLDER: list[Path] = []  # the folder of :func:`scratch_in` while its block runs


@contextlib.contextmanager
def scratch_in(folder: str | Path) -> Iterator[Path]:
    """While the block runs, every writer's scratch (:func:`scratch_parent`) goes to ``folder``,
    created if needed. The prepare stage passes a gitignored folder outside every DVC output
    (:func:`pipeline.data.prepare.scratch_folder`): a scratch directory a killed run leaves is then
    never in ``data/shards/`` (nor in ``git status``), whether or not the next run of the stage runs
    the code that removes it (DVC may answer it from its run cache)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    _SCRATCH_FOLDER.append(folder)
    try:
        yield folder
    finally:
        _SCRATCH_FOLDER.pop()


def scratch_parent(out_root: str | Path) -> Path:
    """The one answer to where a writer of ``out_root`` makes its scratch directories (readers' spills,
    named ``.<out_root name>.<what>``): the folder of the :func:`scratch_in` block in progress, else
    beside ``out_root`` (a reader called on its own, outside the prepare stage)."""
    return _SCRATCH_FOLDER[-1] if _SCRATCH_FOLDER else Path(out_root).parent


def remove_stale_scratch(parent: str | Path, prefixes: Iterable[str]) -> list[Path]:
    """Remove the directories in ``parent`` whose names start with one of ``prefixes`` and whose lock
    nobody holds (a :func:`scratch_dir` of a process that died, or an unlocked scratch directory of a
    run that is over); return them. A live :func:`scratch_dir` is left alone."""
    parent = Path(parent)
    if not parent.is_dir():
        return []
    prefixes = tuple(prefixes)
    removed = []
    for path in sorted(parent.iterdir()):
        if not path.name.startswith(prefixes) or path.is_symlink() or not path.is_dir():
            continue
        lock = _DirLock.try_acquire(path)
        if lock is None:
            continue  # a live process's scratch
        try:
            shutil.rmtree(path, ignore_errors=True)
        finally:
            lock.release()
        removed.append(path)
    return removed


@contextlib.contextmanager
def scratch_dir(parent: str | Path, prefix: str) -> Iterator[Path]:
    """A private scratch directory ``parent/<prefix>XXXXXXXX``, locked (``flock``) while it lives and
    removed when the block ends; first the scratch directories of the same prefix that a killed
    process left (SIGKILL, power loss: nothing of theirs could remove them) are removed, so a killed
    run's scratch is gone by the end of the next run's start."""
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    remove_stale_scratch(parent, [prefix])
    for _ in range(10):
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
        lock = _DirLock.try_acquire(path, blocking=True)
        if lock is not None and lock.same_inode(path):
            break
        if lock is not None:
            lock.release()
    else:
        raise RuntimeError(f"could not create a scratch directory {prefix}* in {parent}")
    try:
        yield path
    finally:
        try:
            shutil.rmtree(path, ignore_errors=True)
        finally:
            lock.release()


class ShardWriter:
    """Write one split atomically; use as a context manager.

    >>> with ShardWriter(out_dir, schema, params={"seed": 1}) as w:  # doctest: +SKIP
    ...     w.write(rows)
    ...     w.quarantine(raw, "empty source")

    Leaving the ``with`` block normally calls :meth:`close` (which publishes the
    split); leaving it with an exception calls :meth:`abort` (which removes the
    temporary directory and leaves any existing ``out_dir`` as it was). A writer
    that is garbage-collected without being closed is aborted as well.
    :meth:`close` is :meth:`finish` (write everything and the manifest into the
    temporary directory) then :meth:`publish` (the swap); a caller writing several
    splits can finish them all before publishing any.

    A new writer first removes the temporary directories that dead writers of the
    same split left (:func:`remove_stale_temp_dirs`).
    """

    def __init__(
        self,
        out_dir: str | Path,
        schema: pa.Schema,
        rows_per_part: int = 50_000,
        params: dict | None = None,
    ) -> None:
        if rows_per_part < 1:
            raise ValueError(f"rows_per_part must be >= 1, got {rows_per_part}")
        self.out_dir = Path(out_dir)
        self.schema = schema
        self.rows_per_part = rows_per_part
        self.params = dict(params or {})

        self._buffer: list[dict] = []
        self._parts: list[dict] = []
        self._rows = 0
        self._reasons: Counter[str] = Counter()
        self.stats: dict[str, int | float] = {}  # reader counters, written to the manifest
        self._manifest: dict | None = None
        self._closed = False  # published or aborted
        self._published = False

        self.out_dir.parent.mkdir(parents=True, exist_ok=True)
        self.removed_stale = remove_stale_temp_dirs(self.out_dir)
        self._tmp_dir, self._lock = self._locked_temp_dir()
        try:
            self._quarantine_fh = open(self._tmp_dir / QUARANTINE_NAME, "w", encoding="utf-8")
        except BaseException:
            _discard(None, self._tmp_dir, self._lock)
            raise
        # Safety net: remove the temp dir if the writer is dropped without close/abort.
        self._finalizer = weakref.finalize(self, _discard, self._quarantine_fh, self._tmp_dir, self._lock)

    def _locked_temp_dir(self) -> tuple[Path, _DirLock]:
        """A new temporary directory beside ``out_dir``, locked by this writer. Another writer's
        clean-up may take the lock between ``mkdtemp`` and ours and remove the directory; then
        the lock we get is on a deleted directory, and we try again."""
        for _ in range(10):
            tmp = Path(tempfile.mkdtemp(prefix=f".{self.out_dir.name}.tmp-", dir=self.out_dir.parent))
            lock = _DirLock.try_acquire(tmp, blocking=True)
            if lock is not None and lock.same_inode(tmp):
                return tmp, lock
            if lock is not None:
                lock.release()
        raise RuntimeError(f"could not create a temporary directory for {self.out_dir} (removed by other writers)")

    # -- context manager -------------------------------------------------- #

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    # -- public API ------------------------------------------------------- #

    @property
    def tmp_dir(self) -> Path:
        """The temporary directory the split is being assembled in."""
        return self._tmp_dir

    def write(self, records: list[dict]) -> None:
        """Buffer rows (dicts whose keys are exactly the schema's field names).

        Full parts of ``rows_per_part`` rows are flushed to disk as soon as the
        buffer holds them; the remainder is flushed by :meth:`close`.
        """
        self._check_open()
        expected = set(self.schema.names)
        for record in records:
            keys = set(record)
            if keys != expected:
                raise ValueError(
                    f"record {record.get('id', '?')!r} does not match the schema: "
                    f"missing {sorted(expected - keys)}, unexpected {sorted(keys - expected)}"
                )
        self._buffer.extend(records)
        while len(self._buffer) >= self.rows_per_part:
            chunk = self._buffer[: self.rows_per_part]
            del self._buffer[: self.rows_per_part]
            self._write_part(chunk)

    def write_table(self, table: pa.Table) -> None:
        """Write an Arrow table with the writer's schema (after any buffered rows), as parts of at
        most ``rows_per_part`` rows; no Python rows are built."""
        self._check_open()
        if not table.schema.equals(self.schema):
            raise ValueError(f"table schema {table.schema} does not match the writer's {self.schema}")
        if self._buffer:
            chunk, self._buffer = self._buffer, []
            self._write_part(chunk)
        for start in range(0, table.num_rows, self.rows_per_part):
            self._write_arrow(table.slice(start, self.rows_per_part))

    def quarantine(self, record: dict, reason: str) -> None:
        """Set aside a bad raw record, with the reason, in ``quarantine.jsonl``."""
        self._check_open()
        line = json.dumps({"reason": reason, "record": record}, ensure_ascii=False, default=repr)
        self._quarantine_fh.write(line + "\n")
        self._reasons[reason] += 1

    def close(self) -> dict:
        """Flush, write the manifest, publish the split at ``out_dir``; return the manifest.

        Calling it again returns the same manifest. If anything fails, the
        writer is aborted and the exception propagates.
        """
        return self.publish()

    def publish(self) -> dict:
        """:meth:`finish` if not done yet, then swap the split into ``out_dir``; return the manifest."""
        if self._published:
            return self._manifest
        manifest = self.finish()
        self._check_not_aborted()
        try:
            self._publish()
        except BaseException:
            self.abort()
            raise
        self._closed = self._published = True
        self._finalizer.detach()
        self._lock.release()
        return manifest

    def finish(self) -> dict:
        """Flush and write the manifest into the temporary directory (not published yet: see
        :meth:`publish`, or :meth:`abort` to discard it); return the manifest. No more rows or
        quarantine records are accepted afterwards."""
        if self._manifest is not None:
            return self._manifest
        self._check_open()
        try:
            if self._buffer or not self._parts:
                # An empty split still gets one (empty) part so readers learn the schema.
                chunk, self._buffer = self._buffer, []
                self._write_part(chunk)
            self._quarantine_fh.flush()
            os.fsync(self._quarantine_fh.fileno())
            self._quarantine_fh.close()

            rows_quarantined = sum(self._reasons.values())
            rows_in = self._rows + rows_quarantined
            manifest = {
                "rows": self._rows,
                "rows_in": rows_in,
                "rows_quarantined": rows_quarantined,
                "quarantine_reasons": dict(sorted(self._reasons.items())),
                "parts": list(self._parts),
                "schema": str(self.schema),
                "params": portable(self.params),
                "content_sha256": content_sha256(p["sha256"] for p in self._parts),
            }
            if self.stats:
                manifest["stats"] = dict(sorted(self.stats.items()))
            assert manifest["rows_in"] == manifest["rows"] + manifest["rows_quarantined"]
            assert sum(p["rows"] for p in self._parts) == manifest["rows"]
            write_json_atomic(self._tmp_dir / MANIFEST_NAME, manifest)
        except BaseException:
            self.abort()
            raise
        self._manifest = manifest
        return manifest

    def abort(self) -> None:
        """Discard everything written so far; ``out_dir`` is left as it was (a no-op once published)."""
        self._closed = True
        self._buffer = []
        self._finalizer()  # closes the quarantine file, removes the temp dir, drops the lock (once)

    # -- internals -------------------------------------------------------- #

    def _check_not_aborted(self) -> None:
        if self._closed:
            raise RuntimeError(f"ShardWriter for {self.out_dir} is already closed or aborted")

    def _check_open(self) -> None:
        self._check_not_aborted()
        if self._manifest is not None:
            raise RuntimeError(f"ShardWriter for {self.out_dir} is finished: no more rows")

    def _write_part(self, rows: list[dict]) -> None:
        self._write_arrow(pa.Table.from_pylist(rows, schema=self.schema))

    def _write_arrow(self, table: pa.Table) -> None:
        """Write one part under a temporary name, then rename it into place."""
        name = _part_name(len(self._parts))
        final = self._tmp_dir / name
        partial = self._tmp_dir / f".{name}.partial"
        try:
            with pa.OSFile(str(partial), "wb") as sink:
                with pa.ipc.new_file(sink, self.schema) as writer:
                    writer.write_table(table)
            os.replace(partial, final)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        self._parts.append({"file": name, "rows": table.num_rows, "sha256": sha256_file(final)})
        self._rows += table.num_rows

    def _publish(self) -> None:
        """Swap the finished temp dir into ``out_dir`` (old one moved aside, then deleted)."""
        old: Path | None = None
        if self.out_dir.exists():
            old = self.out_dir.parent / f".{self.out_dir.name}.old-{uuid.uuid4().hex[:8]}"
            os.replace(self.out_dir, old)
        try:
            os.chmod(self._tmp_dir, 0o777 & ~UMASK)  # mkdtemp makes it 0700: the mode mkdir would give
            os.replace(self._tmp_dir, self.out_dir)
        except BaseException:
            if old is not None:
                os.replace(old, self.out_dir)
            raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def _discard(fh, tmp_dir: Path, lock: _DirLock) -> None:
    """Close the quarantine handle, remove a writer's temp dir, drop its lock (finalizer body)."""
    try:
        if fh is not None:
            fh.close()
    finally:
        try:
            shutil.rmtree(tmp_dir, ignore_errors=True)
        finally:
            lock.release()


# --------------------------------------------------------------------------- #
# Reader
# --------------------------------------------------------------------------- #


def read_manifest(split_dir: str | Path) -> dict:
    """Load ``split_dir/manifest.json``; FileNotFoundError (naming the dir) if there is none."""
    path = Path(split_dir) / MANIFEST_NAME
    if not path.is_file():
        raise FileNotFoundError(f"no {MANIFEST_NAME} in split directory {Path(split_dir)}")
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def read_split(split_dir: str | Path) -> pa.Table:
    """Memory-map every part listed in the manifest, in order, and concatenate them."""
    split_dir = Path(split_dir)
    manifest = read_manifest(split_dir)
    tables = []
    for part in manifest["parts"]:
        source = pa.memory_map(str(split_dir / part["file"]), "r")
        tables.append(pa.ipc.open_file(source).read_all())
    if not tables:
        raise ValueError(f"manifest in {split_dir} lists no parts")
    table = pa.concat_tables(tables)
    if table.num_rows != manifest["rows"]:
        raise ValueError(f"{split_dir}: parts hold {table.num_rows} rows but the manifest says {manifest['rows']}")
    return table


def first_rows(table: pa.Table, n: int | None) -> pa.Table:
    """The first ``n`` rows of a table (all when None): what the ``max_examples`` settings keep."""
    return table if n is None or n >= table.num_rows else table.slice(0, n)


def verify_split(split_dir: Path, expected_sha: str | None = None) -> dict:
    """The split's manifest after checking every part's bytes against it (and its content hash
    against ``expected_sha``); ValueError naming the file that differs."""
    manifest = read_manifest(split_dir)
    for part in manifest["parts"]:
        actual = sha256_file(split_dir / part["file"])
        if actual != part["sha256"]:
            raise ValueError(
                f"{split_dir / part['file']}: sha256 {actual} differs from its manifest's {part['sha256']}"
            )
    content = content_sha256(p["sha256"] for p in manifest["parts"])
    if content != manifest["content_sha256"] or (expected_sha and content != expected_sha):
        raise ValueError(
            f"{split_dir}: content_sha256 {content} differs from the expected "
            f"{expected_sha or manifest['content_sha256']}"
        )
    return manifest
