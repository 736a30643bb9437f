"""Gigaword pointer data for the Pointer Softmax (Gulcehre et al. 2016, section 5.2).

Two datasets, chosen by ``mode`` (annotation rules: :mod:`pipeline.data.text.pointers`):

``mode: unk`` -- "UNK-pointers data": a word seen fewer than ``unk_min_count`` (paper: 5) times in
the train sources (train targets) is ``<unk>`` on the source (target) side, and every target
``<unk>`` whose original word occurs in the source points at its first occurrence.

``mode: entity`` -- "entity-pointers data": named-entity tokens anonymised as ``@entity<n>`` (ids per
pair, source then target, left to right, token level), and every target entity token whose id
occurs in the source points at its first occurrence. Tags come from the cased text
(:mod:`pipeline.data.text.entities`): a spaCy tagger (``ner_model``) for raw SGML, or the input's own
``word/LABEL`` tags. Rare words stay words here (the paper says nothing of a vocabulary cut for
this dataset): the vocabulary stage's ``min_count`` / ``max_size`` make the shortlist, as for
every corpus. Placeholders are never rare-word-replaced.

The pairs are Rush et al.'s (first sentence, headline), built by :mod:`pipeline.data.corpora.gigaword`
with every one of its settings (this ``Config`` extends its ``Config``): its document rules,
``filter.py`` filters, splits and bad-input handling apply unchanged, and its quarantine reasons
(``non_story``, ``no_period``, ``bad_headline_word``, ``src_length``, ``tgt_length``, ``no_overlap``,
``no_headline``, ``invalid_utf8``, ``nul_byte``, ``line_too_long``, ``token_too_long``,
``empty_src`` ...), its limits (``max_tokens``, ``max_line_chars``, ``max_token_chars``), its
gzip input, its empty-split errors and stats (``docs``, ``filtered_<rule>``,
``dateline_stripped``) carry over. By format:

``format: sgml`` (raw LDC Gigaword, cased; the paper's source) -- both modes.
    unk: :func:`pipeline.data.corpora.gigaword.write_splits` writes the pairs with *every* word kept
    (``unk_min_count: 1``) to a private staging directory; the train counts are taken from the
    staged train split (after its duplicate removal; Rush counted his filtered train file with its
    duplicates, a negligible difference); each staged row is then UNK-replaced and annotated, its
    original words kept in ``src_orig`` / ``tgt_orig``; staged quarantines are carried over as
    they are.
    entity: one pass over the documents through ``map_chunks``: the same per-document rules
    (:func:`pipeline.data.corpora.gigaword.process_doc`), then the lead and the headline are
    re-tokenised *cased* (checked to normalise to exactly the pair's tokens), an all-caps
    headline is recased from the document body (``recase_caps_headlines``, see
    :mod:`pipeline.data.text.entities`; stat ``headlines_recased``), the chunk's sentences are tagged in
    one batch, and the pair is anonymised. Rows are spilled per split to a private scratch file
    (``write_corpus`` writes evaluation splits first).

``format: rush`` (the released ``*.article.txt`` / ``*.title.txt``; lowercased, digits ``#``, words
rarer than 5 already ``<unk>``/``UNK``)
    unk: what can be built is limited. The words Rush replaced are lost, so their ``<unk>``s never
    point (``UNK_MARKERS``); the threshold is re-applied to the *given* train files. On the full
    release this changes nothing (Rush already applied the same threshold: about 0 pointers per
    100); on a subset (such as ../shared/data's 1,000-pair slice) or with a higher
    ``unk_min_count`` it yields pointers for the words that the cut removes. The paper's dataset
    needs the raw text: use ``format: sgml``.
    entity: the plain release has neither case nor tags, and tagging lowercased text is not
    reliable, so it cannot be built from it. This mode reads *tagged* Rush-format files instead:
    the same line-aligned layout with every token written ``word/LABEL`` (Stanford NER
    ``slashTags``, cased), i.e. what the paper's "small modifications to the script to extract
    ... system-generated named-entity tags" produce. Tokens are normalised (lowercase, digits
    ``#``) after their labels are read. A first line that is not ``word/LABEL`` is a
    ``CorpusFormatError`` (a plain Rush file given by mistake); a later malformed line is
    quarantined ``bad_tags``. Line-level rules as in ``gigaword``: ``invalid_utf8``, ``nul_byte``,
    ``line_too_long`` / ``token_too_long`` (``max_line_chars`` / ``max_token_chars``), ``empty_src`` /
    ``empty_tgt``, ``src_too_long`` / ``tgt_too_long`` (over ``max_tokens``), different line
    counts -> ``CorpusFormatError``.

Entity-mode record rule (both formats): ``placeholder_collision``, an input token that already
reads ``@entity<n>`` -- a guard only: PTB tokenisation splits ``@`` off and the normalisation
masks digits (``@entity1`` -> ``@entity#``), so Gigaword input cannot produce one.

Rows: ``id`` (document id for sgml, ``<file>:<line>`` for rush), ``src`` / ``tgt`` the model-side
tokens (UNK-replaced or anonymised), ``refs = [tgt]``, ``tgt_pointer`` (list<int32>: source position
or -1), ``tgt_switch`` (list<bool>: True = pointed), ``src_orig`` / ``tgt_orig`` (the normalised
words before UNK replacement or anonymisation: what an evaluation against the real headline,
or de-anonymisation, needs). ``write_corpus`` then removes, from train, duplicate (src, tgt) pairs
and pairs whose source is an evaluation source -- judged on the model-side tokens, so pairs that
differ only in rare words or entity names count as duplicates.

Manifest ``stats`` per split (beyond the carried ones): ``examples``, ``tgt_tokens``, ``pointers``,
``examples_with_pointer``, ``tgt_unk``, ``pointers_per_100_examples`` (the paper's figure: UNK 2.7
train / 9.1 valid, entities 161 / 139), counted over the pairs offered to the writer (for train:
before its duplicate removal, as the paper's figure is over Rush's train file); unk: ``src_unk``
and, on train, ``src_vocab`` / ``tgt_vocab``; entity: ``src_entity_tokens``,
``tgt_entity_tokens``, ``entity_ids`` (distinct ids, summed over pairs), ``headlines_recased``.
"""

