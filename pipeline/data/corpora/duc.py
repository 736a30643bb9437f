"""DUC 2003 / DUC 2004 task 1 (very short, ~10-word / 75-byte summaries) as a headline test set.

Rush et al. (2015, section 7) tune on DUC 2003 and test on DUC 2004 task 1; Read-Again (Zeng et
al. 2016, section 4.2) reports DUC 2004 recall at 75 bytes. NIST layout::

    <docs_dir>/<cluster dir, e.g. d100a>/<DOCNO>            NIST SGML: <DOC><DOCNO><TEXT>[<P>]
    <models_dir>/<CLUSTER>.P.<size>.<A|T>.<assessor>.<DOCNO>[.html]   one reference summary each

``docs_dir`` and ``models_dir`` name the two folders; or ``release_dir`` names the folder where
NIST's archives were extracted, and the reader finds them there (:func:`locate`, the layouts of
``DOCS_LAYOUTS`` / ``MODELS_LAYOUTS``), e.g. for DUC 2004::

    <release_dir>/DUC2004_Summarization_Documents/duc2004_testdata/tasks1and2/duc2004_tasks1and2_docs/docs/d30001t/APW19981016.0240
    <release_dir>/duc2004_results/ROUGE/eval/models/1/D30001.P.10.T.A.APW19981016.0240
    (eval/ comes from duc2004_results/ROUGE/duc2004.task1.ROUGE.models.tar.gz, extracted where it is)

and for DUC 2003 ``DUC2003_Summarization_Documents/duc2003_testdata/task1/docs.without.headlines``
with ``detagged.duc2003.abstracts/models``; a folder of ``docs/`` and ``models/`` (copies or links)
works too. Neither found: ``FileNotFoundError`` naming every path looked for (and any archive
lying there unextracted); two candidates for the same folder: ``ValueError`` naming both.

A document's references are the model files of its cluster (``d100a`` -> ``D100``: the directory
name without its last letter, upper-cased, as Rush's ``make_DUC.py``) and its DOCNO (the file
name), sorted by file name (assessor order). A DOCNO in two clusters is two rows, each with its
cluster's references. Rows (one ``test`` split):

* ``id`` = ``<cluster dir>/<DOCNO>``;
* ``src`` = the lead sentence processed exactly as ``gigaword`` ``format: sgml`` (first sentence,
  dateline removed, PTB tokens, lowercase, digits ``#``), without rare-word replacement (there is
  no training split to count words on: the vocab stage decides what is unknown);
* ``refs`` = every reference tokenised like a Gigaword headline (PTB tokens, normalised, ``pull.py``'s
  punctuation dropped), ``tgt`` = ``refs[0]``;
* ``refs_raw`` = the reference texts exactly as written -- only a leading BOM and the line ends
  removed (lines kept apart by ``\n``, CRLF read as LF) -- for the official 75-byte ROUGE
  evaluation (``pipeline.metrics.registry.rouge_recall_75``), which truncates the raw text: NIST's DUC 2004
  model files begin with a space, and ROUGE-1.5.5 counts it in the 75 bytes (collapsing it made
  our recall +0.037 / +0.020 / +0.014 R-1/2/L too high on DUC 2004 with a lead baseline).

Bad input: a malformed SGML file -> ``CorpusFormatError`` (see ``ldc_sgml.iter_doc_blocks``); a
cluster directory whose name is not ``d<digits><letter>`` -> ``CorpusFormatError``; a truncated or
corrupt gzipped document or model file (``.gz``, read transparently; the DOCNO is the name without
it) -> ``CorpusFormatError`` naming it; no row at all (every document quarantined) ->
``EmptySplitError``. Quarantined: ``invalid_utf8`` (a document or one of its reference files does
not decode in ``encoding``), ``nul_byte`` / ``line_too_long`` / ``token_too_long`` (a line of the
document or of a reference with a NUL character, over ``max_line_chars`` characters or with a
token over ``max_token_chars``; ``where`` is that line), ``no_text``, ``src_too_long`` (over
``max_tokens``), ``no_references`` (no non-empty model file).
Kept and counted in the manifest ``stats``: ``docs_with_fewer_refs`` (fewer than ``expected_refs``
non-empty references; the row keeps those it has), ``empty_references`` (empty model files,
left out of ``refs``), ``models_without_doc`` (model files naming no document here),
``model_files_other`` (files in ``models_dir`` not of the per-document pattern and ``model_size``,
e.g. DUC's multi-document summaries), ``dateline_stripped``, ``src_tokens``, ``ref_tokens``,
``refs`` (reference count).
"""

