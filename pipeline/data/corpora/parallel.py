"""Your own parallel corpus: source/target pairs in text, TSV, CSV, JSON Lines, Parquet or Arrow files.

One reader for the formats people keep pairs in (``python -m pipeline.data.tasks add`` writes its
settings; docs/own_data.md walks through it). Reading the formats is :mod:`pipeline.data.corpora.tables`:

* ``format: text``: line-aligned files, ``<split>_src_file`` / ``<split>_tgt_file`` (and
  ``<split>_ref_files``, further references, one file each);
* ``tsv`` / ``csv`` / ``jsonl`` / ``parquet`` / ``arrow``: ``<split>_file``, one example per line
  (row); ``src_col`` / ``tgt_col`` name the columns (header names, JSON fields, Parquet / Arrow
  columns) or, for a TSV / CSV with ``header: false``, give their 0-based indices; ``ref_cols``
  lists further reference columns (one text each) and ``refs_col`` a column holding a list of
  references (JSON, Parquet, Arrow);
* ``format: null`` (default) chooses by the file name (:func:`tables.detect_format`); text formats
  may be gzipped (``.gz``);
* ``features_col`` (table formats): a column of tags kept apart from the source (morphological
  inflection's ``V;PST;3;SG``), split on ``features_sep`` (default ``;``), each tag trimmed, empty
  ones dropped, kept as written (no tokeniser, no lowercase), stored as the shards' ``features``
  column (list<string>). The model reads them beside the source, never as part of it, so no
  mechanism can copy a tag (models/seq2seq.py). An example's source is then (src, features) for
  ``write_corpus``'s duplicates and leakage (the same lemma under other tags is another example);
  a hash split still hashes ``src`` alone (every form of a lemma in one split).
* ``group_col`` (table formats): a column naming each example's natural group -- the same lemma,
  the same document --, whose examples are not independent. Its cell, trimmed, is stored as the
  shards' ``group`` column (string; a JSON / Parquet / Arrow integer as its decimal text); an empty
  or missing cell is quarantined ``empty_group``. The comparison's bootstrap then resamples whole
  groups when ``compare.resample_by`` is ``group`` (``tasks add --group-col`` writes that into the
  task's ``task_settings``). It may name a column read for another role (the source itself: one
  group per lemma), and plays no part in duplicates, leakage or the hash split.

Splits: a file per split, or one file carved by ``valid_fraction`` / ``test_fraction``: the split of
an example is a stable hash (keyed BLAKE2b, ``split_seed``) of its *tokenised* source, so the
split does not depend on file order or size, and the same source (twice in the file, or written
twice the same after tokenising) is always in the same split: no source straddles two splits.
A fraction is for a split without a file (``train_file`` + ``test_file`` + ``valid_fraction`` carves
valid from train). Train and valid are required (the vocab stage reads both); test is what
``evaluate`` scores by default.

Rows: ``id`` = ``<file name>:<line>`` (Parquet/Arrow: the row number; ``.gz`` left out), ``src``,
``tgt``, ``refs`` = ``[tgt, further references ...]`` (as the TurkCorpus reader stores its eight:
``tgt`` is the first reference; evaluation scores against them all). An empty further reference
is left out (counted ``empty_refs``).

Tokenisation (``tokenizer``), the same for sources, targets and references, and for raw text in
serving and ``predict`` (:func:`source_tokenizer`):

* ``whitespace``: the text is tokenised already; split on whitespace;
* ``moses``: Moses ``tokenizer.perl -l <lang>`` via sacremoses (:func:`pipeline.data.corpora.europarl.tokenise`,
  ``moses_escape`` for its XML escaping);
* ``chars``: every non-whitespace character a token (Chinese; output is joined without spaces);
* ``jieba``: jieba words (``jieba_hmm``), joined without spaces on output;

then ``lowercase`` and ``mask_digits`` (every ASCII digit ``#``) per token. ``subword:`` (the prepare
stage's sentencepiece step) goes on top, as for any reader.

Bad input (every reader's checks; details in :mod:`pipeline.data.corpora.tables`): quarantined at
``file:line`` -- ``invalid_utf8``, ``nul_byte``, ``line_too_long``, ``token_too_long`` (a token over
``max_token_chars`` after tokenising), ``empty_line``, ``bad_field_count``, ``bad_json``,
``missing_field``, ``bad_field_type``, ``empty_src`` / ``empty_tgt`` (nothing left after tokenising),
``empty_group`` (a group column's cell empty or missing),
``src_too_long`` / ``tgt_too_long`` / ``ref_too_long`` (over ``max_tokens`` tokens: absurd input, not
a modelling filter); then ``write_corpus``'s ``duplicate_pair`` and ``src_in_<split>`` in train.
A malformed file (a missing column -- the message lists the columns found --, aligned files of
different lengths, broken CSV quoting, a truncated ``.gz``, a file that is not Parquet / Arrow) is a
``CorpusFormatError`` naming the file and line; a split left without rows an ``EmptySplitError``.

Memory stays flat in the corpus size: files are streamed (Parquet / Arrow in record batches),
tokenising runs chunk by chunk through ``map_chunks``, and a hash-split file is read once, its
chunks spilled per split to private scratch files (``pipeline.io.shards.scratch_parent``: the prepare
stage's scratch folder, else beside the output) and streamed back.

Manifest ``stats``: ``src_tokens``, ``ref_tokens``, ``ref_tokens_in_src`` (what a copy mechanism can
point at), ``refs_identical_to_src``, ``empty_refs``; the tokeniser and its version in the params.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import pyarrow as pa

from pipeline.config.validation import dataclass_from_dict
from pipeline.data.corpora.common import (
    EmptySplitError,
    Quarantined,
    SplitStats,
    read_spill,
    spill_by_split,
    write_corpus,
)
from pipeline.data.corpora.dress import pair_counts
from pipeline.data.corpora.europarl import tokenise as moses_tokens
from pipeline.data.corpora.inputs import MAX_LINE_CHARS, MAX_TOKEN_CHARS, TextLimits, check_input_files, row_name
from pipeline.data.corpora.tables import (
    FORMATS,
    Columns,
    RawRecord,
    arrow_records,
    csv_records,
    detect_format,
    jsonl_records,
    parquet_records,
    text_records,
    tsv_records,
)
from pipeline.data.text.normalize import mask_digits
from pipeline.data.text.segment import char_tokens, jieba_chunk
from pipeline.io.parallel import chunked, serial_map
from pipeline.io.shards import make_schema, scratch_dir, scratch_parent

SPLITS = ("train", "valid", "test")
TOKENIZERS = ("whitespace", "moses", "chars", "jieba")
UNSPACED = ("chars", "jieba")  # output tokens joined without spaces
ROLES = ("src", "tgt")  # then "ref" for every further reference
GROUP = "group"  # the shards' column of each example's group (group_col), what compare.resample_by names


# --------------------------------------------------------------------------- #
# Tokenising (raw text in serving uses the same functions)
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class TokenSpec:
    """How text becomes tokens: the tokeniser and the token steps (picklable, for workers)."""

    tokenizer: str = "whitespace"
    lang: str = "en"
    moses_escape: bool = False
    jieba_hmm: bool = True
    lowercase: bool = False
    mask_digits: bool = False

    def __post_init__(self) -> None:
        if self.tokenizer not in TOKENIZERS:
            raise ValueError(f"parallel tokenizer must be one of {TOKENIZERS}, got {self.tokenizer!r}")
        for name in ("moses_escape", "jieba_hmm", "lowercase", "mask_digits"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"parallel {name} must be true or false, got {getattr(self, name)!r}")
        if not isinstance(self.lang, str) or not self.lang:
            raise ValueError(f"parallel lang must be a language code such as 'en', got {self.lang!r}")

    @classmethod
    def from_settings(cls, settings: dict) -> TokenSpec:
        """The token settings of a ``prepare.<task>`` section (the other keys are ignored)."""
        return cls(**{k: settings[k] for k in cls.__dataclass_fields__ if k in settings})

    def split(self, text: str) -> list[str]:
        """The tokeniser alone."""
        if self.tokenizer == "whitespace":
            return text.split()
        if self.tokenizer == "moses":
            return moses_tokens(text, self.lang, self.moses_escape) if text.strip() else []
        if self.tokenizer == "chars":
            return char_tokens(text)
        return jieba_chunk(self.jieba_hmm, [text])[0].split()

    def steps(self, tokens: list[str]) -> list[str]:
        """The token steps: lowercase, digits ``#``."""
        if self.lowercase:
            tokens = [t.lower() for t in tokens]
        if self.mask_digits:
            tokens = [mask_digits(t) for t in tokens]
        return tokens

    def tokens(self, text: str) -> list[str]:
        return self.steps(self.split(text))

    def describe(self) -> str:
        """The tokeniser with the version of the library behind it (for the manifest)."""
        package = {"moses": "sacremoses", "jieba": "jieba"}.get(self.tokenizer)
        if package is None:
            return self.tokenizer
        return f"{self.tokenizer} ({package} {importlib.metadata.version(package)})"


