"""A pretrained backbone's tokenizer as the project's vocabulary (``model.backbone``; docs/pretrained.md).

The vocab stage writes, for each backbone a task's rows run on, ``data/vocab/<task>/backbones/<name>/``:

  tokenizer/      the tokenizer's own files (``save_pretrained``), what serving tokenises with
  backbone.json   the backbone's name, its special token ids, the tokenizer's sha256 (over its files)
  src.vocab, tgt.vocab   the tokenizer's pieces in the project's order (``models.backbone_ids``:
                  ``<pad> <unk> <s> </s>`` first, then every other piece by backbone id), the same file twice
  ids/train, ids/valid   the splits id-encoded with it (``pipeline.vocab.encoded``)

Text. A shard row's tokens, joined by spaces, are the text the tokenizer reads; its pieces are the
row's tokens from then on (batches, copying, the extended vocabulary). A piece the tokenizer maps to
its unknown token keeps its surface text, so it is a source piece outside the vocabulary: the
extended vocabulary's V + k, which only a copy can output. Outputs go back to text through the
tokenizer's own decoder (:meth:`BackboneTokenizer.detokenise`), each copied surface put back in its
place; metrics read that text's words.

Fast (Rust) tokenizers give the surface of an unknown piece by its offsets. Slow (Python)
sentencepiece tokenizers (Marian's ``MarianTokenizer``, which has no fast version) give it as the
piece itself: sentencepiece returns unknown characters as pieces of their own text, which the
tokenizer's id map sends to <unk>; the word-start mark ``▁`` is dropped from it. Targets are
tokenised in the tokenizer's target mode where it has one (Marian: the target language's
sentencepiece model), as ``tokenizer(text_target=...)`` does; the source and the target must share
one vocabulary (a Marian model with ``separate_vocabs`` is refused: copying moves source ids into
the output).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa

from models.backbone_ids import project_token_ids
from pipeline.io.files import sha256_tree, write_json_atomic
from pipeline.vocab.backbone_probe import BackboneProbe, probe_backbone
from pipeline.vocab.vocabulary import SPECIALS, UNK, Vocab

TOKENIZER_DIR = "tokenizer"
RECORD = "backbone.json"


WORD_START = "\u2581"  # sentencepiece's word-start mark


class BackboneTokenizer:
    """A Hugging Face tokenizer with the backbone's special ids: pieces in the project's order."""

    def __init__(self, tokenizer, token_ids: dict, name: str):
        if getattr(tokenizer, "separate_vocabs", False):
            raise ValueError(
                f"{name}: the backbone's tokenizer has separate source and target vocabularies; a copy head "
                "moves source ids into the output, so it needs one vocabulary for both"
            )
        self.tokenizer, self.token_ids, self.name = tokenizer, dict(token_ids), name
        self.fast = bool(getattr(tokenizer, "is_fast", False))
        skip = {token_ids[k] for k in ("pad", "unk", "start", "eos", "bos")}
        size = len(SPECIALS) + len(tokenizer) - sum(1 for i in skip if i < len(tokenizer))
        self.backbone_ids = project_token_ids(size, token_ids)  # project id -> backbone id
        pieces = tokenizer.convert_ids_to_tokens(self.backbone_ids[len(SPECIALS) :])
        try:
            self.vocab = Vocab([*SPECIALS, *pieces], [0] * size)
        except ValueError as err:
            raise ValueError(f"{name}: its tokenizer's pieces cannot be the project's vocabulary ({err})") from None
        self.unk_id = token_ids["unk"]

    @classmethod
    def from_backbone(cls, name: str, setting: str = "model.backbone") -> BackboneTokenizer:
        """The tokenizer of a backbone (a local directory or a hub name), probed first
        (:func:`~pipeline.vocab.backbone_probe.probe_backbone`: a backbone that cannot work is a
        ``SettingsError`` naming ``setting``)."""
        return cls.from_probe(probe_backbone(name, setting))

    @classmethod
    def from_probe(cls, probe: BackboneProbe) -> BackboneTokenizer:
        """The tokenizer of a backbone :func:`~pipeline.vocab.backbone_probe.probe_backbone` checked."""
        return cls(probe.tokenizer, probe.token_ids, probe.name)

    @classmethod
    def load(cls, directory: str | Path) -> BackboneTokenizer:
        """What :meth:`save` wrote (the vocab stage's ``backbones/<name>/``), offline."""
        import json

        from transformers import AutoTokenizer

        directory = Path(directory)
        record = json.loads((directory / RECORD).read_text(encoding="utf-8"))
        tokenizer = AutoTokenizer.from_pretrained(str(directory / TOKENIZER_DIR), trust_remote_code=False)
        return cls(tokenizer, record["token_ids"], record["backbone"])

    def save(self, directory: str | Path) -> dict:
        """The tokenizer's files, ``backbone.json`` and ``src.vocab``/``tgt.vocab`` under ``directory``; the record."""
        directory = Path(directory)
        self.tokenizer.save_pretrained(str(directory / TOKENIZER_DIR))
        record = {
            "backbone": self.name,
            "token_ids": self.token_ids,
            "tokenizer_sha256": sha256_tree(directory / TOKENIZER_DIR),
            "vocab_size": len(self.vocab),
        }
        write_json_atomic(directory / RECORD, record)
        for side in ("src", "tgt"):
            self.vocab.save(directory / f"{side}.vocab")
        return record

    # ------------------------------------------------------------------ text <-> pieces
    @contextmanager
    def _side(self, side: str) -> Iterator[None]:
        """The tokenizer in its target mode for ``side`` "tgt" (where it has one), as
        ``tokenizer(text_target=...)`` puts it."""
        if side not in ("src", "tgt"):
            raise ValueError(f"side must be 'src' or 'tgt', got {side!r}")
        switch = side == "tgt" and hasattr(self.tokenizer, "_switch_to_target_mode")
        if switch:
            self.tokenizer._switch_to_target_mode()
        try:
            yield
        finally:
            if switch:
                self.tokenizer._switch_to_input_mode()

    def pieces(self, texts: Sequence[str], side: str = "src") -> list[list[str]]:
        """Each text's pieces (no specials added); a piece the tokenizer maps to <unk> is the text it covers."""
        if not texts:
            return []
        with self._side(side):
            return self._fast_pieces(texts) if self.fast else [self._slow_pieces(text) for text in texts]

    def _fast_pieces(self, texts: Sequence[str]) -> list[list[str]]:
        enc = self.tokenizer(
            list(texts), add_special_tokens=False, return_offsets_mapping=True, split_special_tokens=True
        )
        out = []
        for text, ids, offsets in zip(texts, enc["input_ids"], enc["offset_mapping"]):
            tokens = self.tokenizer.convert_ids_to_tokens(ids)
            out.append(
                [
                    (text[start:end] or SPECIALS[UNK]) if i == self.unk_id else tok
                    for i, tok, (start, end) in zip(ids, tokens, offsets)
                ]
            )
        return out

    def _slow_pieces(self, text: str) -> list[str]:
        tokens = self.tokenizer.tokenize(text, split_special_tokens=True)
        ids = self.tokenizer.convert_tokens_to_ids(tokens)
        return [(tok.lstrip(WORD_START) or SPECIALS[UNK]) if i == self.unk_id else tok for i, tok in zip(ids, tokens)]

    def words_to_pieces(self, rows: Sequence[Sequence[str]], side: str = "src") -> list[list[str]]:
        """Rows of tokens (a shard's lists) -> their pieces: each row's tokens joined by spaces, tokenised
        (``side`` "tgt": in the tokenizer's target mode)."""
        return self.pieces([" ".join(row) for row in rows], side)

    def detokenise(self, pieces: Sequence[str]) -> str:
        """Output pieces -> text, by the tokenizer's decoder: a piece outside the vocabulary (a copied
        source <unk>) is decoded as <unk>, then its surface put back in that place (a slow
        sentencepiece tokenizer decodes the surface itself, as it does its own unknown pieces); the
        project's <unk> stays the tokenizer's unknown token."""
        unk = self.tokenizer.unk_token
        if not self.fast:
            tokens = [unk if piece == SPECIALS[UNK] else piece for piece in pieces]
            return self.tokenizer.convert_tokens_to_string(tokens).strip()
        tokens, surfaces = [], []
        for piece in pieces:
            if piece == SPECIALS[UNK] or piece not in self.vocab:
                tokens.append(unk)
                surfaces.append(unk if piece == SPECIALS[UNK] else piece)
            else:
                tokens.append(piece)
        text = self.tokenizer.convert_tokens_to_string(tokens)
        if surfaces:
            parts = text.split(unk)
            if len(parts) == len(surfaces) + 1:  # the decoder kept one <unk> per piece, in order
                text = "".join(part + (surfaces[i] if i < len(surfaces) else "") for i, part in enumerate(parts))
        return text.strip()

    def piece_table(self, table: pa.Table, keep: Sequence[str] = ()) -> pa.Table:
        """A shard table (id, src, tgt, ...) as pieces: ``id``, ``src``, ``tgt`` (list<string> each) and
        the columns ``keep`` as they are; the word-aligned pointer annotations do not apply to pieces
        and are left out."""
        lists = pa.list_(pa.string())
        columns = {
            "id": table.column("id"),
            "src": pa.array(self.words_to_pieces(table.column("src").to_pylist()), type=lists),
            "tgt": pa.array(self.words_to_pieces(table.column("tgt").to_pylist(), "tgt"), type=lists),
        }
        columns.update({c: table.column(c) for c in keep if c in table.column_names and c not in columns})
        return pa.table(columns)

    def spans(self, pieces: Sequence[str]) -> list[str]:
        """The text each output piece adds to :meth:`detokenise`'s output (leading spaces kept), found by
        decoding the prefixes; their concatenation is the output text."""
        out, previous = [], ""
        for k in range(len(pieces)):
            text = self.detokenise(pieces[: k + 1])
            out.append(text[len(previous) :] if text.startswith(previous) else text)
            previous = text if text.startswith(previous) else previous + text
        return out
