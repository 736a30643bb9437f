"""Records of a user's parallel corpus, read from the formats people keep pairs in: line-aligned text
files, TSV / CSV (with a header, or columns by index), JSON Lines, Parquet and Arrow IPC.

Shared by readers, not a reader itself (``NOT_READERS``): :mod:`pipeline.data.corpora.parallel` turns
the records into rows. Every function here yields, in file order, :class:`RawRecord` (the raw texts
of one example: source, target, further references, with the file and line each came from) or
:class:`~pipeline.data.corpora.common.Quarantined` (a record that is broken before any text step),
and raises :class:`~pipeline.data.corpora.common.CorpusFormatError` for a broken *file*:

=========  ======================================================================================
format     what is read; record-level problems (quarantined at ``file:line``); file-level errors
=========  ======================================================================================
``text``   one example per line in aligned files (source, target, reference files); files of
           different lengths: error at the first line one of them lacks (:func:`dress.iter_aligned`).
           Lines stay bytes here (decoded per field by the reader: ``invalid_utf8`` names the file).
``tsv``    one example per line, fields split on the delimiter (no quoting); ``invalid_utf8``,
           ``nul_byte`` / ``line_too_long`` (the whole line), ``empty_line``, ``bad_field_count``
           (not the header's / the first row's number of fields). Error: a header without a named
           column (the message lists the columns found), a first row with fewer fields than the
           largest column index.
``csv``    RFC 4180 quoting (a quoted field may span lines: the record's first line is named);
           the same quarantine reasons; an unterminated quote or stray quote is an error at the
           record's first line.
``jsonl``  one JSON object per line; ``bad_json`` (not JSON, or not an object), ``missing_field``,
           ``bad_field_type`` (not a string; the references field: not a list of strings), and
           ``invalid_utf8`` / ``nul_byte`` / ``line_too_long`` / ``empty_line``.
``parquet`` / ``arrow``  columns by name (or index), read in record batches of ``batch_rows`` rows
           (``iter_batches`` / a memory-mapped IPC file), so memory does not grow with the file;
           "line" is the 1-based row number. A null cell reads as an empty text. Error: a file that
           is not Parquet / Arrow IPC, a missing column (the columns found are listed), a column
           that is not a string (or binary, decoded per cell; or a list of strings for references).
=========  ======================================================================================

A features column (``Columns.features``: tags kept apart from the source) is read like a text
column, into ``RawRecord.features``: a missing column is the same error, a JSON object without the
field ``missing_field``, a non-string value ``bad_field_type``; a null Parquet/Arrow cell reads as ''.

A group column (``Columns.group``: the example's natural group, which the comparison's intervals
resample whole) is read likewise, into ``RawRecord.group``: a missing column is the same error; a
JSON object without the field, a null JSON value or a null Parquet/Arrow cell reads as None (the
reader quarantines it ``empty_group``); a JSON integer, or a Parquet/Arrow integer column, reads as
its decimal text (document numbers); any other non-string value is ``bad_field_type``. It may be a
column read for another role too (the source: one group per lemma).

Text formats may be gzipped (``open_input``: a ``.gz`` name or the gzip magic bytes); a UTF-8 BOM
on the first line and CRLF line ends are removed.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.data.corpora.common import CorpusFormatError, Quarantined
from pipeline.data.corpora.dress import iter_aligned
from pipeline.data.corpora.inputs import TextLimits, open_input

FORMATS = ("text", "tsv", "csv", "jsonl", "parquet", "arrow")
TEXT_FORMATS = ("text", "tsv", "csv", "jsonl")  # may be gzipped
SUFFIXES = {
    ".tsv": "tsv",
    ".tab": "tsv",
    ".csv": "csv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".arrow": "arrow",
    ".feather": "arrow",
    ".ipc": "arrow",
}
BOM = b"\xef\xbb\xbf"
PREVIEW = 300  # characters of a raw line kept in a quarantine record
CSV_FIELD_LIMIT = 2**31 - 1  # the csv module's own 128 KiB limit would turn a long line into an error

Column = str | int


def detect_format(path: str | Path) -> str:
    """The format a file's name says (``.gz`` ignored): ``.tsv``/``.tab``, ``.csv``, ``.jsonl``/
    ``.ndjson``, ``.parquet``/``.pq``, ``.arrow``/``.feather``/``.ipc``; anything else is ``text``."""
    name = Path(path).name.lower().removesuffix(".gz")
    return SUFFIXES.get(Path(name).suffix, "text")


@dataclass(frozen=True)
class Columns:
    """Which columns (names, or 0-based indices for a headerless TSV/CSV) hold the source, the
    target, further references one per column (``refs``), a list of references (``refs_list``), the
    features (``features``: one text of tags, split by the reader) and the example's group
    (``group``: the comparison's resampling unit)."""

    src: Column
    tgt: Column
    refs: tuple[Column, ...] = ()
    refs_list: Column | None = None
    features: Column | None = None
    group: Column | None = None

    def single(self) -> list[Column]:
        """The columns of one text each: source, target, the reference columns."""
        return [self.src, self.tgt, *self.refs]

    def fields(self) -> list[Column]:
        """The columns of one string each: :meth:`single`, then the features column, then the group column."""
        extra = [c for c in (self.features, self.group) if c is not None]
        return self.single() + extra

    def all(self) -> list[Column]:
        return self.fields() + ([self.refs_list] if self.refs_list is not None else [])


@dataclass(frozen=True)
class RawRecord:
    """One example before any text step: ``texts`` = source, target, further references (a str,
    raw bytes for the ``text`` format, or None for a missing optional reference); ``names[i]`` is
    the file ``texts[i]`` came from; ``line`` its line (or row) number there; ``features`` the text
    of the features column (None: no such column); ``group`` the text of the group column (None: no
    such column, or no value in it)."""

    line: int
    names: tuple[str, ...]
    texts: tuple[str | bytes | None, ...]
    features: str | None = None
    group: str | None = None


def _record(line: int, name: str, values: Sequence, columns: Columns, refs: Sequence = ()) -> RawRecord:
    """The record of one row: the values of :meth:`Columns.fields` (the features value, then the
    group value, last, if any), then ``refs`` (a list of references) as further texts."""
    n = len(columns.single())
    texts = (*values[:n], *refs)
    features = values[n] if columns.features is not None else None
    group = values[n + (columns.features is not None)] if columns.group is not None else None
    return RawRecord(line, (name,) * len(texts), texts, features, group)


def _head(raw: bytes | str) -> str:
    text = raw.decode("utf-8", "backslashreplace") if isinstance(raw, bytes) else raw
    return text[:PREVIEW].replace("\x00", "\\x00")


UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def _not_utf16(path: Path, first: bytes) -> None:
    """A file that starts with a UTF-16 byte-order mark is an error naming the encoding (every line
    of it would otherwise be quarantined as invalid UTF-8, one by one)."""
    if first.startswith(UTF16_BOMS):
        raise CorpusFormatError(
            path,
            1,
            f"the file is UTF-16 (its byte-order mark), not UTF-8: convert it, e.g. iconv -f UTF-16 -t UTF-8 {path.name}",
        )


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """``(line number, raw line without its line end)``, BOM removed from line 1 (a UTF-16 file: an error)."""
    with open_input(path) as fh:
        for number, raw in enumerate(fh, start=1):
            if number == 1:
                _not_utf16(path, raw)
                raw = raw.removeprefix(BOM)
            yield number, raw.rstrip(b"\n").removesuffix(b"\r")


def _decoded(raw: bytes, where: str, limits: TextLimits) -> str | Quarantined:
    """A raw line as text, or why it cannot be one (invalid UTF-8, NUL, too long, empty)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        return Quarantined("invalid_utf8", where, {"byte_offset": err.start, "line": _head(raw)})
    found = limits.line_problem(text)
    if found is not None:
        return Quarantined(found[0], where, {**found[1], "line": _head(text)})
    if not text.strip():
        return Quarantined("empty_line", where, {"line": text[:PREVIEW]})
    return text


def _not_found(path: Path, line: int | None, missing: Sequence[Column], found: Sequence[str]) -> CorpusFormatError:
    return CorpusFormatError(
        path, line, f"no column {', '.join(map(repr, missing))}; the columns found are {list(found)}"
    )


def _indices(path: Path, columns: Columns, names: Sequence[str] | None, n_fields: int | None) -> list[int]:
    """Column positions of :meth:`Columns.fields`: names looked up in a header (``names``), or indices
    checked against ``n_fields`` (headerless)."""
    wanted = columns.fields()
    if names is not None:
        missing = [c for c in wanted if not isinstance(c, str) or c not in names]
        if missing:
            raise _not_found(path, 1, missing, names)
        twice = [c for c in wanted if list(names).count(c) > 1]
        if twice:
            fields = [i for i, n in enumerate(names) if n == twice[0]]
            raise CorpusFormatError(
                path,
                1,
                f"the header names column {twice[0]!r} {len(fields)} times (fields {fields}, 0-based): rename one",
            )
        return [list(names).index(c) for c in wanted]
    bad = [c for c in wanted if not isinstance(c, int) or isinstance(c, bool) or not 0 <= c < (n_fields or 0)]
    if bad:
        raise CorpusFormatError(
            path, None, f"columns {bad} do not exist: without a header, columns are 0-based indices below {n_fields}"
        )
    return list(wanted)


# --------------------------------------------------------------------------- #
# Line-aligned text files
# --------------------------------------------------------------------------- #


def text_records(paths: Sequence[Path]) -> Iterator[RawRecord]:
    """One record per line of line-aligned files (source, target, reference files), as bytes."""
    names = tuple(Path(p).name for p in paths)
    for path in paths:
        with open_input(Path(path)) as fh:
            _not_utf16(Path(path), fh.readline()[:2])
    for number, raw in iter_aligned([Path(p) for p in paths]):
        yield RawRecord(number, names, tuple(raw))


# --------------------------------------------------------------------------- #
# TSV and CSV
# --------------------------------------------------------------------------- #


def _header(path: Path, text: str | Quarantined, split) -> list[str]:
    if isinstance(text, Quarantined):
        raise CorpusFormatError(path, 1, f"the header line is unreadable ({text.reason})")
    return [name.strip() for name in split(text)]


def tsv_records(
    path: Path, columns: Columns, header: bool, delimiter: str, limits: TextLimits
) -> Iterator[RawRecord | Quarantined]:
    """The records of a delimiter-separated file without quoting (TSV): one per line."""
    name = path.name
    split = lambda text: text.split(delimiter)
    indices: list[int] | None = None
    n_fields = 0
    for number, raw in _lines(path):
        where = f"{name}:{number}"
        text = _decoded(raw, where, limits)
        if header and number == 1:
            found = _header(path, text, split)
            indices, n_fields = _indices(path, columns, found, None), len(found)
            continue
        if isinstance(text, Quarantined):
            yield text
            continue
        fields = split(text)
        if indices is None:  # headerless: the first readable row fixes the number of fields
            indices, n_fields = _indices(path, columns, None, len(fields)), len(fields)
        if len(fields) != n_fields:
            yield Quarantined(
                "bad_field_count", where, {"fields": len(fields), "expected": n_fields, "line": _head(text)}
            )
            continue
        yield _record(number, name, [fields[i] for i in indices], columns)


def csv_records(
    path: Path, columns: Columns, header: bool, delimiter: str, limits: TextLimits
) -> Iterator[RawRecord | Quarantined]:
    """The records of a CSV file (quoted fields, which may span lines); ``file:line`` is the line a
    record starts on. Invalid UTF-8 is kept (as surrogates) through the parser and quarantined."""
    csv.field_size_limit(max(csv.field_size_limit(), CSV_FIELD_LIMIT))
    name = path.name

    def lines() -> Iterator[str]:
        for _, raw in _lines(path):
            yield raw.decode("utf-8", "surrogateescape") + "\n"

    reader = csv.reader(lines(), delimiter=delimiter, strict=True)
    indices: list[int] | None = None
    n_fields = 0
    start = 1
    while True:
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            raise CorpusFormatError(path, start, f"malformed CSV ({err}): check the quoting of this record") from err
        first, start = start, reader.line_num + 1
        where = f"{name}:{first}"
        joined = delimiter.join(fields)
        problem = _csv_problem(joined, where, limits)
        if header and first == 1:
            if problem is not None:
                raise CorpusFormatError(path, 1, f"the header line is unreadable ({problem.reason})")
            indices, n_fields = _indices(path, columns, [f.strip() for f in fields], None), len(fields)
            continue
        if problem is not None:
            yield problem
            continue
        if indices is None:
            indices, n_fields = _indices(path, columns, None, len(fields)), len(fields)
        if len(fields) != n_fields:
            yield Quarantined(
                "bad_field_count", where, {"fields": len(fields), "expected": n_fields, "line": _head(joined)}
            )
            continue
        yield _record(first, name, [fields[i] for i in indices], columns)


def _csv_problem(joined: str, where: str, limits: TextLimits) -> Quarantined | None:
    try:
        joined.encode("utf-8")
    except UnicodeEncodeError as err:
        return Quarantined(
            "invalid_utf8", where, {"char_offset": err.start, "line": _head(joined.encode("utf-8", "surrogateescape"))}
        )
    found = limits.line_problem(joined)
    if found is not None:
        return Quarantined(found[0], where, {**found[1], "line": _head(joined)})
    if not joined.strip():
        return Quarantined("empty_line", where, {"line": joined[:PREVIEW]})
    return None


# --------------------------------------------------------------------------- #
# JSON Lines
# --------------------------------------------------------------------------- #


def jsonl_records(path: Path, columns: Columns, limits: TextLimits) -> Iterator[RawRecord | Quarantined]:
    """One JSON object per line; ``columns`` are field names."""
    name = path.name
    bad = [c for c in columns.all() if not isinstance(c, str)]
    if bad:
        raise CorpusFormatError(path, None, f"JSON Lines fields are named: columns {bad} are not names")
    for number, raw in _lines(path):
        where = f"{name}:{number}"
        text = _decoded(raw, where, limits)
        if isinstance(text, Quarantined):
            yield text
            continue
        try:
            obj = json.loads(text)
        except ValueError as err:
            yield Quarantined("bad_json", where, {"error": str(err)[:200], "line": _head(text)})
            continue
        if not isinstance(obj, dict):
            yield Quarantined(
                "bad_json", where, {"error": f"a {type(obj).__name__}, not an object", "line": _head(text)}
            )
            continue
        yield _object_record(obj, number, name, columns, where, text)


def _object_record(obj: dict, number: int, name: str, columns: Columns, where: str, text: str):
    missing = [c for c in (columns.src, columns.tgt, columns.features) if c is not None and c not in obj]
    if missing:
        return Quarantined(
            "missing_field", where, {"missing": missing, "fields": sorted(obj)[:20], "line": _head(text)}
        )
    texts: list[str | None] = []
    fields = columns.fields()
    for i, column in enumerate(fields):
        value = obj.get(column)
        if columns.group is not None and i == len(fields) - 1 and _is_int(value):
            value = str(value)  # a group given as a number (a document's)
        if value is not None and not isinstance(value, str):
            return Quarantined("bad_field_type", where, {"field": column, "type": type(value).__name__})
        texts.append(value)
    refs = None
    if columns.refs_list is not None:
        refs = obj.get(columns.refs_list)
        if refs is not None and (not isinstance(refs, list) or not all(isinstance(r, str) for r in refs)):
            return Quarantined("bad_field_type", where, {"field": columns.refs_list, "type": "not a list of strings"})
    return _record(number, name, texts, columns, refs or ())


# --------------------------------------------------------------------------- #
# Parquet and Arrow IPC
# --------------------------------------------------------------------------- #


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _column_names(path: Path, schema: pa.Schema, columns: Columns) -> list[str]:
    """The schema's names of ``columns`` (names or indices), type-checked (the group column may also
    hold integers)."""
    names = schema.names
    out, missing = [], []
    for column in columns.all():
        if isinstance(column, int) and not isinstance(column, bool) and 0 <= column < len(names):
            out.append(names[column])
        elif isinstance(column, str) and column in names:
            out.append(column)
        else:
            missing.append(column)
    if missing:
        raise _not_found(path, None, missing, names)
    group = len(columns.fields()) - 1 if columns.group is not None else None
    for i, col in enumerate(out):
        kind = schema.field(col).type
        is_list = columns.refs_list is not None and i == len(out) - 1
        value_type = kind.value_type if pa.types.is_list(kind) or pa.types.is_large_list(kind) else None
        if not is_list:
            value_type = kind
        if i == group and pa.types.is_integer(kind):
            continue
        if value_type is None or not _is_text_type(value_type):
            want = "a list of strings" if is_list else "strings"
            raise CorpusFormatError(path, None, f"column {col!r} holds {kind}, not {want}")
    return out


def _is_text_type(kind: pa.DataType) -> bool:
    return any(
        test(kind)
        for test in (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary, pa.types.is_large_binary)
    )


def _batch_records(path: Path, batch: pa.RecordBatch, first_row: int, columns: Columns) -> Iterator[RawRecord]:
    """The records of a batch whose columns are :meth:`Columns.all`, in order (a null features cell:
    ''; a null group cell: None, an integer one its decimal text)."""
    values = [batch.column(i).to_pylist() for i in range(batch.num_columns)]
    n = len(columns.fields())
    group = n - 1 if columns.group is not None else None
    feature = n - 1 - (group is not None) if columns.features is not None else None
    if group is not None:
        values[group] = [str(v) if _is_int(v) else v for v in values[group]]
    for i in range(batch.num_rows):
        fields = [values[c][i] if c != feature else values[c][i] or "" for c in range(n)]
        refs = (values[n][i] or []) if columns.refs_list is not None else ()
        yield _record(first_row + i, path.name, fields, columns, refs)


def parquet_records(path: Path, columns: Columns, batch_rows: int) -> Iterator[RawRecord]:
    """A Parquet file's records, ``batch_rows`` rows at a time (only the named columns are read)."""
    try:
        pf = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as err:
        raise CorpusFormatError(path, None, f"not a readable Parquet file ({err})") from err
    names = _column_names(path, pf.schema_arrow, columns)
    row = 1
    batches = pf.iter_batches(batch_size=batch_rows, columns=list(dict.fromkeys(names)))
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except (pa.ArrowException, OSError) as err:
            raise CorpusFormatError(path, row, f"unreadable Parquet data ({err})") from err
        batch = pa.RecordBatch.from_arrays([batch.column(n) for n in names], names=[str(i) for i in range(len(names))])
        yield from _batch_records(path, batch, row, columns)
        row += batch.num_rows