from __future__ import annotations

import functools
import json
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.config.validation import dataclass_from_dict
from pipeline.data.corpora import gigaword
from pipeline.data.corpora.common import (
    CorpusFormatError,
    Quarantined,
    SplitStats,
    read_spill,
    spill_by_split,
    write_corpus,
)
from pipeline.data.corpora.dress import decode_fields, iter_aligned, require_files
from pipeline.data.corpora.inputs import TextLimits, row_name
from pipeline.data.corpora.ldc_sgml import Doc, DocBlock, check_block, parse_doc
from pipeline.data.text.entities import (
    DEFAULT_SPACY_MODEL,
    NAMED_ENTITY_LABELS,
    SpacyTagger,
    TagFormatError,
    Tagger,
    check_labels,
    entity_mask,
    is_all_caps,
    parse_slash_tokens,
    truecase_from_text,
)
from pipeline.data.text.normalize import rush_normalize
from pipeline.data.text.pointers import (
    UNK,
    PlaceholderCollision,
    PointerAnnotation,
    PointerCounter,
    entity_pointers,
    is_placeholder,
    unk_pointers,
)
from pipeline.data.text.ptb import tokenize
from pipeline.io.parallel import chunked, serial_map
from pipeline.io.shards import QUARANTINE_NAME, make_schema, read_split, scratch_parent

MODES = ("unk", "entity")
SPLIT_NAMES = gigaword.SPLIT_NAMES
READ_BATCH = 10_000  # staged rows annotated per Arrow batch

SCHEMA: pa.Schema = make_schema(
    [
        pa.field("tgt_pointer", pa.list_(pa.int32())),
        pa.field("tgt_switch", pa.list_(pa.bool_())),
        pa.field("src_orig", pa.list_(pa.string())),
        pa.field("tgt_orig", pa.list_(pa.string())),
    ]
)
# Staged stats that this reader recomputes on the annotated rows (not carried over).
_RECOMPUTED = frozenset({"src_tokens", "tgt_tokens", "src_unk", "tgt_unk", "src_vocab", "tgt_vocab"})