# --------------------------------------------------------------------------- #
# Settings
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class Config:
    """Where the pairs are, in which format and columns, how splits are made and text tokenised."""

    train_file: str | None = None  # tsv/csv/jsonl/parquet/arrow: one file per split ...
    valid_file: str | None = None
    test_file: str | None = None
    train_src_file: str | None = None  # ... or text: line-aligned source / target files
    train_tgt_file: str | None = None
    valid_src_file: str | None = None
    valid_tgt_file: str | None = None
    test_src_file: str | None = None
    test_tgt_file: str | None = None
    valid_ref_files: tuple[str, ...] = ()  # text: further references, one file each
    test_ref_files: tuple[str, ...] = ()
    format: str | None = None  # null: by each file's name (tables.detect_format)
    header: bool = True  # tsv/csv: the first line names the columns
    delimiter: str | None = None  # tsv: tab, csv: comma
    src_col: str | int | None = None  # default: "src" (names), 0 (header: false)
    tgt_col: str | int | None = None  # default: "tgt", 1
    ref_cols: tuple[str | int, ...] = ()  # further references, one column each
    refs_col: str | int | None = None  # a column holding a list of further references
    features_col: str | int | None = None  # a column of tags kept apart from the source (None: none)
    features_sep: str = ";"  # what separates the tags in it
    group_col: str | int | None = None  # a column of each example's group, resampled whole by compare (None: none)
    valid_fraction: float = 0.0  # carved from the train file by a hash of the source
    test_fraction: float = 0.0
    split_seed: int = 0
    tokenizer: str = "whitespace"  # whitespace | moses | chars | jieba
    lang: str = "en"  # moses
    moses_escape: bool = False  # moses: XML escaping as tokenizer.perl does by default
    jieba_hmm: bool = True
    lowercase: bool = False
    mask_digits: bool = False
    max_tokens: int = 1000  # a longer side is quarantined as absurd input
    max_line_chars: int = MAX_LINE_CHARS
    max_token_chars: int = MAX_TOKEN_CHARS
    chunk_size: int = 5000  # examples per map_chunks task (and Parquet/Arrow batch)

    @classmethod
    def from_dict(cls, d: dict) -> Config:
        return dataclass_from_dict(cls, d)

    def __post_init__(self) -> None:
        for name in ("valid_ref_files", "test_ref_files", "ref_cols"):
            object.__setattr__(self, name, tuple(getattr(self, name) or ()))
        if self.format is not None and self.format not in FORMATS:
            raise ValueError(f"parallel format must be one of {FORMATS}, got {self.format!r}")
        if not (self.train_file or self.train_src_file):
            raise ValueError(
                "parallel needs a train file: train_file (tsv, csv, jsonl, parquet, arrow) or "
                "train_src_file + train_tgt_file (text)"
            )
        self._check_files()
        self._check_fractions()
        self._check_columns()
        if not isinstance(self.header, bool):
            raise ValueError(f"parallel header must be true or false, got {self.header!r}")
        for name in ("max_tokens", "chunk_size", "split_seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "split_seed" else 1):
                raise ValueError(
                    f"parallel {name} must be an integer >= {0 if name == 'split_seed' else 1}, got {value!r}"
                )
        TextLimits.of(self)
        self.token_spec()

    @property
    def text(self) -> bool:
        """Whether the pairs are line-aligned text files (else one table file per split)."""
        return (self.format or detect_format(self.train_file or self.train_src_file)) == "text"

    def format_of(self, split: str) -> str:
        """The format of a split's file: ``format``, or what the file's name says."""
        return self.format or ("text" if self.text else detect_format(getattr(self, f"{split}_file")))

    def _check_files(self) -> None:
        text = self.text
        for split in SPLITS:
            table, src, tgt = (getattr(self, f"{split}_{k}") for k in ("file", "src_file", "tgt_file"))
            if text and table:
                raise ValueError(f"parallel format text reads {split}_src_file and {split}_tgt_file, not {split}_file")
            if not text and (src or tgt):
                raise ValueError(f"parallel table formats read {split}_file, not {split}_src_file/_tgt_file")
            if not text and table and self.format_of(split) == "text":
                raise ValueError(
                    f"parallel: {split}_file {table} is not a table file (set format, or name it .tsv ...)"
                )
            if text and bool(src) != bool(tgt):
                raise ValueError(f"parallel: {split}_src_file and {split}_tgt_file go together")
        if (self.valid_ref_files or self.test_ref_files) and not text:
            raise ValueError(
                "parallel: valid_ref_files/test_ref_files are for format text (tables: ref_cols, refs_col)"
            )
        for split in ("valid", "test"):
            if getattr(self, f"{split}_ref_files") and not self.has_file(split):
                raise ValueError(f"parallel: {split}_ref_files need {split}_src_file/{split}_tgt_file")

    def _check_fractions(self) -> None:
        for split in ("valid", "test"):
            value = getattr(self, f"{split}_fraction")
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1:
                raise ValueError(f"parallel {split}_fraction must be a number in [0, 1), got {value!r}")
            if value and self.has_file(split):
                raise ValueError(f"parallel: {split} has a file and a {split}_fraction; give one of them")
        if self.valid_fraction + self.test_fraction >= 1:
            raise ValueError("parallel: valid_fraction + test_fraction must leave some of the file to train")
        if "valid" not in self.splits():
            raise ValueError("parallel needs a valid split (the vocab stage reads it): valid_file or valid_fraction")

    def _check_columns(self) -> None:
        if self.text:
            named = (self.src_col, self.tgt_col, self.refs_col, self.features_col, self.group_col)
            if any(c is not None for c in named) or self.ref_cols:
                raise ValueError(
                    "parallel format text has no columns "
                    "(src_col, tgt_col, ref_cols, refs_col, group_col, features_col)"
                )
            return
        if not isinstance(self.features_sep, str) or not self.features_sep:
            raise ValueError(f"parallel features_sep must be a non-empty string such as ';', got {self.features_sep!r}")
        cols = self.columns().all()
        roles = replace(self.columns(), group=None).all()  # the group may be read for another role too (the lemma)
        if len(set(map(str, roles))) != len(roles):
            raise ValueError(f"parallel: columns must differ, got {roles}")
        formats = {self.format_of(s) for s in SPLITS if self.has_file(s)}
        indexed = bool(formats & {"tsv", "csv"}) and not self.header
        if indexed and formats - {"tsv", "csv"}:
            raise ValueError(f"parallel: header: false (columns by index) is for tsv/csv files, got {sorted(formats)}")
        for col in cols:
            ok = (
                (isinstance(col, int) and not isinstance(col, bool) and col >= 0)
                if indexed
                else isinstance(col, str | int)
            )
            if not ok or isinstance(col, bool):
                want = "0-based column indices (header: false)" if indexed else "column names"
                raise ValueError(f"parallel: columns are {want}, got {col!r}")
        if self.refs_col is not None and formats & {"tsv", "csv"}:
            raise ValueError("parallel refs_col (a list of references) is for jsonl, parquet and arrow; use ref_cols")
        if self.delimiter is not None and (not formats <= {"tsv", "csv"} or len(self.delimiter) != 1):
            raise ValueError(f"parallel delimiter must be one character, for tsv/csv, got {self.delimiter!r}")

    def has_file(self, split: str) -> bool:
        return bool(getattr(self, f"{split}_file") or getattr(self, f"{split}_src_file"))

    def splits(self) -> list[str]:
        """The splits written: those with a file, and those carved by a fraction."""
        return [s for s in SPLITS if self.has_file(s) or getattr(self, f"{s}_fraction", 0)]

    def hashed(self) -> list[str]:
        """The splits carved from the train file by a hash of the source."""
        return [s for s in ("valid", "test") if getattr(self, f"{s}_fraction")]

    def files(self, split: str) -> list[Path]:
        """The input files of a split with files (text: source, target, references)."""
        return [path for _, path in self.named_files(split)]

    def named_files(self, split: str) -> list[tuple[str, Path]]:
        """``(setting, path)`` of each input file of a split with files, as :meth:`files` orders them."""
        if not self.text:
            return [(f"{split}_file", Path(getattr(self, f"{split}_file")))]
        refs = getattr(self, f"{split}_ref_files", ())
        return [
            (f"{split}_src_file", Path(getattr(self, f"{split}_src_file"))),
            (f"{split}_tgt_file", Path(getattr(self, f"{split}_tgt_file"))),
            *((f"{split}_ref_files[{i}]", Path(ref)) for i, ref in enumerate(refs)),
        ]

    def columns(self) -> Columns:
        named = self.header or not ({self.format_of(s) for s in SPLITS if self.has_file(s)} <= {"tsv", "csv"})
        src = self.src_col if self.src_col is not None else ("src" if named else 0)
        tgt = self.tgt_col if self.tgt_col is not None else ("tgt" if named else 1)
        return Columns(src, tgt, self.ref_cols, self.refs_col, self.features_col, self.group_col)

    def token_spec(self) -> TokenSpec:
        return TokenSpec(self.tokenizer, self.lang, self.moses_escape, self.jieba_hmm, self.lowercase, self.mask_digits)

    def schema(self) -> pa.Schema:
        """The shards' schema: the base columns, ``features`` (list<string>) with a features column,
        ``group`` (string) with a group column."""
        extra = [pa.field("features", pa.list_(pa.string()))] if self.features_col is not None else []
        if self.group_col is not None:
            extra.append(pa.field(GROUP, pa.string()))
        return make_schema(extra)

    def manifest_params(self) -> dict:
        """The settings as the manifest records them (the features settings only when there is a
        features column, ``group_col`` only when there is a group column: a corpus without them
        keeps the manifest it had before they existed)."""
        params = {**asdict(self), "tokenizer": self.token_spec().describe()}
        if self.features_col is None:
            del params["features_col"], params["features_sep"]
        if self.group_col is None:
            del params["group_col"]
        return params


# --------------------------------------------------------------------------- #
# Records -> rows (in workers)
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class ChunkSpec:
    """What a worker needs to turn raw records into rows (picklable)."""

    tokens: TokenSpec
    limits: TextLimits
    max_tokens: int
    split_seed: int
    features_sep: str | None = None  # None: no features column
    grouped: bool = False  # a group column: each row gets ``group``

    @classmethod
    def of(cls, cfg: Config) -> ChunkSpec:
        sep = cfg.features_sep if cfg.features_col is not None else None
        return cls(cfg.token_spec(), TextLimits.of(cfg), cfg.max_tokens, cfg.split_seed, sep, cfg.group_col is not None)


def split_features(text: str, sep: str = ";") -> list[str]:
    """A features cell -> its tags: split on ``sep``, each trimmed, empty ones dropped (raw input in
    serving and ``predict`` too)."""
    return [tag.strip() for tag in text.split(sep) if tag.strip()]


def split_bucket(src: list[str], seed: int) -> float:
    """The example's place in [0, 1) by a keyed hash of its tokenised source (stable across runs)."""
    digest = hashlib.blake2b("\x1f".join(src).encode("utf-8"), digest_size=8, key=str(seed).encode("ascii"))
    return int.from_bytes(digest.digest(), "big") / 2**64


def _role(i: int) -> str:
    return ROLES[i] if i < len(ROLES) else "ref"


def record_row(spec: ChunkSpec, record: RawRecord) -> tuple[dict | Quarantined, dict | None]:
    """One raw record -> ``(row, counts)`` or ``(Quarantined, None)``."""
    previews = {f"{_role(i)}{i - 1 if i > 1 else ''}": _preview(t) for i, t in enumerate(record.texts)}
    fields: list[list[str]] = []
    empty_refs = 0
    for i, raw in enumerate(record.texts):
        where, role = f"{record.names[i]}:{record.line}", _role(i)
        if isinstance(raw, bytes):
            try:
                raw = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                return Quarantined("invalid_utf8", where, {"byte_offset": err.start, **previews}), None
        text = raw or ""
        found = spec.limits.line_problem(text)
        tokens = spec.tokens.tokens(text) if found is None else []
        found = found or spec.limits.token_problem(tokens)
        if found is not None:
            return Quarantined(found[0], where, {**found[1], **previews}), None
        if not tokens:
            if role == "ref":
                empty_refs += 1
                continue
            return Quarantined(f"empty_{role}", where, previews), None
        if len(tokens) > spec.max_tokens:
            details = {"tokens": len(tokens), "max_tokens": spec.max_tokens, "head": " ".join(tokens[:50])}
            return Quarantined(f"{role}_too_long", where, details), None
        fields.append(tokens)
    src, refs = fields[0], fields[1:]
    row = {"id": f"{row_name(record.names[0])}:{record.line}", "src": src, "tgt": refs[0], "refs": refs}
    if spec.features_sep is not None:
        text = record.features or ""
        found = spec.limits.line_problem(text)
        tags = split_features(text, spec.features_sep) if found is None else []
        found = found or spec.limits.token_problem(tags)
        if found is not None:
            where = f"{record.names[0]}:{record.line}"
            return Quarantined(found[0], where, {**found[1], **previews, "features": _preview(text)}), None
        row["features"] = tags
    if spec.grouped:
        found = _group(spec, record, previews)
        if isinstance(found, Quarantined):
            return found, None
        row[GROUP] = found
    counts = pair_counts(src, refs)
    if empty_refs:
        counts["empty_refs"] = empty_refs
    return row, counts


def _group(spec: ChunkSpec, record: RawRecord, previews: dict) -> str | Quarantined:
    """A record's group: its group cell trimmed; an empty or missing one is ``empty_group``."""
    where, raw = f"{record.names[0]}:{record.line}", record.group
    if isinstance(raw, bytes):  # a binary Parquet / Arrow column
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            return Quarantined("invalid_utf8", where, {"byte_offset": err.start, **previews, "group": _preview(raw)})
    text = raw or ""
    found = spec.limits.line_problem(text)
    if found is not None:
        return Quarantined(found[0], where, {**found[1], **previews, "group": _preview(text)})
    if not text.strip():
        return Quarantined("empty_group", where, {**previews, "group": _preview(text)})
    return text.strip()


def _preview(text: str | bytes | None) -> str:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "backslashreplace")
    return (text or "")[:300].replace("\x00", "\\x00")