def arrow_records(path: Path, columns: Columns, batch_rows: int) -> Iterator[RawRecord]:
    """An Arrow IPC file's (or stream's) records, one record batch at a time, memory-mapped."""
    source = pa.memory_map(str(path))
    try:
        try:
            reader = pa.ipc.open_file(source)
            batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
            schema = reader.schema
        except pa.ArrowInvalid:
            source.seek(0)
            try:
                stream = pa.ipc.open_stream(source)
            except pa.ArrowInvalid as err:
                raise CorpusFormatError(path, None, f"not an Arrow IPC file or stream ({err})") from err
            batches, schema = iter(stream), stream.schema
        names = _column_names(path, schema, columns)
        row = 1
        for batch in batches:
            batch = pa.RecordBatch.from_arrays(
                [batch.column(n) for n in names], names=[str(i) for i in range(len(names))]
            )
            for start in range(0, batch.num_rows, batch_rows):
                part = batch.slice(start, batch_rows)
                yield from _batch_records(path, part, row, columns)
                row += part.num_rows
    finally:
        source.close()


# --------------------------------------------------------------------------- #
# The columns a file offers (python -m pipeline.data.tasks add checks the named ones)
# --------------------------------------------------------------------------- #


def column_names(path: Path, fmt: str, header: bool = True, delimiter: str | None = None) -> list[str] | int:
    """The column names of a table file: a TSV/CSV header, the fields of the first JSON object,
    a Parquet/Arrow schema; for a headerless TSV/CSV, the number of fields of its first line.
    ``CorpusFormatError`` when the file cannot be read that far."""
    path = Path(path)
    if fmt in ("tsv", "csv"):
        delimiter = delimiter or ("\t" if fmt == "tsv" else ",")
        for _, raw in _lines(path):
            text = raw.decode("utf-8", "replace")
            fields = next(csv.reader([text], delimiter=delimiter)) if fmt == "csv" else text.split(delimiter)
            return [f.strip() for f in fields] if header else len(fields)
        raise CorpusFormatError(path, None, "the file is empty")
    if fmt == "jsonl":
        for number, raw in _lines(path):
            if raw.strip():
                try:
                    obj = json.loads(raw)
                except ValueError as err:
                    raise CorpusFormatError(path, number, f"not JSON ({err})") from err
                if not isinstance(obj, dict):
                    raise CorpusFormatError(path, number, "not a JSON object")
                return list(obj)
        raise CorpusFormatError(path, None, "the file is empty")
    try:
        if fmt == "parquet":
            return pq.ParquetFile(path).schema_arrow.names
        with pa.memory_map(str(path)) as source:
            try:
                return pa.ipc.open_file(source).schema.names
            except pa.ArrowInvalid:
                source.seek(0)
                return pa.ipc.open_stream(source).schema.names
    except (pa.ArrowException, OSError) as err:
        raise CorpusFormatError(path, None, f"not a readable {fmt} file ({err})") from err
