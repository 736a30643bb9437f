"""WikiSmall (PWKP) and WikiLarge in the DRESS release layout of Zhang & Lapata (2017).

WEAN (Ma et al. 2018, section 3.1) evaluates on PWKP "following the previous work (Zhang and
Lapata, 2017)": duplicates removed, 89,042 train / 205 valid / 100 test pairs, one reference each.
The DRESS release ships that split (and WikiLarge's 296,402 / 992 / 359) as line-aligned files::

    <data_dir>/<prefix>.ori.<split>.src   complex sentence (English Wikipedia), one a line
    <data_dir>/<prefix>.ori.<split>.dst   its simplification (Simple English Wikipedia), same line
    <data_dir>/<prefix>.<split>.src|dst   the same lines, named entities anonymised (PERSON@1 ...)

``prefix`` is ``PWKP_108016.tag.80.aner`` (WikiSmall) or ``wiki.full.aner`` (WikiLarge); ``split`` is
``train``/``valid``/``test``. Text is PTB-tokenised (``-LRB-``), cased; a ``.dst`` line may hold
several simple sentences (PWKP one-to-many alignments, joined by a space). ``variant: ori`` reads
the original text, ``variant: anon`` the anonymised one. For ``anon`` the per-line entity map
(``LOCATION@1 -> "Makran"``) is recovered by aligning each anonymised line with its ``.ori.``
twin (DRESS keeps that map only as a Torch ``.map.t7`` file, which needs a Lua-Torch reader);
it goes to the ``entities`` column, so predictions can be de-anonymised as DRESS does.

Every split named in ``splits`` must have its files: the public copies often lack the large
train files, so list what you have (``splits: [valid, test]``); a missing file is an error that
says so before anything is written. A file may be gzipped: ``<name>.gz`` is read where ``<name>``
is missing (row ids keep the name without ``.gz``).

Rows: ``id`` = ``<src file name>:<line>``, ``src``/``tgt`` = whitespace tokens, ``refs`` = ``[tgt]``,
``entities`` = list of ``{tag, text}`` (empty for ``ori``).

Bad input (the same rules serve the TurkCorpus, EW-SEW and PWKP readers, which import them):

* aligned files with different line counts: ``CorpusFormatError`` naming both files and the line;
  a truncated or corrupt ``.gz``: ``CorpusFormatError`` naming the file;
* a line that is not UTF-8: quarantined ``invalid_utf8`` (the other lines of the file still count);
* a NUL character, a line over ``max_line_chars`` characters, a whitespace-separated token over
  ``max_token_chars`` characters: quarantined ``nul_byte`` / ``line_too_long`` / ``token_too_long``
  (:class:`pipeline.data.corpora.inputs.TextLimits`);
* an empty (or all-whitespace) line: quarantined ``empty_<role>`` (``empty_src``, ``empty_tgt`` ...);
* a line over ``max_tokens`` tokens: quarantined ``<role>_too_long`` (a guard against absurd input,
  not a modelling length filter: the papers apply none);
* then ``write_corpus`` drops train rows that duplicate an earlier train pair (``duplicate_pair``)
  or whose source is an evaluation source (``src_in_valid`` / ``src_in_test``); a split left
  without rows (empty files, every line quarantined) is an ``EmptySplitError`` naming its files.

Manifest ``stats`` per split: ``src_tokens``, ``ref_tokens``, ``ref_tokens_in_src`` (target tokens a
copy mechanism can point at), ``refs_identical_to_src``, and for ``anon`` the entity-map counts
``entity_lines_aligned`` / ``entity_lines_unaligned`` / ``entity_conflicts`` / ``entities``. They
count the rows the reader hands to ``write_corpus``, i.e. before its ``duplicate_pair`` /
``src_in_*`` removals (which the manifest's ``quarantine_reasons`` count).

Per-line work (decoding, tokenising, entity alignment, counts) runs in module-level functions over
chunks of raw lines, through the injected ``map_chunks``; the files are streamed, never loaded.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from itertools import zip_longest
from pathlib import Path

import pyarrow as pa

from pipeline.config.validation import dataclass_from_dict
from pipeline.data.corpora.common import CorpusFormatError, Quarantined, SplitStats, write_corpus
from pipeline.data.corpora.inputs import (
    DEFAULT_LIMITS,
    MAX_LINE_CHARS,
    MAX_TOKEN_CHARS,
    TextLimits,
    open_input,
    resolve_input,
    row_name,
)
from pipeline.data.text.ptb import tokenize
from pipeline.io.parallel import chunked, serial_map
from pipeline.io.shards import make_schema

SPLIT_NAMES = ("train", "valid", "test")
VARIANTS = ("ori", "anon")
ENTITY_TAG = re.compile(r"[A-Z]+@\d+")  # DRESS's anonymisation tokens: PERSON@1, LOCATION@12 ...
MAX_ENTITY_TAGS = 24  # lines with more distinct tags are left unaligned (bounded regex work)

ENTITY_TYPE = pa.struct([("tag", pa.string()), ("text", pa.string())])
SCHEMA: pa.Schema = make_schema([pa.field("entities", pa.list_(ENTITY_TYPE))])


@dataclass(frozen=True)
class Config:
    """Where the DRESS-layout files are and which of them to read."""

    data_dir: str
    prefix: str = "PWKP_108016.tag.80.aner"  # WikiLarge: wiki.full.aner
    variant: str = "ori"  # ori: original text; anon: named entities anonymised
    splits: tuple[str, ...] = SPLIT_NAMES  # only those whose files exist (public copies lack train)
    max_tokens: int = 1000  # longer lines are quarantined as absurd input
    max_line_chars: int = MAX_LINE_CHARS  # a longer line: line_too_long
    max_token_chars: int = MAX_TOKEN_CHARS  # a longer whitespace-separated token: token_too_long
    lowercase: bool = False
    chunk_size: int = 5000  # lines per map_chunks task

    @classmethod
    def from_dict(cls, d: dict) -> Config:
        return dataclass_from_dict(cls, d)

    def __post_init__(self) -> None:
        object.__setattr__(self, "splits", tuple(self.splits))
        if self.variant not in VARIANTS:
            raise ValueError(f"dress variant must be one of {VARIANTS}, got {self.variant!r}")
        bad = [s for s in self.splits if s not in SPLIT_NAMES]
        if not self.splits or bad or len(set(self.splits)) != len(self.splits):
            raise ValueError(f"dress splits must be distinct names from {SPLIT_NAMES}, got {list(self.splits)}")
        if self.max_tokens < 1 or self.chunk_size < 1:
            raise ValueError("max_tokens and chunk_size must be >= 1")
        TextLimits.of(self)


# --------------------------------------------------------------------------- #
# Shared by the simplification readers: aligned lines, decoding, pair statistics
# --------------------------------------------------------------------------- #


def require_files(paths: Iterable[Path], hint: str = "") -> None:
    """FileNotFoundError naming every missing file (checked before anything is written; a file
    found gzipped, ``<name>.gz``, is there: :func:`pipeline.data.corpora.inputs.resolve_input`)."""
    missing = [str(p) for p in paths if not resolve_input(p).is_file()]
    if missing:
        raise FileNotFoundError(f"missing input file(s): {', '.join(missing)}" + (f"; {hint}" if hint else ""))


def iter_aligned(paths: Sequence[Path]) -> Iterator[tuple[int, list[bytes]]]:
    """``(line number, [raw line of each file])`` over line-aligned files, newline stripped.

    Files are read as bytes (decoding is per line, so one bad line is quarantined, not fatal), through
    :func:`pipeline.data.corpora.inputs.open_input` (gzip too); a last line without its newline counts.
    Different line counts raise ``CorpusFormatError`` at the first line one file lacks, naming both
    files.
    """
    paths = [resolve_input(p) for p in paths]
    handles = []
    try:
        for p in paths:
            handles.append(open_input(p))
        for number, lines in enumerate(zip_longest(*handles), start=1):
            if any(line is None for line in lines):
                longer = next(p for p, line in zip(paths, lines) if line is not None)
                shorter = next(p for p, line in zip(paths, lines) if line is None)
                raise CorpusFormatError(
                    longer,
                    number,
                    f"line-aligned files differ in length: {Path(shorter).name} ends after "
                    f"{number - 1} lines (files {longer} and {shorter})",
                )
            if number == 1:
                lines = tuple(line.removeprefix(b"\xef\xbb\xbf") for line in lines)  # UTF-8 BOM
            yield number, [line.rstrip(b"\r\n") for line in lines]
    finally:
        for h in handles:
            h.close()


def preview(raw: Sequence[bytes], names: Sequence[str]) -> dict[str, str]:
    """A JSON-able, bounded view of a raw record for the quarantine."""
    return {name: data.decode("utf-8", "backslashreplace")[:300] for name, data in zip(names, raw)}


def decode_fields(
    raw: Sequence[bytes],
    names: Sequence[str],
    roles: Sequence[str],
    line: int,
    max_tokens: int,
    lowercase: bool,
    limits: TextLimits | None,
) -> list[list[str]] | Quarantined:
    """Decode and whitespace-tokenise the aligned fields of one record, or say why not.

    ``names[i]`` is the file field ``i`` came from (for ``file:line``), ``roles[i]`` its role in
    quarantine reasons (``src``, ``tgt``, ``ref`` ...). ``limits``: see :func:`tokenise_fields`.
    """
    texts: list[str] = []
    for data, name in zip(raw, names):
        try:
            texts.append(data.decode("utf-8"))
        except UnicodeDecodeError as err:
            return Quarantined("invalid_utf8", f"{name}:{line}", {"byte_offset": err.start, **preview(raw, names)})
    return tokenise_fields(texts, names, roles, line, max_tokens, lowercase, limits)


def tokenise_fields(
    texts: Sequence[str],
    names: Sequence[str],
    roles: Sequence[str],
    line: int,
    max_tokens: int,
    lowercase: bool,
    limits: TextLimits | None,
) -> list[list[str]] | Quarantined:
    """Whitespace tokens of each field (every corpus read here is tokenised already), or why not:
    per field, in order, ``limits``' rules (NUL, line and token length; None: checked by the
    caller), empty, over ``max_tokens`` tokens."""
    keys = names if len(set(names)) == len(names) else roles  # e.g. src/tgt of one TSV line
    fields: list[list[str]] = []
    for text, name, role in zip(texts, names, roles):
        found = limits.problem(text) if limits is not None else None
        if found is not None:
            reason, details = found
            return Quarantined(reason, f"{name}:{line}", {**details, **{k: t[:300] for k, t in zip(keys, texts)}})
        tokens = (text.lower() if lowercase else text).split()
        if not tokens:
            return Quarantined(f"empty_{role}", f"{name}:{line}", {k: t[:300] for k, t in zip(keys, texts)})
        if len(tokens) > max_tokens:
            return Quarantined(
                f"{role}_too_long", f"{name}:{line}", {"tokens": len(tokens), "head": " ".join(tokens[:50])}
            )
        fields.append(tokens)
    return fields


def pair_counts(src: Sequence[str], refs: Sequence[Sequence[str]]) -> dict[str, int]:
    """Per-row manifest counters: token totals and how many reference tokens occur in the source."""
    source = set(src)
    return {
        "src_tokens": len(src),
        "ref_tokens": sum(len(r) for r in refs),
        "ref_tokens_in_src": sum(t in source for r in refs for t in r),
        "refs_identical_to_src": sum(list(r) == list(src) for r in refs),
    }


ChunkResult = list  # [(row or Quarantined, its counts dict or None)], in input order


def stream_items(map_chunks: Callable, fn: Callable, chunks: Iterable, stats: SplitStats) -> Iterator:
    """Run ``fn`` over ``chunks`` through ``map_chunks``; yield items, adding their counts to ``stats``."""
    for result in map_chunks(fn, chunks):
        for item, counts in result:
            for key, n in (counts or {}).items():
                stats.add(key, n)
            yield item


# --------------------------------------------------------------------------- #
# Entity maps for the anonymised variant
# --------------------------------------------------------------------------- #


def align_entities(anon: Sequence[Sequence[str]], ori: Sequence[Sequence[str]]) -> dict[str, str] | None:
    """``{tag: original text}`` such that substituting it into every ``anon`` line gives its ``ori``.

    Each tag stands for one or more whole tokens, and the same tag for the same text on every
    line given (a pair's source and target share one map in DRESS), which resolves adjacent tags
    (``the ORGANIZATION@2 NUMBER@3``) that one line alone leaves ambiguous. Implemented as one
    regular expression over the lines (space-joined tokens, lines joined by newlines): a tag is a
    lazy group, its later uses back-references. None if no map exists.
    """
    groups: dict[str, str] = {}
    lines: list[str] = []
    for tokens in anon:
        parts: list[str] = []
        for token in tokens:
            if not ENTITY_TAG.fullmatch(token):
                parts.append(re.escape(token))
            elif token in groups:
                parts.append(f"(?P={groups[token]})")
            else:
                groups[token] = f"g{len(groups)}"
                parts.append(f"(?P<{groups[token]}>[^\\n]+?)")
        lines.append(" ".join(parts))
    if len(groups) > MAX_ENTITY_TAGS:
        return None
    match = re.fullmatch("\\n".join(lines), "\n".join(" ".join(t) for t in ori))
    if match is None:
        return None
    return {tag: match.group(name) for tag, name in groups.items()}


def entity_list(
    anon_src: list[str], ori_src: list[str], anon_tgt: list[str], ori_tgt: list[str]
) -> tuple[list[dict], dict[str, int]]:
    """The pair's entity map as ``[{tag, text}]`` (in order of first use) and its counters.

    Source and target are aligned jointly; if no single map fits both, each side is aligned
    alone, the source's reading wins, and the disagreeing tags are counted as conflicts.
    """
    joint = align_entities([anon_src, anon_tgt], [ori_src, ori_tgt])
    conflicts = 0
    if joint is None:
        src_map = align_entities([anon_src], [ori_src])
        tgt_map = align_entities([anon_tgt], [ori_tgt])
        if src_map is None or tgt_map is None:
            return [], {"entity_lines_unaligned": 1}
        joint = dict(src_map)
        for tag, text in tgt_map.items():
            conflicts += joint.setdefault(tag, text) != text
    entities = [{"tag": t, "text": x} for t, x in joint.items()]
    return entities, {"entity_lines_aligned": 1, "entity_conflicts": conflicts, "entities": len(entities)}


# --------------------------------------------------------------------------- #
# The DRESS reader
# --------------------------------------------------------------------------- #


def split_paths(cfg: Config, split: str, variant: str | None = None) -> tuple[Path, Path]:
    """The ``.src``/``.dst`` pair of ``split`` in ``variant`` (default: the configured one)."""
    variant = variant or cfg.variant
    stem = f"{cfg.prefix}.ori.{split}" if variant == "ori" else f"{cfg.prefix}.{split}"
    base = Path(cfg.data_dir)
    return resolve_input(base / f"{stem}.src"), resolve_input(base / f"{stem}.dst")


@dataclass(frozen=True)
class ChunkSpec:
    """What the worker needs to turn a chunk of raw lines into rows (picklable)."""

    names: tuple[str, ...]  # src, dst[, ori src, ori dst] file names
    max_tokens: int
    lowercase: bool
    entity_map_unavailable: bool = False  # anon variant without its .ori. twin files
    limits: TextLimits = DEFAULT_LIMITS


def parse_dress_chunk(spec: ChunkSpec, chunk: list[tuple[int, list[bytes]]]) -> ChunkResult:
    """Raw aligned lines -> ``[(row or Quarantined, counts)]`` (runs in a worker)."""
    with_entities = len(spec.names) == 4
    roles = ("src", "tgt", "ori_src", "ori_tgt")[: len(spec.names)]
    out: ChunkResult = []
    for line, raw in chunk:
        fields = decode_fields(raw, spec.names, roles, line, spec.max_tokens, spec.lowercase, spec.limits)
        if isinstance(fields, Quarantined):
            out.append((fields, None))
            continue
        src, tgt = fields[0], fields[1]
        counts = pair_counts(src, [tgt])
        entities: list[dict] = []
        if with_entities:
            entities, entity_counts = entity_list(src, fields[2], tgt, fields[3])
            counts.update(entity_counts)
        elif spec.entity_map_unavailable:
            counts["entity_map_unavailable"] = 1
        row = {"id": f"{row_name(spec.names[0])}:{line}", "src": src, "tgt": tgt, "refs": [tgt], "entities": entities}
        out.append((row, counts))
    return out


def _split_stream(cfg: Config, split: str, stats: SplitStats, map_chunks: Callable) -> Iterator:
    paths = list(split_paths(cfg, split))
    twins = split_paths(cfg, split, "ori")
    no_twin = cfg.variant == "anon" and not all(p.is_file() for p in twins)
    if cfg.variant == "anon" and not no_twin:
        paths.extend(twins)  # aligned with the anonymised lines to recover the entity map
    spec = ChunkSpec(tuple(p.name for p in paths), cfg.max_tokens, cfg.lowercase, no_twin, TextLimits.of(cfg))
    chunks = chunked(iter_aligned(paths), cfg.chunk_size)
    yield from stream_items(map_chunks, functools.partial(parse_dress_chunk, spec), chunks, stats)


def write_splits(cfg: Config, out_root: Path, map_chunks=serial_map) -> dict[str, dict]:
    """Write ``out_root/<split>/`` for every configured split; return the manifests by split."""
    require_files(
        [p for split in cfg.splits for p in split_paths(cfg, split)],
        hint="public copies of the DRESS data often lack the train files: set `splits:` to the "
        "splits you have, e.g. [valid, test]",
    )
    stats = {split: SplitStats() for split in cfg.splits}
    streams = {split: _split_stream(cfg, split, stats[split], map_chunks) for split in cfg.splits}
    sources = {split: [str(p) for p in split_paths(cfg, split)] for split in cfg.splits}
    return write_corpus(out_root, streams, SCHEMA, params=asdict(cfg), stats=stats, sources=sources)


# --------------------------------------------------------------------------- #
# Raw text (serving, predict: pipeline.data.corpora.raw_input)
# --------------------------------------------------------------------------- #


def ptb_tokenizer(pretokenized: bool, lowercase: bool) -> Callable[[str], list[str]]:
    """Raw text -> the tokens of a PTB-tokenised, cased release (DRESS, PWKP): PTB tokens
    (:func:`pipeline.data.text.ptb.tokenize`; ``pretokenized``: a whitespace split), lowercased when the
    reader lowercases."""

    def run(text: str) -> list[str]:
        tokens = text.split() if pretokenized else tokenize(text)
        return [t.lower() for t in tokens] if lowercase else tokens

    return run


def source_tokenizer(settings: dict, pretokenized: bool) -> Callable[[str], list[str]]:
    """Raw text -> source tokens: :func:`ptb_tokenizer` with the reader's ``lowercase``."""
    return ptb_tokenizer(pretokenized, bool(settings.get("lowercase", False)))