def rows_chunk(spec: ChunkSpec, chunk: list[RawRecord | Quarantined]) -> list[tuple]:
    """A chunk of records -> ``[(row or Quarantined, counts or None, bucket)]`` (runs in a worker);
    ``bucket`` places the row for a hash split (None for a quarantine)."""
    out = []
    for record in chunk:
        if isinstance(record, Quarantined):
            out.append((record, None, None))
            continue
        item, counts = record_row(spec, record)
        bucket = split_bucket(item["src"], spec.split_seed) if isinstance(item, dict) else None
        out.append((item, counts, bucket))
    return out


# --------------------------------------------------------------------------- #
# Splits
# --------------------------------------------------------------------------- #


def records(cfg: Config, split: str) -> Iterator[RawRecord | Quarantined]:
    """The raw records of a split's input file(s)."""
    files, fmt = cfg.files(split), cfg.format_of(split)
    if fmt == "text":
        return text_records(files)
    path, columns, limits = files[0], cfg.columns(), TextLimits.of(cfg)
    if fmt in ("tsv", "csv"):
        delimiter = cfg.delimiter or ("\t" if fmt == "tsv" else ",")
        read = tsv_records if fmt == "tsv" else csv_records
        return read(path, columns, cfg.header, delimiter, limits)
    if fmt == "jsonl":
        return jsonl_records(path, columns, limits)
    read = parquet_records if fmt == "parquet" else arrow_records
    return read(path, columns, cfg.chunk_size)


