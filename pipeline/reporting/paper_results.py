"""Published numbers the comparison tables print beside ours (copied from the papers' tables).

The numbers live in the data file ``pipeline/reporting/paper_results.yaml`` (shipped as package data), one
entry per table id; this module reads it once, validates every table, and exposes each table as a
dict of the same shape as ``PAPER_TABLES["copynet_table1"]``::

    {"columns": [metric keys], "rows": {row key: [one value per column]}, "source": "paper, Table N",
     # optional:
     "labels": {row key: the row's name as the paper prints it},
     "analogues": {our mechanism key: row key of a published system of the same family},
     "paper_columns": [the paper's own column headers], "decimals": digits the paper prints,
     "metric_convention": "...", "note": "..."}

In the YAML each row is ``{values: [...], paper: <text file>, table: "Table N", line: <line>}``: the
values, and where they are printed: the paper's text conversion in ../shared/papers (a file name
such as ``000_6c68d453ca25dfa2.txt``), the table as the paper names it, and the 1-based line of that
file where the row's numbers start (a number quoted from prose has ``table: null`` and ``section``).
The table dicts keep only the values (``rows``: row key -> list); the provenance is
``row_source(table_id, row)``. tests/pipeline/reporting/test_paper_results.py checks every row against its line.

Row keys: a mechanism key of this project (``MECHANISM_KEYS`` = the keys of ``models.MECHANISMS``)
when the row is the paper's own run of the architecture the project builds under that key (CopyNet's
Enc-Dec/RNNSearch, Pointer Softmax's NMT = Bahdanau RNNSearch, WEAN's Seq2seq = ``luong``); otherwise
the system's name from the paper (ABS+, RAS-Elman, RNN context ...): those are published rows of
systems that are not ours (``published_systems``). ``analogues`` pairs such a row with the mechanism
of ours it is closest to (e.g. Hu et al.'s "RNN context" with ``rnnsearch``), for a reader who wants
them side by side.

Column keys are the metric keys of the task's evaluation. They follow the task's convention
(``metric_convention``): on ``duc2004`` "rouge1" is ROUGE-1 recall at 75 bytes, on ``gigaword`` it is
ROUGE-1 F1 at full length. A table whose metric differs from its task's convention gets distinct keys
(Pointer Softmax's Table 3, full-length recall: ``rouge1_r`` ...). Values are as printed
(percent); ``None`` (YAML ``null``) is a cell the paper leaves empty.

Papers (text conversions in ../shared/papers, README.md there): CopyNet = Gu et al. 2016 (000_...),
Pointer Softmax = Gulcehre et al. 2016 (001_...), WEAN = Ma et al. 2018 (002_...), Read-Again = Zeng
et al. 2016 (004_...).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import NamedTuple

import yaml

from models.registry import MECHANISMS

DATA_FILE = Path(__file__).with_name("paper_results.yaml")

# The mechanism keys of this project: every name models.MECHANISMS builds (params.yaml `mechanisms`,
# plus WEAN's Seq2seq baseline `luong`); a new mechanism needs no edit here.
MECHANISM_KEYS = frozenset(MECHANISMS)

# Table-level fields of the YAML (the dict shape above); anything else is a typo.
_TABLE_FIELDS = frozenset(
    {"columns", "paper_columns", "rows", "labels", "analogues", "source", "metric_convention", "note", "decimals"}
)
_ROW_FIELDS = frozenset({"values", "paper", "table", "section", "line"})
_PAPER_FILE = re.compile(r"[\w.-]+\.txt")
_TABLE_NAME = re.compile(r"Table \d+")


class RowSource(NamedTuple):
    """Where a published row is printed: ``line`` (1-based) of the text file ``paper`` in ../shared/papers,
    inside ``table`` ("Table 3") or, for a number quoted from prose, ``table`` None and ``section`` ("5.1")."""

    paper: str
    table: str | None
    line: int
    section: str | None = None


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a repeated mapping key (PyYAML would silently keep the last one, dropping a row)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _row_source(where: str, row: str, entry) -> RowSource:
    """The provenance of one YAML row entry, checked (ValueError naming the table and row)."""
    where = f"{where}, row {row!r}"
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: expected {{values, paper, table, line}}, got {entry!r}")
    missing = sorted({"values", "paper", "table", "line"} - set(entry))
    unknown = sorted(set(entry) - _ROW_FIELDS)
    if missing or unknown:
        raise ValueError(f"{where}: missing fields {missing}, unknown fields {unknown}")
    if not isinstance(entry["values"], list):
        raise ValueError(f"{where}: values {entry['values']!r} are not a list (one value per column)")
    paper, table, line, section = entry["paper"], entry["table"], entry["line"], entry.get("section")
    if not isinstance(paper, str) or not _PAPER_FILE.fullmatch(paper):
        raise ValueError(f"{where}: paper {paper!r} is not a text file name of ../shared/papers")
    if table is None:
        if not isinstance(section, str) or not section:
            raise ValueError(f"{where}: a row with table null needs the paper's section (e.g. '5.1')")
    elif not isinstance(table, str) or not _TABLE_NAME.fullmatch(table):
        raise ValueError(f"{where}: table {table!r} is not a table name as printed ('Table 3')")
    if isinstance(line, bool) or not isinstance(line, int) or line < 1:
        raise ValueError(f"{where}: line {line!r} is not a 1-based line number")
    return RowSource(paper, table, line, section)


RowSources = dict[str, dict[str, RowSource]]  # table id -> {row key: where the paper prints the row}


def parse_tables(data, origin: str = "pipeline/reporting/paper_results.yaml") -> tuple[dict[str, dict], RowSources]:
    """(tables, row sources) from the parsed YAML: table id -> table dict (module docstring shape), and
    table id -> {row key: RowSource}. Every table is validated; ValueError names ``origin``, table and row."""
    if not isinstance(data, dict) or not data:
        raise ValueError(f"{origin}: expected a mapping of table id -> table, got {type(data).__name__}")
    tables: dict[str, dict] = {}
    sources: RowSources = {}
    for table_id, spec in data.items():
        where = f"{origin}: table {table_id!r}"
        if not isinstance(spec, dict):
            raise ValueError(f"{where}: expected a mapping, got {spec!r}")
        unknown = sorted(set(spec) - _TABLE_FIELDS)
        if unknown:
            raise ValueError(f"{where}: unknown fields {unknown} (known: {sorted(_TABLE_FIELDS)})")
        rows = spec.get("rows")
        if not isinstance(rows, dict):
            raise ValueError(f"{where}: 'rows' must be a mapping of row key -> {{values, paper, table, line}}")
        sources[table_id] = {row: _row_source(where, row, entry) for row, entry in rows.items()}
        table = {
            k: ({row: entry["values"] for row, entry in rows.items()} if k == "rows" else v) for k, v in spec.items()
        }
        validate_table(table_id, table, origin=origin)
        tables[table_id] = table
    return tables, sources


@functools.cache
def load_tables(path: Path = DATA_FILE) -> tuple[dict[str, dict], RowSources]:
    """``parse_tables`` of the YAML at ``path``, read once per path (the same objects on every call)."""
    origin = f"pipeline/{path.name}" if path == DATA_FILE else str(path)
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as e:
        raise ValueError(f"{origin}: {e}") from e
    return parse_tables(data, origin)


def validate_table(table_id: str, table: dict, origin: str = "pipeline/reporting/paper_results.py") -> None:
    """Raise ValueError naming the table (and row) when a table breaks the shape in the module docstring.

    ``origin`` starts the message (the loader passes the YAML file it read the table from)."""
    where = f"{origin}: table {table_id!r}"
    for key in ("columns", "rows", "source"):
        if key not in table:
            raise ValueError(f"{where} has no {key!r}")
    columns = table["columns"]
    if not columns or len(set(columns)) != len(columns):
        raise ValueError(f"{where}: columns must be non-empty and distinct, got {columns}")
    if "paper_columns" in table and len(table["paper_columns"]) != len(columns):
        raise ValueError(f"{where}: {len(table['paper_columns'])} paper_columns for {len(columns)} columns")
    if not table["rows"]:
        raise ValueError(f"{where} has no rows")
    for row, values in table["rows"].items():
        if len(values) != len(columns):
            raise ValueError(f"{where}, row {row!r}: {len(values)} values for {len(columns)} columns {columns}")
        for v in values:
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                raise ValueError(f"{where}, row {row!r}: value {v!r} is not a number or None")
    stray = sorted(set(table.get("labels", {})) - set(table["rows"]))
    if stray:
        raise ValueError(f"{where}: labels for rows it does not have: {stray}")
    for mech, row in table.get("analogues", {}).items():
        if mech not in MECHANISM_KEYS:
            raise ValueError(f"{where}: analogue key {mech!r} is not a mechanism ({sorted(MECHANISM_KEYS)})")
        if row not in table["rows"] or row in MECHANISM_KEYS:
            raise ValueError(f"{where}: analogue {mech!r} -> {row!r} must name a published (non-mechanism) row")


# Every table, by id, in the YAML's order (a malformed edit of the YAML fails at import, naming the table).
PAPER_TABLES: dict[str, dict]
_ROW_SOURCES: RowSources
PAPER_TABLES, _ROW_SOURCES = load_tables()


def published_systems(table: dict) -> list[str]:
    """Row keys of systems that are not mechanisms of this project (printed as published rows only)."""
    return [row for row in table["rows"] if row not in MECHANISM_KEYS]


def row_label(table: dict, row: str) -> str:
    """The row's name as the paper prints it (the key itself when no label is recorded)."""
    return table.get("labels", {}).get(row, row)


def row_source(table_id: str, row: str) -> RowSource:
    """Where the paper prints ``row`` of ``table_id``: text file, table, line (KeyError for an unknown one)."""
    return _ROW_SOURCES[table_id][row]