from __future__ import annotations

import functools
import re
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import pyarrow as pa

from pipeline.config.validation import dataclass_from_dict
from pipeline.data.corpora.common import CorpusFormatError, Quarantined, SplitStats, write_corpus
from pipeline.data.corpora.gigaword import headline_tokens, lead_tokens, rush_tokenizer, title_tokens
from pipeline.data.corpora.inputs import MAX_LINE_CHARS, MAX_TOKEN_CHARS, TextLimits, read_input, row_name
from pipeline.data.corpora.ldc_sgml import DocBlock, check_block, iter_doc_blocks, parse_doc
from pipeline.io.parallel import chunked, serial_map
from pipeline.io.shards import make_schema

SCHEMA: pa.Schema = make_schema([pa.field("refs_raw", pa.list_(pa.string()))])

ZERO_STATS = (
    "docs_with_fewer_refs",
    "empty_references",
    "models_without_doc",
    "model_files_other",
    "dateline_stripped",
)
_CLUSTER_DIR = re.compile(r"d(\d+)[a-z]")
_MODEL = re.compile(
    r"(?P<cluster>D\d+)\.P\.(?P<size>\w+)\.(?P<sel>[A-Z])\.(?P<assessor>[A-Z])\.(?P<docno>.+?)(?:\.html)?(?:\.gz)?"
)


@dataclass(frozen=True)
class Config:
    """Where the DUC documents and the reference (model) summaries are."""

    docs_dir: str | None = None  # duc2003/docs.without.headlines (cluster directories of DOCNO files)
    models_dir: str | None = None  # duc2003/detagged.duc2003.abstracts/models
    release_dir: str | None = None  # where NIST's archives were extracted: docs/models found there (locate)
    model_size: str | None = "10"  # the <size> of per-document model names (P.10); None: any
    expected_refs: int = 4  # DUC task 1: 4 human summaries per document
    short_lead_chars: int = 0  # > 0: join a shorter lead with the next sentence (make_DUC.py: 130)
    max_tokens: int = 400  # longer leads are quarantined as absurd input
    max_line_chars: int = MAX_LINE_CHARS  # a longer document / reference line: line_too_long
    max_token_chars: int = MAX_TOKEN_CHARS  # a longer whitespace-separated token: token_too_long
    encoding: str = "utf-8"
    chunk_size: int = 500  # documents per map_chunks task

    @classmethod
    def from_dict(cls, d: dict) -> Config:
        return dataclass_from_dict(cls, d)

    def __post_init__(self) -> None:
        if min(self.expected_refs, self.max_tokens, self.chunk_size) < 1 or self.short_lead_chars < 0:
            raise ValueError("duc: expected_refs, max_tokens, chunk_size must be >= 1, short_lead_chars >= 0")
        TextLimits.of(self)
        if self.release_dir is None and (self.docs_dir is None or self.models_dir is None):
            raise ValueError("duc: set docs_dir and models_dir, or release_dir (the folder of NIST's release)")


# Where the documents and the task-1 reference summaries lie, relative to ``release_dir``: NIST's
# releases as extracted (DUC 2003, DUC 2004), or a folder of docs/ + models/ (copies or links).
DOCS_LAYOUTS = (
    "docs",
    "docs.without.headlines",  # DUC 2003 task 1 (also ../shared/data/duc2003_task1/duc2003)
    "DUC2004_Summarization_Documents/duc2004_testdata/tasks1and2/duc2004_tasks1and2_docs/docs",
    "duc2004_testdata/tasks1and2/duc2004_tasks1and2_docs/docs",
    "DUC2003_Summarization_Documents/duc2003_testdata/task1/docs.without.headlines",
    "duc2003_testdata/task1/docs.without.headlines",
)
MODELS_LAYOUTS = (
    "models",
    "detagged.duc2003.abstracts/models",  # DUC 2003 task 1 (detagged.duc2003.abstracts.tar.gz)
    "duc2004_results/ROUGE/eval/models/1",  # DUC 2004 task 1 (duc2004.task1.ROUGE.models.tar.gz in ROUGE/)
    "ROUGE/eval/models/1",
    "eval/models/1",
)
_ARCHIVES = ("*.tgz", "*.tar.gz", "*.tar")