def _items(cfg: Config, split: str, map_chunks: Callable) -> Iterator[tuple]:
    spec = ChunkSpec.of(cfg)
    for result in map_chunks(functools.partial(rows_chunk, spec), chunked(records(cfg, split), cfg.chunk_size)):
        yield from result


def _count(stats: SplitStats, counts: dict | None) -> None:
    for key, n in (counts or {}).items():
        stats.add(key, n)


def file_stream(cfg: Config, split: str, stats: SplitStats, map_chunks: Callable) -> Iterator:
    """Rows and quarantines of a split with its own file(s)."""
    for item, counts, _ in _items(cfg, split, map_chunks):
        _count(stats, counts)
        yield item


def assign_split(cfg: Config, bucket: float | None) -> str:
    """The split of an example of the train file at hash ``bucket``: test below ``test_fraction``,
    then valid below ``test_fraction + valid_fraction``, else train (quarantines stay in train)."""
    if bucket is None:
        return "train"
    if bucket < cfg.test_fraction:
        return "test"
    return "valid" if bucket < cfg.test_fraction + cfg.valid_fraction else "train"


def spill_train_file(
    cfg: Config, scratch: Path, stats: dict[str, SplitStats], map_chunks: Callable, counts: Counter | None = None
) -> dict[str, Path]:
    """One pass over the train file: each chunk's items spilled to its split's scratch file (how many
    rows went to each split added to ``counts``, quarantined records under ``quarantined:<reason>``)."""
    counts = Counter() if counts is None else counts
    splits = ["train", *cfg.hashed()]
    paths = {s: scratch / f"{s}.pkl" for s in splits}
    handles = {s: open(p, "wb") for s, p in paths.items()}
    try:
        spec = ChunkSpec.of(cfg)
        chunks = chunked(records(cfg, "train"), cfg.chunk_size)
        for result in map_chunks(functools.partial(rows_chunk, spec), chunks):
            pairs = []
            for item, item_counts, bucket in result:
                split = assign_split(cfg, bucket)
                _count(stats[split], item_counts)
                counts[split if bucket is not None else f"quarantined:{item.reason}"] += 1
                pairs.append((split, item))
            spill_by_split(pairs, handles)
    finally:
        for handle in handles.values():
            handle.close()
    return paths