@dataclass(frozen=True)
class Config(gigaword.Config):
    """``gigaword.Config`` (inputs, Rush rules, splits) plus the pointer settings."""

    format: str = "sgml"  # sgml: raw LDC SGML (the paper's source); rush: released/tagged files
    mode: str = "unk"  # unk: UNK-pointers data; entity: entity-pointers data (section 5.2)
    entity_labels: tuple[str, ...] = tuple(sorted(NAMED_ENTITY_LABELS))  # labels that are entities
    ner_model: str = DEFAULT_SPACY_MODEL  # spaCy pipeline (package name or path), sgml + entity
    recase_caps_headlines: bool = True  # recase all-caps headlines from the body before tagging

    @classmethod
    def from_dict(cls, d: dict) -> Config:
        return dataclass_from_dict(cls, d)

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "entity_labels", tuple(self.entity_labels))
        if self.mode not in MODES:
            raise ValueError(f"gigaword_pointers mode must be one of {MODES}, got {self.mode!r}")
        if self.mode == "unk" and self.format == "rush" and self.train_src_file is None:
            raise ValueError("gigaword_pointers mode unk needs train files: the vocabulary is counted on train")
        if self.mode == "entity" and not self.entity_labels:
            raise ValueError("gigaword_pointers entity_labels is empty: nothing would be an entity")

    def gigaword_config(self, **overrides) -> gigaword.Config:
        """The plain ``gigaword.Config`` holding this config's shared settings."""
        shared = {f.name: getattr(self, f.name) for f in fields(gigaword.Config)}
        return gigaword.Config(**{**shared, **overrides})


def _params(cfg: Config) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(cfg).items()}


def _row(row_id: str, src_orig: list[str], tgt_orig: list[str], ann: PointerAnnotation) -> dict:
    return {
        "id": row_id,
        "src": ann.src,
        "tgt": ann.tgt,
        "refs": [ann.tgt],
        "tgt_pointer": ann.tgt_pointer,
        "tgt_switch": ann.tgt_switch,
        "src_orig": src_orig,
        "tgt_orig": tgt_orig,
    }


def _finish(stats: SplitStats, counter: PointerCounter) -> None:
    for key, value in counter.as_stats().items():
        stats.counts[key] = value


# --------------------------------------------------------------------------- #
# mode: unk (both formats) -- stage with gigaword, then annotate
# --------------------------------------------------------------------------- #


def kept_words(split_dir: Path, column: str, min_count: int) -> set[str]:
    """Words of ``column`` (a list<string> column) seen at least ``min_count`` times in a split.

    Counted by Arrow (flatten + value_counts) over the memory-mapped shards: no Python loop.
    """
    counts = pc.value_counts(pc.list_flatten(read_split(split_dir)[column]))
    words, n = counts.field("values"), counts.field("counts")
    return set(pc.filter(words, pc.greater_equal(n, min_count)).to_pylist())


def requarantine(split_dir: Path) -> Iterator[Quarantined]:
    """A staged split's quarantine lines, back as ``Quarantined`` (reason, where, record kept)."""
    with open(split_dir / QUARANTINE_NAME, encoding="utf-8") as fh:
        for line in fh:
            entry = json.loads(line)
            record = entry["record"]
            yield Quarantined(entry["reason"], record["where"], record["record"])


def _unk_items(
    split_dir: Path, manifest: dict, src_vocab: set[str], tgt_vocab: set[str], stats: SplitStats
) -> Iterator[dict | Quarantined]:
    for key, value in manifest.get("stats", {}).items():
        if key not in _RECOMPUTED:
            stats.add(key, value)
    yield from requarantine(split_dir)
    counter = PointerCounter()
    for batch in read_split(split_dir).to_batches(max_chunksize=READ_BATCH):
        for rec in batch.to_pylist():
            ann = unk_pointers(rec["src"], rec["tgt"], src_vocab, tgt_vocab, UNK)
            counter.add(ann)
            stats.add("src_unk", ann.src.count(UNK))
            yield _row(rec["id"], rec["src"], rec["tgt"], ann)
    _finish(stats, counter)


def _write_unk(cfg: Config, out_root: Path, map_chunks: Callable) -> dict[str, dict]:
    out_root.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out_root.name}.stage-", dir=scratch_parent(out_root)))
    try:
        staged = gigaword.write_splits(cfg.gigaword_config(unk_min_count=1), stage, map_chunks)
        if "train" not in staged:
            raise ValueError("gigaword_pointers mode unk: no train split to count the vocabulary on")
        min_count = max(cfg.unk_min_count, 1)
        src_vocab = kept_words(stage / "train", "src", min_count)
        tgt_vocab = kept_words(stage / "train", "tgt", min_count)
        stats = {s: SplitStats() for s in staged}
        stats["train"].add("src_vocab", len(src_vocab))
        stats["train"].add("tgt_vocab", len(tgt_vocab))
        splits = {s: _unk_items(stage / s, m, src_vocab, tgt_vocab, stats[s]) for s, m in staged.items()}
        return write_corpus(out_root, splits, SCHEMA, params=_params(cfg), stats=stats, **_split_rules(cfg))
    finally:
        shutil.rmtree(stage, ignore_errors=True)