def _find(release: Path, setting: str, layouts: tuple[str, ...]) -> Path:
    """The one layout of ``layouts`` present under ``release`` (FileNotFoundError / ValueError)."""
    found = [release / rel for rel in layouts if (release / rel).is_dir()]
    if len(found) > 1:
        raise ValueError(f"duc: {release} holds {' and '.join(map(str, found))}; set {setting} to the one to read")
    if found:
        return found[0]
    archives = sorted(
        str(p.relative_to(release))
        for folder in (release, release / "duc2004_results" / "ROUGE")
        if folder.is_dir()
        for pattern in _ARCHIVES
        for p in folder.glob(pattern)
    )
    hint = f"; archives lying there, not extracted: {', '.join(archives)}" if archives else ""
    looked = ", ".join(f"{release}/{rel}" for rel in layouts)
    raise FileNotFoundError(
        f"duc: no {setting} found under release_dir {release} (looked for {looked}){hint}; "
        f"extract NIST's archives there as released, or set {setting}"
    )


def locate(cfg: Config) -> tuple[Path, Path]:
    """``(docs_dir, models_dir)``: each as set, else found under ``release_dir`` (one of
    ``DOCS_LAYOUTS`` / ``MODELS_LAYOUTS``); FileNotFoundError naming what was looked for."""
    out = []
    for setting, layouts in (("docs_dir", DOCS_LAYOUTS), ("models_dir", MODELS_LAYOUTS)):
        given = getattr(cfg, setting)
        if given is not None:
            if not Path(given).is_dir():
                raise FileNotFoundError(f"duc {setting} {given} is not a directory")
            out.append(Path(given))
            continue
        release = Path(cfg.release_dir)
        if not release.is_dir():
            raise FileNotFoundError(f"duc release_dir {release} is not a directory")
        out.append(_find(release, setting, layouts))
    return out[0], out[1]


def index_models(models_dir: Path, model_size: str | None, stats: SplitStats) -> dict[tuple[str, str], list[Path]]:
    """Model files by (CLUSTER, DOCNO), each list sorted by file name."""
    index: dict[tuple[str, str], list[Path]] = defaultdict(list)
    for path in sorted(p for p in models_dir.iterdir() if p.is_file()):
        m = _MODEL.fullmatch(path.name)
        if not m or (model_size is not None and m.group("size") != model_size):
            stats.add("model_files_other")
            continue
        index[(m.group("cluster"), m.group("docno"))].append(path)
    return index


def doc_files(docs_dir: Path) -> Iterator[tuple[str, Path]]:
    """``(CLUSTER, path)`` of every document file, cluster directories and files in sorted order."""
    for cluster_dir in sorted(p for p in docs_dir.iterdir() if p.is_dir()):
        m = _CLUSTER_DIR.fullmatch(cluster_dir.name)
        if not m:
            raise CorpusFormatError(cluster_dir, None, "not a DUC cluster directory (d<digits><letter>, e.g. d100a)")
        for path in sorted(p for p in cluster_dir.iterdir() if p.is_file()):
            yield f"D{m.group(1)}", path


def _duc_chunk(
    cfg: Config, chunk: list[tuple[DocBlock, str, list[tuple[str, bytes]]]]
) -> list[tuple[dict | Quarantined, dict]]:
    """Rows for a chunk of (document, row id, [(model file name, raw bytes)]), with their counts."""
    return [_duc_row(cfg, block, row_id, models) for block, row_id, models in chunk]