def spill_stream(path: Path) -> Iterator:
    for chunk in read_spill(path):
        yield from chunk


def write_splits(cfg: Config, out_root: Path, map_chunks=serial_map) -> dict[str, dict]:
    """Write ``out_root/<split>/`` for train, valid and (when configured) test; return the manifests."""
    out_root = Path(out_root)
    check_input_files(named for s in SPLITS if cfg.has_file(s) for named in cfg.named_files(s))
    splits = cfg.splits()
    stats = {s: SplitStats() for s in splits}
    sources = {s: [str(p) for p in cfg.files(s if cfg.has_file(s) else "train")] for s in splits}
    if not cfg.hashed():
        streams = {s: file_stream(cfg, s, stats[s], map_chunks) for s in splits}
        return write_corpus(out_root, streams, cfg.schema(), params=cfg.manifest_params(), stats=stats, sources=sources)
    with scratch_dir(scratch_parent(out_root), f".{out_root.name}.spill-") as scratch:  # a killed run's: removed here
        counts: Counter = Counter()
        spilled = spill_train_file(cfg, scratch, stats, map_chunks, counts)
        rows = {s: counts[s] for s in ["train", *cfg.hashed()]}
        if not sum(rows.values()):  # every record of the file quarantined: say so, not "no record reached valid"
            reasons = ", ".join(f"{k.split(':', 1)[1]} {n}" for k, n in sorted(counts.items()) if n)
            what = f"no split would have rows: every record of the train file was quarantined ({reasons or 'none'})"
            if reasons.startswith("invalid_utf8") and "," not in reasons:
                what += ": the file is not UTF-8 (Latin-1? convert it, e.g. iconv -f LATIN1 -t UTF-8)"
            raise EmptySplitError("train", sources["train"], what)
        empty = [s for s in cfg.hashed() if not rows[s]]
        if empty:
            raise EmptySplitError(empty[0], sources[empty[0]], _fraction_selected_none(cfg, empty[0], rows))
        streams = {
            s: spill_stream(spilled[s]) if s in spilled else file_stream(cfg, s, stats[s], map_chunks) for s in splits
        }
        return write_corpus(out_root, streams, cfg.schema(), params=cfg.manifest_params(), stats=stats, sources=sources)


