"""SentencePiece as an optional subword tokeniser for any corpus, applied after its reader.

The four papers work on words (or Chinese characters); subwords are an option the project offers
on top: a reader writes word-level shards, :func:`train_sentencepiece_from_corpus` trains a model
on that corpus's *train* split only, and :func:`retokenize_corpus` rewrites every split's ``src``,
``tgt`` and ``refs`` as pieces into a new shard directory. ``tokens -> " ".join -> pieces`` and
back (``decode_tokens``) is lossless, so predictions decode to the reader's tokens for scoring.

Settings fixed here, not options (TOOLCHAIN.md, measured): ``normalization_rule_name="identity"``
(the default ``nmt_nfkc`` rewrites Chinese punctuation: only 27% of LCSTS lines round-trip) and
``byte_fallback=True`` (a character the model lacks becomes its UTF-8 bytes ``<0xE4>`` ..., never
``<unk>``), plus ``remove_extra_whitespaces=False`` so that ``decode(encode(text)) == text`` holds
for any text, runs of spaces included. Byte fallback needs room for the 256 byte pieces: the
vocabulary size must be at least ~260 + the characters kept. A character known not to round-trip
is U+2581 (``▁``), SentencePiece's own whitespace symbol, which it reads as a space:
:func:`retokenize_split` quarantines rows holding it (``token_not_joinable``, as rows with a token
that contains a space).

Determinism: the same texts in the same order, the same settings, ``seed`` and ``num_threads`` give
a byte-identical model (another thread count gives another, equally valid, model).

Model files are stage outputs: ``<prefix>.vocab`` then ``<prefix>.model`` are each written to a
temporary file and renamed into place, so a reader never sees a half-written model. The model is
trained in memory (``model_writer``), not through ``model_prefix``, which SentencePiece would
store inside the model (a temporary path would make every model differ).
"""

from __future__ import annotations

import functools
import io
import json
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import sentencepiece as spm

from pipeline.config.validation import SettingsError
from pipeline.io.files import atomic_path, sha256_file, write_text_atomic
from pipeline.io.parallel import chunked, serial_map
from pipeline.io.shards import BASE_SCHEMA_FIELDS, QUARANTINE_NAME, ShardWriter, read_manifest, read_split

META = "\u2581"  # SentencePiece's whitespace symbol
MODEL_TYPES = ("unigram", "bpe", "char", "word")
BASE_COLUMNS = tuple(f.name for f in BASE_SCHEMA_FIELDS)  # id, src, tgt, refs
TEXT_COLUMNS = ("src", "tgt")  # what the model is trained on by default


# --------------------------------------------------------------------------- #
# Training
# --------------------------------------------------------------------------- #


def train_sentencepiece(
    texts: Iterable[str],
    model_prefix: str | Path,
    vocab_size: int,
    model_type: str = "unigram",
    *,
    character_coverage: float = 0.9995,
    seed: int = 1234,
    num_threads: int = 1,
    input_sentence_size: int = 0,
    hard_vocab_limit: bool = True,
) -> Path:
    """Train a model on ``texts`` (one sentence each); write ``<prefix>.model``/``.vocab``; return the model path.

    ``input_sentence_size`` > 0 trains on a seeded sample of that many sentences (SentencePiece's
    reservoir sampling) instead of all; ``hard_vocab_limit=False`` lets a small corpus yield fewer
    pieces than ``vocab_size`` instead of failing.
    """
    if model_type not in MODEL_TYPES:
        raise ValueError(f"model_type must be one of {MODEL_TYPES}, got {model_type!r}")
    prefix = Path(model_prefix)
    proto = io.BytesIO()  # not a model_prefix: the model would record that (temporary) path
    spm.set_random_generator_seed(seed)
    spm.SentencePieceTrainer.train(
        sentence_iterator=(t for t in texts if t),
        model_writer=proto,
        vocab_size=vocab_size,
        model_type=model_type,
        character_coverage=character_coverage,
        normalization_rule_name="identity",
        byte_fallback=True,
        remove_extra_whitespaces=False,
        num_threads=num_threads,
        input_sentence_size=input_sentence_size,
        shuffle_input_sentence=input_sentence_size > 0,
        hard_vocab_limit=hard_vocab_limit,
        minloglevel=2,  # the trainer's progress log is thousands of lines
    )
    sp = spm.SentencePieceProcessor(model_proto=proto.getvalue())
    # <prefix>.vocab as spm_train writes it: piece<TAB>score (C++ stream float format = %g)
    vocab = "".join(f"{sp.id_to_piece(i)}\t{sp.get_score(i):g}\n" for i in range(sp.get_piece_size()))
    write_text_atomic(prefix.with_name(prefix.name + ".vocab"), vocab)
    model = prefix.with_name(prefix.name + ".model")
    with atomic_path(model) as tmp:  # last: its presence means "complete"
        tmp.write_bytes(proto.getvalue())
    return model