# --------------------------------------------------------------------------- #
# mode: entity, format: sgml -- tag the cased text
# --------------------------------------------------------------------------- #


@dataclass
class _EntityChunk:
    """One chunk's (split, row or Quarantined) items in input order, and its counts by split."""

    items: list[tuple[str, dict | Quarantined | None]] = field(default_factory=list)
    stats: dict[str, Counter] = field(default_factory=dict)


def cased_pair(doc: Doc, src: Sequence[str], tgt: Sequence[str]) -> tuple[list[str], list[str]]:
    """The cased PTB tokens behind a pair that ``gigaword.process_doc`` made from ``doc``.

    Repeats its steps without normalising (lead: ``split_lead`` + ``strip_dateline``; headline:
    its tokens minus ``TITLE_PUNCT``) and checks they normalise to exactly ``src`` / ``tgt``.
    """
    lead, _ = gigaword.strip_dateline(gigaword.split_lead(doc.paragraphs)[0])
    src_cased = tokenize(lead)
    tgt_cased = [t for t in tokenize(doc.headline or "") if rush_normalize([t])[0] not in gigaword.TITLE_PUNCT]
    if rush_normalize(src_cased) != list(src) or rush_normalize(tgt_cased) != list(tgt):
        raise RuntimeError(f"{doc.path}:{doc.line}: cased tokens out of step with gigaword.process_doc")
    return src_cased, tgt_cased


def _entity_row(
    row_id: str,
    where: str,
    src: list[str],
    src_labels: list[str],
    tgt: list[str],
    tgt_labels: list[str],
    labels: Sequence[str],
    counts: Counter,
) -> dict | Quarantined:
    """Anonymise and annotate one normalised pair from its tokens' labels."""
    src_mask, tgt_mask = entity_mask(src_labels, labels), entity_mask(tgt_labels, labels)
    try:
        ann = entity_pointers(src, src_mask, tgt, tgt_mask)
    except PlaceholderCollision as err:
        return Quarantined(
            "placeholder_collision", where, {"src": " ".join(src), "tgt": " ".join(tgt), "error": str(err)}
        )
    counts["src_entity_tokens"] += sum(src_mask)
    counts["tgt_entity_tokens"] += sum(tgt_mask)
    counts["entity_ids"] += len({t for t in ann.src + ann.tgt if is_placeholder(t)})
    return _row(row_id, src, tgt, ann)


def _sgml_entity_chunk(cfg: Config, tagger: Tagger, chunk: list[tuple[DocBlock, str | None]]) -> _EntityChunk:
    """Pass over a chunk of documents (runs in a worker): gigaword's rules, then tag and anonymise."""
    out = _EntityChunk()
    limits = TextLimits.of(cfg)
    pending = []  # (index in out.items, split, doc id, where, src, tgt, src_cased, tgt_cased)
    for block, forced in chunk:
        where = f"{block.path}:{block.line}"
        hostile = check_block(block, limits, cfg.encoding)
        if hostile is not None:
            split = forced or gigaword.hash_split(where, cfg.valid_fraction, cfg.test_fraction)
            out.items.append((split, hostile))
            out.stats.setdefault(split, Counter())["docs"] += 1
            continue
        try:
            doc = parse_doc(block, cfg.encoding)
        except UnicodeDecodeError as err:
            split = forced or gigaword.hash_split(where, cfg.valid_fraction, cfg.test_fraction)
            head = block.raw[:300].decode(cfg.encoding, "backslashreplace")
            out.items.append((split, Quarantined("invalid_utf8", where, {"byte_offset": err.start, "head": head})))
            out.stats.setdefault(split, Counter())["docs"] += 1
            continue
        split = forced or gigaword.hash_split(doc.doc_id or where, cfg.valid_fraction, cfg.test_fraction)
        item, keys = gigaword.process_doc(doc, split, cfg)
        counts = out.stats.setdefault(split, Counter())
        counts["docs"] += 1
        counts.update(keys)
        if isinstance(item, Quarantined):
            out.items.append((split, item))
            continue
        doc_id, src, tgt = item
        src_cased, tgt_cased = cased_pair(doc, src, tgt)
        if cfg.recase_caps_headlines and is_all_caps(tgt_cased):
            tgt_cased = truecase_from_text(tgt_cased, " ".join(doc.paragraphs))
            counts["headlines_recased"] += 1
        pending.append((len(out.items), split, doc_id, where, src, tgt, src_cased, tgt_cased))
        out.items.append((split, None))  # filled once the chunk is tagged
    sentences = [p[6] for p in pending] + [p[7] for p in pending]
    labels = tagger(sentences)
    check_labels(sentences, labels)
    for k, (index, split, doc_id, where, src, tgt, _, _) in enumerate(pending):
        row = _entity_row(
            doc_id, where, src, labels[k], tgt, labels[len(pending) + k], cfg.entity_labels, out.stats[split]
        )
        out.items[index] = (split, row)
    return out


