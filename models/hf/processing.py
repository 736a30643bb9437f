"""Text <-> ids for a copy head as a Hugging Face model: :class:`CopyHeadProcessor`, the backbone's own
tokenizer plus the source's extended ids.

The rule is the pipeline's (pipeline/vocab/tokenizer.py, pipeline/vocab/extended.py), on backbone
ids: a text is tokenised without special tokens (``split_special_tokens``: a literal ``</s>`` in the
text is text); a piece the tokenizer maps to its unknown token keeps the text it covers (a fast
tokenizer's offsets; a slow sentencepiece tokenizer's piece without its word-start mark) and, unless
that text is a piece of the vocabulary, becomes the source's extended id ``vocab_size + k``, numbered
per distinct text in order of first appearance. An empty source is one ``</s>``. A target piece
outside the vocabulary gets the id of the same source piece, else <unk>; labels end with ``</s>``.
Decoding maps ids back to pieces (an extended id to its source text) and the pieces to text by the
tokenizer's own decoder, each copied text put back where the decoder left its unknown token.

This duplicates the pipeline's few lines on purpose: ``models`` imports nothing of ``pipeline``, and a
user's code needs this file alone; tests/models/test_hf_heads.py checks both give the same ids.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import torch
from transformers import AutoTokenizer, BatchEncoding

from models.specials import BOS, EOS, PAD, SPECIALS, UNK

PROCESSOR_FILE = "copy_head_processor.json"
WORD_START = "\u2581"  # sentencepiece's word-start mark
IGNORE = -100  # labels not counted by the loss


class CopyHeadProcessor:
    """The backbone's ``tokenizer`` with the extended ids after its ``vocab_size`` (the model config's)
    and the backbone ids ``token_ids`` of pad, unk, the decoder start, eos and bos."""

    def __init__(self, tokenizer, vocab_size: int, token_ids: dict):
        if getattr(tokenizer, "separate_vocabs", False):
            raise ValueError("the tokenizer has separate source and target vocabularies; a copy head needs one")
        self.tokenizer, self.vocab_size, self.token_ids = tokenizer, int(vocab_size), dict(token_ids)
        self.fast = bool(getattr(tokenizer, "is_fast", False))
        self.unk, self.eos, self.pad = token_ids["unk"], token_ids["eos"], token_ids["pad"]
        specials = {token_ids[k] for k in ("pad", "unk", "start", "eos", "bos")}
        # the texts that are pieces of the vocabulary: an unknown piece covering one of them is that piece
        self.known = {piece: i for piece, i in tokenizer.get_vocab().items() if i not in specials}
        named = {PAD: "pad", UNK: "unk", BOS: "start", EOS: "eos"}
        self.known.update({SPECIALS[i]: token_ids[name] for i, name in named.items()})

    @classmethod
    def from_config(cls, tokenizer, config) -> CopyHeadProcessor:
        """The processor of a model config (``CopyHeadConfig``) and its backbone's tokenizer."""
        return cls(tokenizer, config.vocab_size, config.token_ids)

    @classmethod
    def from_pretrained(cls, path: str | Path) -> CopyHeadProcessor:
        """What :meth:`save_pretrained` wrote (no remote code)."""
        record = json.loads((Path(path) / PROCESSOR_FILE).read_text(encoding="utf-8"))
        tokenizer = AutoTokenizer.from_pretrained(str(path), trust_remote_code=False)
        return cls(tokenizer, record["vocab_size"], record["token_ids"])

    def save_pretrained(self, path: str | Path) -> None:
        """The tokenizer's files and ``copy_head_processor.json`` (vocab_size, token_ids) under ``path``."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.tokenizer.save_pretrained(str(path))
        record = {"vocab_size": self.vocab_size, "token_ids": self.token_ids}
        (path / PROCESSOR_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")

    # ------------------------------------------------------------------ text -> pieces
    @contextmanager
    def _side(self, side: str) -> Iterator[None]:
        """The tokenizer in its target mode for targets, where it has one (Marian), as ``text_target``."""
        switch = side == "tgt" and hasattr(self.tokenizer, "_switch_to_target_mode")
        if switch:
            self.tokenizer._switch_to_target_mode()
        try:
            yield
        finally:
            if switch:
                self.tokenizer._switch_to_input_mode()

    def pieces(self, texts: Sequence[str], side: str = "src") -> list[list[tuple[int, str | None]]]:
        """Each text's pieces as (backbone id, the text an unknown piece covers, else None)."""
        if not texts:
            return []
        with self._side(side):
            if self.fast:
                enc = self.tokenizer(
                    list(texts), add_special_tokens=False, return_offsets_mapping=True, split_special_tokens=True
                )
                return [
                    [(i, (text[a:b] or None) if i == self.unk else None) for i, (a, b) in zip(ids, offsets)]
                    for text, ids, offsets in zip(texts, enc["input_ids"], enc["offset_mapping"])
                ]
            out = []
            for text in texts:
                tokens = self.tokenizer.tokenize(text, split_special_tokens=True)
                ids = self.tokenizer.convert_tokens_to_ids(tokens)
                out.append(
                    [(i, (t.lstrip(WORD_START) or None) if i == self.unk else None) for i, t in zip(ids, tokens)]
                )
            return out

    def encode_source(self, text: str) -> tuple[list[int], list[int], list[str]]:
        """(encoder ids, extended ids, the texts of the extended ids in order) of one source."""
        ids, ext, oovs = [], [], {}
        for i, surface in self.pieces([text])[0] or [(self.eos, None)]:
            if surface is not None:
                i = self.known.get(surface, i)
            ids.append(i)
            if i == self.unk and surface is not None:
                i = oovs.setdefault(surface, self.vocab_size + len(oovs))
            ext.append(i)
        return ids, ext, list(oovs)

    def encode_target(self, text: str, oovs: Sequence[str]) -> list[int]:
        """Labels of one target (extended ids, ``</s>`` last), given its source's extended texts."""
        slots = {surface: self.vocab_size + k for k, surface in enumerate(oovs)}
        out = []
        for i, surface in self.pieces([text], "tgt")[0]:
            if surface is not None:
                i = self.known.get(surface, slots.get(surface, self.unk))
            out.append(i)
        return [*out, self.eos]

    def oovs(self, sources: Sequence[str]) -> list[list[str]]:
        """Each source's texts of its extended ids (``vocab_size + k`` is ``oovs[k]``)."""
        return [self.encode_source(text)[2] for text in sources]

    def __call__(
        self,
        text: str | Sequence[str],
        text_target: str | Sequence[str] | None = None,
        return_tensors: str | None = "pt",
        max_length: int | None = None,
    ) -> BatchEncoding:
        """``input_ids``, ``attention_mask``, ``src_ext_ids`` and, with targets, ``labels`` (-100 after
        the end). A list of texts is padded to its longest (tensors with ``return_tensors="pt"``); one
        text with ``return_tensors=None`` gives plain lists (a dataset row for :meth:`collate`).
        ``max_length``: sources cut to that many pieces (the pipeline's ``max_src_len``)."""
        single = isinstance(text, str)
        texts = [text] if single else list(text)
        targets = None if text_target is None else ([text_target] if single else list(text_target))
        rows = []
        for k, source in enumerate(texts):
            ids, ext, oovs = self.encode_source(source)
            if max_length is not None:
                ids, ext = ids[:max_length], ext[:max_length]
                oovs = oovs[: sum(1 for i in set(ext) if i >= self.vocab_size)]
            row = {"input_ids": ids, "attention_mask": [1] * len(ids), "src_ext_ids": ext}
            if targets is not None:
                row["labels"] = self.encode_target(targets[k], oovs)
            rows.append(row)
        if single and return_tensors is None:
            return BatchEncoding(rows[0])
        return BatchEncoding(self.collate(rows) if return_tensors == "pt" else self._padded(rows))

    def _padded(self, rows: Sequence[dict]) -> dict:
        """Rows of lists padded to their longest: ids with <pad>, the mask with 0, labels with -100."""
        fill = {"input_ids": self.pad, "src_ext_ids": self.pad, "attention_mask": 0, "labels": IGNORE}
        out = {}
        for key in rows[0]:
            values = [list(row[key].tolist() if torch.is_tensor(row[key]) else row[key]) for row in rows]
            width = max(len(v) for v in values)
            out[key] = [v + [fill[key]] * (width - len(v)) for v in values]
        return out

    def collate(self, rows: Sequence[dict]) -> dict:
        """A batch of rows (dicts of lists or 1-D tensors, as ``processor(text, text_target=...,
        return_tensors=None)`` gives them) padded to tensors: the ``data_collator`` of a Trainer."""
        return {key: torch.tensor(value, dtype=torch.long) for key, value in self._padded(rows).items()}

    # ------------------------------------------------------------------ ids -> text
    def decode(self, ids: Sequence[int] | torch.Tensor, source: str) -> str:
        """One output (as ``generate`` gives it: the decoder start first, then extended ids) -> text:
        up to ``</s>``, padding skipped, an extended id as its source text (``source``'s)."""
        ids = ids.tolist() if torch.is_tensor(ids) else list(ids)
        if ids and ids[0] == self.token_ids["start"]:
            ids = ids[1:]
        oovs = self.oovs([source])[0]
        unk = self.tokenizer.unk_token
        tokens, surfaces = [], []
        for i in ids:
            if i == self.eos:
                break
            if i == self.pad:
                continue
            if i >= self.vocab_size:
                k = i - self.vocab_size
                surface = oovs[k] if k < len(oovs) else unk
                tokens.append(unk if self.fast else surface)
                surfaces.append(surface)
            elif i == self.unk:
                tokens.append(unk)
                surfaces.append(unk)
            else:
                tokens.append(self.tokenizer.convert_ids_to_tokens(i))
        text = self.tokenizer.convert_tokens_to_string(tokens)
        if self.fast and surfaces:
            parts = text.split(unk)
            if len(parts) == len(surfaces) + 1:  # the decoder kept one unknown token per piece, in order
                text = "".join(part + (surfaces[k] if k < len(surfaces) else "") for k, part in enumerate(parts))
        return text.strip()

    def batch_decode(self, sequences: torch.Tensor | Sequence[Sequence[int]], sources: Sequence[str]) -> list[str]:
        """:meth:`decode` of each output with its source (``generate``'s rows, ``num_return_sequences``
        rows per source in order)."""
        rows = sequences.tolist() if torch.is_tensor(sequences) else [list(s) for s in sequences]
        per = len(rows) // max(len(sources), 1)
        if per * len(sources) != len(rows):
            raise ValueError(f"{len(rows)} outputs for {len(sources)} sources: give each output's source")
        return [self.decode(row, sources[k // per]) for k, row in enumerate(rows)]