def _duc_row(
    cfg: Config, block: DocBlock, row_id: str, models: list[tuple[str, bytes]]
) -> tuple[dict | Quarantined, dict]:
    where = f"{block.path}:{block.line}"
    limits = TextLimits.of(cfg)
    hostile = check_block(block, limits, cfg.encoding)
    if hostile is not None:
        return Quarantined(hostile.reason, hostile.where, {"id": row_id, **hostile.record}), {}
    try:
        doc = parse_doc(block, cfg.encoding)
    except UnicodeDecodeError as err:
        return Quarantined("invalid_utf8", where, {"id": row_id, "byte_offset": err.start}), {}
    refs_raw: list[str] = []
    counts = {"empty_references": 0}
    for name, data in models:
        try:
            text = reference_as_written(data, cfg.encoding)
        except UnicodeDecodeError as err:
            return Quarantined("invalid_utf8", name, {"id": row_id, "byte_offset": err.start}), {}
        hostile = limits.check_lines(text, name, 1)
        if hostile is not None:
            return Quarantined(hostile.reason, hostile.where, {"id": row_id, **hostile.record}), {}
        if text.strip():
            refs_raw.append(text)
        else:
            counts["empty_references"] += 1
    src, stripped = lead_tokens(doc.paragraphs, cfg.short_lead_chars)
    counts["dateline_stripped"] = int(stripped)
    brief = {"id": row_id, "lead": " ".join(src)[:300], "refs": refs_raw}
    if not src:
        return Quarantined("no_text", where, brief), counts
    if len(src) > cfg.max_tokens:
        return Quarantined("src_too_long", where, {**brief, "tokens": len(src)}), counts
    refs = [title_tokens(headline_tokens(r)) for r in refs_raw]
    kept = [(r, raw) for r, raw in zip(refs, refs_raw) if r]
    counts["empty_references"] += len(refs) - len(kept)
    if not kept:
        return Quarantined("no_references", where, brief), counts
    refs, refs_raw = [r for r, _ in kept], [raw for _, raw in kept]
    counts.update(
        docs_with_fewer_refs=int(len(refs) < cfg.expected_refs),
        src_tokens=len(src),
        ref_tokens=sum(map(len, refs)),
        refs=len(refs),
    )
    return {"id": row_id, "src": src, "tgt": refs[0], "refs": refs, "refs_raw": refs_raw}, counts


def reference_as_written(data: bytes, encoding: str = "utf-8") -> str:
    """A model file's text as ROUGE-1.5.5 reads it: decoded, a leading BOM and the line ends
    removed (CRLF or LF; lines joined by ``\n``, trailing blank lines dropped), nothing else --
    leading and inner spaces count in the 75-byte cut. ``UnicodeDecodeError`` if it does not decode."""
    text = data.decode(encoding).removeprefix("\ufeff")
    return "\n".join(line.removesuffix("\r") for line in text.split("\n")).rstrip("\n")


def _jobs(cfg: Config, index: dict, stats: SplitStats) -> Iterator[tuple[DocBlock, str, list[tuple[str, bytes]]]]:
    """Each document with its row id and its references' raw bytes; counts unmatched models."""
    used: set[tuple[str, str]] = set()
    for cluster, path in doc_files(Path(cfg.docs_dir)):
        docno = row_name(path.name)  # DOCNO, also for a gzipped document file
        key = (cluster, docno)
        used.add(key)
        models = [(str(p), read_input(p)) for p in index.get(key, [])]
        for block in iter_doc_blocks(path):
            yield block, f"{path.parent.name}/{docno}", models
    stats.add("models_without_doc", sum(len(v) for k, v in index.items() if k not in used))


def write_splits(cfg: Config, out_root: Path, map_chunks: Callable = serial_map) -> dict[str, dict]:
    """Write ``out_root/test/``; return ``{"test": manifest}``. The manifest's params name the
    folders read (found under ``release_dir`` when it is set: :func:`locate`)."""
    docs_dir, models_dir = locate(cfg)
    cfg = replace(cfg, docs_dir=str(docs_dir), models_dir=str(models_dir))
    stats = SplitStats()
    for key in ZERO_STATS:  # reported even when nothing was counted
        stats.add(key, 0)
    index = index_models(Path(cfg.models_dir), cfg.model_size, stats)

    def items() -> Iterator:
        fn = functools.partial(_duc_chunk, cfg)
        for result in map_chunks(fn, chunked(_jobs(cfg, index, stats), cfg.chunk_size)):
            for item, counts in result:
                for key, n in counts.items():
                    if n:
                        stats.add(key, n)
                yield item

    sources = {"test": [cfg.docs_dir, cfg.models_dir]}
    return write_corpus(
        Path(out_root), {"test": items()}, SCHEMA, params=asdict(cfg), stats={"test": stats}, sources=sources
    )


# --------------------------------------------------------------------------- #
# Raw text (serving, predict: pipeline.data.corpora.raw_input)
# --------------------------------------------------------------------------- #


def source_tokenizer(settings: dict, pretokenized: bool) -> Callable[[str], list[str]]:
    """Raw text -> source tokens: Gigaword's Rush tokens
    (:func:`pipeline.data.corpora.gigaword.rush_tokenizer`), a lead shorter than ``short_lead_chars``
    joined with the next sentence."""
    return rush_tokenizer(pretokenized, int(settings.get("short_lead_chars", 0) or 0))