def _fraction_selected_none(cfg: Config, split: str, counts: Counter) -> str:
    n, fraction = sum(counts.values()), getattr(cfg, f"{split}_fraction")
    return (
        f"the {split} split would have no rows: {split}_fraction {fraction} of the train file's {n} records selected "
        f"none (about {fraction * n:.2f} expected): raise {split}_fraction (tasks add --{split}-fraction) to at least "
        f"{min(0.5, 10 / n):.3g}, or give a {split} file"
    )


# --------------------------------------------------------------------------- #
# Raw text (serving, predict: pipeline.data.corpora.raw_input)
# --------------------------------------------------------------------------- #


def source_tokenizer(settings: dict, pretokenized: bool) -> Callable[[str], list[str]]:
    """Raw text -> source tokens exactly as :func:`write_splits` makes them (:class:`TokenSpec`: the
    tokeniser, then lowercase and digit masks). ``pretokenized``: a whitespace split, then the steps."""
    spec = TokenSpec.from_settings(settings)
    if pretokenized:
        return lambda text: spec.steps(text.split())
    return spec.tokens


def detokenize_join(settings: dict) -> str:
    """How output tokens join back into text: no space for ``chars`` and ``jieba`` (Chinese), else one."""
    return "" if TokenSpec.from_settings(settings).tokenizer in UNSPACED else " "