def split_texts(
    split_dir: str | Path, columns: Sequence[str] = TEXT_COLUMNS, batch_rows: int = 10_000
) -> Iterator[str]:
    """Each row's token lists of ``columns``, joined by spaces, streamed batch by batch."""
    table = read_split(split_dir)  # memory-mapped
    for batch in table.select(list(columns)).to_batches(max_chunksize=batch_rows):
        for row in zip(*(batch.column(name).to_pylist() for name in columns)):
            yield from (" ".join(tokens) for tokens in row)


def train_sentencepiece_from_corpus(
    corpus_root: str | Path, model_prefix: str | Path, vocab_size: int, columns: Sequence[str] = TEXT_COLUMNS, **kwargs
) -> Path:
    """Train on ``<corpus_root>/train`` only (never valid/test); ``kwargs`` as :func:`train_sentencepiece`.

    One joint model for the ``columns`` (source and target by default): identical words get
    identical pieces on both sides, which is what a copy mechanism needs.
    """
    try:
        return train_sentencepiece(
            split_texts(Path(corpus_root) / "train", columns), model_prefix, vocab_size, **kwargs
        )
    except RuntimeError as err:  # sentencepiece's internal errors, as a setting's message
        raise vocab_size_error(err, vocab_size) from err


def vocab_size_error(err: RuntimeError, vocab_size: int) -> Exception:
    """sentencepiece's refusal of a vocabulary size for this data (too large for so little text, or
    smaller than the characters it must keep) as a :class:`SettingsError` naming the setting and the
    size that works; any other error as it is."""
    text = str(err)
    high = re.search(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)", text)
    if high:
        return SettingsError(
            f"subword.vocab_size {vocab_size} is too large for this train split: sentencepiece can make at most "
            f"{high.group(2)} pieces of it; set subword.vocab_size (tasks add --subword) to {high.group(2)} or less, "
            "or give more training data"
        )
    low = re.search(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)", text)
    if low:
        return SettingsError(
            f"subword.vocab_size {vocab_size} is smaller than the {low.group(2)} pieces sentencepiece must keep for "
            f"this train split (its characters and 256 byte pieces): set subword.vocab_size above {low.group(2)}"
        )
    return err


# --------------------------------------------------------------------------- #
# Encoding
# --------------------------------------------------------------------------- #


@functools.lru_cache(maxsize=8)
def _processor(model_file: str) -> spm.SentencePieceProcessor:
    """One loaded model per file and process (workers load it once, not per chunk)."""
    return spm.SentencePieceProcessor(model_file=model_file)


class SentencePieceTokenizer:
    """A trained model: text <-> pieces, and token lists <-> pieces. Pickles as its file path."""

    def __init__(self, model_file: str | Path) -> None:
        self.model_file = str(model_file)
        if not Path(self.model_file).is_file():
            raise FileNotFoundError(f"no SentencePiece model {self.model_file}")

    @property
    def sp(self) -> spm.SentencePieceProcessor:
        return _processor(self.model_file)

    def __len__(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, text: str) -> list[str]:
        return self.sp.encode(text, out_type=str)

    def decode(self, pieces: Sequence[str]) -> str:
        return self.sp.decode(list(pieces))

    def encode_tokens(self, tokens: Sequence[str]) -> list[str]:
        """Pieces of word tokens (joined by single spaces); see :func:`joinable`."""
        return self.encode(" ".join(tokens))

    def decode_tokens(self, pieces: Sequence[str]) -> list[str]:
        """The word tokens back from pieces (inverse of :meth:`encode_tokens`)."""
        text = self.decode(pieces)
        return text.split(" ") if text else []


def joinable(tokens: Sequence[str]) -> bool:
    """Whether ``decode_tokens(encode_tokens(tokens)) == tokens``: no empty token, none holding a
    space or SentencePiece's ``▁``."""
    text = " ".join(tokens)
    return META not in text and (not tokens or (all(tokens) and len(text.split(" ")) == len(tokens)))


# --------------------------------------------------------------------------- #
# Re-tokenising shards
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class _EncodeSpec:
    model_file: str
    keep: tuple[str, ...]  # non-base columns copied unchanged


def encode_rows(spec: _EncodeSpec, rows: list[dict]) -> list[tuple[dict, str | None, dict[str, int]]]:
    """``(row with pieces or the input row, quarantine reason or None, counts)`` per row (worker)."""
    tok = SentencePieceTokenizer(spec.model_file)
    out = []
    for row in rows:
        sequences = [row["src"], row["tgt"], *row["refs"]]
        if not all(joinable(seq) for seq in sequences):
            out.append((row, "token_not_joinable", {}))
            continue
        refs = [tok.encode_tokens(r) for r in row["refs"]]
        src, tgt = tok.encode_tokens(row["src"]), tok.encode_tokens(row["tgt"])
        new = {"id": row["id"], "src": src, "tgt": tgt, "refs": refs}
        new.update({name: row[name] for name in spec.keep})
        counts = {
            "src_tokens": len(row["src"]),
            "src_pieces": len(new["src"]),
            "tgt_tokens": len(row["tgt"]),
            "tgt_pieces": len(new["tgt"]),
            "ref_tokens": sum(map(len, row["refs"])),
            "ref_pieces": sum(map(len, refs)),
        }
        out.append((new, None, counts))
    return out