def _spill(results: Iterable[_EntityChunk], spill_dir: Path) -> dict[str, Counter]:
    """Write each chunk's items to ``<split>.pkl`` (one pickle per chunk); return the counts.

    A private scratch file read back by this process only: pickle keeps rows and ``Quarantined``
    records together, in order (as ``gigaword`` does).
    """
    totals = {s: Counter() for s in SPLIT_NAMES}
    handles = {s: open(spill_dir / f"{s}.pkl", "wb") for s in SPLIT_NAMES}
    try:
        for result in results:
            spill_by_split(result.items, handles)
            for split, counts in result.stats.items():
                totals[split].update(counts)
    finally:
        for fh in handles.values():
            fh.close()
    return totals


def _read_spill(path: Path, stats: SplitStats) -> Iterator[dict | Quarantined]:
    counter = PointerCounter()
    for items in read_spill(path):
        for item in items:
            if not isinstance(item, Quarantined):
                counter.add(PointerAnnotation(item["src"], item["tgt"], item["tgt_pointer"], item["tgt_switch"]))
            yield item
    _finish(stats, counter)


def _write_entity_sgml(cfg: Config, out_root: Path, map_chunks: Callable, tagger: Tagger) -> dict[str, dict]:
    out_root.parent.mkdir(parents=True, exist_ok=True)
    spill_dir = Path(tempfile.mkdtemp(prefix=f".{out_root.name}.spill-", dir=scratch_parent(out_root)))
    try:
        # gigaword.config_doc_blocks: its documents in its order with the forced test split of test_sgml_files.
        blocks = chunked(gigaword.config_doc_blocks(cfg), cfg.chunk_size)
        totals = _spill(map_chunks(functools.partial(_sgml_entity_chunk, cfg, tagger), blocks), spill_dir)
        stats = {s: SplitStats(dict(totals[s])) for s in SPLIT_NAMES}
        splits = {s: _read_spill(spill_dir / f"{s}.pkl", stats[s]) for s in SPLIT_NAMES}
        return write_corpus(out_root, splits, SCHEMA, params=_params(cfg), stats=stats, **_split_rules(cfg))
    finally:
        shutil.rmtree(spill_dir, ignore_errors=True)


# --------------------------------------------------------------------------- #
# mode: entity, format: rush -- tagged line-aligned files (word/LABEL)
# --------------------------------------------------------------------------- #


def _tagged_chunk(
    cfg: Config, paths: tuple[str, str], chunk: list[tuple[int, list[bytes]]]
) -> tuple[list[dict | Quarantined], Counter]:
    """Decode, read the labels, normalise and anonymise a chunk of tagged line pairs."""
    names = (Path(paths[0]).name, Path(paths[1]).name)
    limits = TextLimits.of(cfg)
    items: list[dict | Quarantined] = []
    counts: Counter = Counter()
    for line, raw in chunk:
        fields_ = decode_fields(raw, names, ("src", "tgt"), line, cfg.max_tokens, False, limits)
        if isinstance(fields_, Quarantined):
            items.append(fields_)
            continue
        try:
            (src_cased, src_labels), (tgt_cased, tgt_labels) = map(parse_slash_tokens, fields_)
        except TagFormatError as err:
            if line == 1:
                raise CorpusFormatError(
                    paths[0],
                    1,
                    f"{err}: entity mode with format rush reads tagged files (word/LABEL tokens); "
                    "the plain Rush release has neither case nor tags, use format sgml",
                ) from err
            items.append(
                Quarantined(
                    "bad_tags",
                    f"{names[0]}:{line}",
                    {"src": " ".join(fields_[0])[:300], "tgt": " ".join(fields_[1])[:300], "error": str(err)},
                )
            )
            continue
        src, tgt = rush_normalize(src_cased), rush_normalize(tgt_cased)
        items.append(
            _entity_row(
                f"{row_name(names[0])}:{line}",
                f"{names[0]}:{line}",
                src,
                src_labels,
                tgt,
                tgt_labels,
                cfg.entity_labels,
                counts,
            )
        )
    return items, counts