def _output_schema(schema: pa.Schema, drop_columns: Sequence[str], split_dir: Path) -> pa.Schema:
    """The input schema less ``drop_columns``; token-aligned list columns must be among them."""
    missing = [c for c in BASE_COLUMNS if c not in schema.names]
    unknown = [c for c in drop_columns if c not in schema.names or c in BASE_COLUMNS]
    if missing or unknown:
        raise ValueError(f"{split_dir}: base columns missing {missing}; cannot drop {unknown}")
    aligned = [
        f.name
        for f in schema
        if f.name not in BASE_COLUMNS
        and f.name not in drop_columns
        and f.name != "features"  # tags beside the source, not aligned with its words: copied as they are
        and (pa.types.is_list(f.type) or pa.types.is_large_list(f.type))
    ]
    if aligned:
        raise ValueError(
            f"{split_dir}: list column(s) {aligned} may be aligned with the word tokens (tgt_pointer, "
            "tgt_switch ...) and would be wrong for pieces: pass them in drop_columns"
        )
    return pa.schema([f for f in schema if f.name not in drop_columns], metadata=schema.metadata)


def retokenize_split(
    in_dir: str | Path,
    out_dir: str | Path,
    model_file: str | Path,
    drop_columns: Sequence[str] = (),
    chunk_rows: int = 5000,
    map_chunks: Callable = serial_map,
    rows_per_part: int = 50_000,
) -> dict:
    """Write ``in_dir``'s rows with ``src``/``tgt``/``refs`` as pieces to ``out_dir``; return its manifest.

    Other scalar columns are copied; list columns other than the base ones must be named in
    ``drop_columns`` (word-aligned annotations do not survive subword splitting). The input's
    quarantine is carried over line for line, so the new manifest still accounts for every raw
    record (``rows_in`` unchanged); rows that cannot round-trip are quarantined
    (``token_not_joinable``). Stats: token and piece totals per column.
    """
    in_dir, model_file = Path(in_dir), Path(model_file)
    tokenizer = SentencePieceTokenizer(model_file)  # fails early on a missing model
    manifest = read_manifest(in_dir)
    table = read_split(in_dir)
    schema = _output_schema(table.schema, drop_columns, in_dir)
    keep = tuple(n for n in schema.names if n not in BASE_COLUMNS)
    params = {
        "input_split": str(in_dir),
        "input_content_sha256": manifest["content_sha256"],
        "input_params": manifest.get("params", {}),
        "sentencepiece_model": str(model_file),
        "sentencepiece_model_sha256": sha256_file(model_file),
        "sentencepiece_pieces": len(tokenizer),
        "dropped_columns": list(drop_columns),
    }
    batches = (row for batch in table.to_batches(max_chunksize=chunk_rows) for row in batch.to_pylist())
    fn = functools.partial(encode_rows, _EncodeSpec(str(model_file), keep))
    with ShardWriter(out_dir, schema, rows_per_part=rows_per_part, params=params) as writer:
        _copy_quarantine(in_dir, writer)
        totals: dict[str, int] = {}
        for result in map_chunks(fn, chunked(batches, chunk_rows)):
            rows = []
            for row, reason, counts in result:
                if reason is not None:
                    writer.quarantine({"where": row["id"], "record": {"src": row["src"], "tgt": row["tgt"]}}, reason)
                    continue
                rows.append(row)
                for name, n in counts.items():
                    totals[name] = totals.get(name, 0) + n
            writer.write(rows)
        writer.stats.update(totals)
    return writer.close()


def _copy_quarantine(in_dir: Path, writer: ShardWriter) -> None:
    path = in_dir / QUARANTINE_NAME
    if not path.is_file():
        return
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            entry = json.loads(line)
            writer.quarantine(entry["record"], entry["reason"])


def retokenize_corpus(
    in_root: str | Path, out_root: str | Path, model_file: str | Path, drop_columns: Sequence[str] = (), **kwargs
) -> dict[str, dict]:
    """:func:`retokenize_split` for every split directory (one with a manifest) under ``in_root``."""
    in_root = Path(in_root)
    splits = sorted(p.name for p in in_root.iterdir() if (p / "manifest.json").is_file())
    if not splits:
        raise FileNotFoundError(f"no split directories (with manifest.json) under {in_root}")
    return {
        split: retokenize_split(in_root / split, Path(out_root) / split, model_file, drop_columns, **kwargs)
        for split in splits
    }