def _tagged_items(cfg: Config, paths: tuple[str, str], map_chunks: Callable, stats: SplitStats) -> Iterator:
    counter = PointerCounter()
    fn = functools.partial(_tagged_chunk, cfg, paths)
    for items, counts in map_chunks(fn, chunked(iter_aligned([Path(p) for p in paths]), cfg.chunk_size)):
        for key, n in counts.items():
            stats.add(key, n)
        for item in items:
            if not isinstance(item, Quarantined):
                counter.add(PointerAnnotation(item["src"], item["tgt"], item["tgt_pointer"], item["tgt_switch"]))
            yield item
    _finish(stats, counter)


def _write_entity_tagged(cfg: Config, out_root: Path, map_chunks: Callable) -> dict[str, dict]:
    files = {
        s: (getattr(cfg, f"{s}_src_file"), getattr(cfg, f"{s}_tgt_file"))
        for s in SPLIT_NAMES
        if getattr(cfg, f"{s}_src_file") is not None
    }
    require_files([Path(p) for pair in files.values() for p in pair])
    stats = {s: SplitStats() for s in files}
    splits = {s: _tagged_items(cfg, paths, map_chunks, stats[s]) for s, paths in files.items()}
    return write_corpus(out_root, splits, SCHEMA, params=_params(cfg), stats=stats, sources=files)


def _split_rules(cfg: Config) -> dict:
    """``write_corpus``'s ``sources`` / ``optional_splits`` for the gigaword-built splits."""
    if cfg.format == "sgml":
        return {"sources": gigaword.sgml_sources(cfg), "optional_splits": gigaword.sgml_optional_splits(cfg)}
    files = {s: [getattr(cfg, f"{s}_src_file"), getattr(cfg, f"{s}_tgt_file")] for s in SPLIT_NAMES}
    return {"sources": {s: f for s, f in files.items() if f[0] is not None}}


# --------------------------------------------------------------------------- #
# Entry point
# --------------------------------------------------------------------------- #


def write_splits(
    cfg: Config, out_root: Path, map_chunks: Callable = serial_map, tagger: Tagger | None = None
) -> dict[str, dict]:
    """Write ``out_root/<split>/`` for each split; return the manifests by split.

    ``tagger`` (sgml + entity only): a :data:`~pipeline.data.text.entities.Tagger`; default a
    :class:`~pipeline.data.text.entities.SpacyTagger` for ``cfg.ner_model``, loaded first so a missing
    model fails before anything is read. It must be picklable when ``map_chunks`` uses processes.
    """
    out_root = Path(out_root)
    if cfg.mode == "unk":
        return _write_unk(cfg, out_root, map_chunks)
    if cfg.format == "rush":
        return _write_entity_tagged(cfg, out_root, map_chunks)
    if tagger is None:
        tagger = SpacyTagger(cfg.ner_model)
        tagger.load()  # TaggerUnavailable now, not in a worker after hours of parsing
    return _write_entity_sgml(cfg, out_root, map_chunks, tagger)


# --------------------------------------------------------------------------- #
# Raw text (serving, predict: pipeline.data.corpora.raw_input)
# --------------------------------------------------------------------------- #


def raw_text_refusal(settings: dict) -> str | None:
    """Why raw text cannot be tokenised with these settings (None: it can). ``mode: entity``: its
    sources are anonymised ``@entity<n>`` by an NER tagger, and serving would need the tagger and the
    de-anonymisation map."""
    if settings.get("mode", "unk") != "unk":
        return (
            f"raw-text input is not supported for gigaword_pointers mode {settings.get('mode')!r}: "
            "its sources are NER-anonymised (@entity<n>); only mode 'unk' can be served"
        )
    return None


def source_tokenizer(settings: dict, pretokenized: bool) -> Callable[[str], list[str]]:
    """Raw text -> source tokens for ``mode: unk``: Gigaword's Rush tokens
    (:func:`pipeline.data.corpora.gigaword.rush_tokenizer`); ``ValueError`` (:func:`raw_text_refusal`)
    for ``mode: entity``."""
    refusal = raw_text_refusal(settings)
    if refusal:
        raise ValueError(refusal)
    return gigaword.rush_tokenizer(pretokenized)
