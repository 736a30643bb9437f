"""The backbone's ids (what its tokenizer gives, what a Hugging Face user reads) and the head's ids (the
project's: ``<pad> <unk> <s> </s>`` at 0..3, then every other backbone id in increasing order,
models/backbone_ids.py), both extended by the source's pieces outside the vocabulary: backbone
``vocab_size + k`` is head ``V + k``.

The map is a bijection on the pieces, not on the specials: a backbone whose decoder start is its </s>
(BART) or its <pad> (T5, Marian) has one id for two of the head's specials, and its <s> (BART's id 0),
which the head never emits, has none. Inputs map the shared id to the head's </s> (or <pad>), and the
first decoder position to <s>; outputs give every backbone id the head's log-probability of its piece,
and NEG (probability 0) to an id the head never emits (<pad>, the decoder start, <s>, and ids past the
tokenizer's, such as T5's unused rows).
"""

from __future__ import annotations

import torch

from models.backbone_ids import project_token_ids
from models.extended import NEG
from models.specials import BOS, EOS, PAD, SPECIALS, UNK


class IdMaps:
    """Backbone ids <-> head ids for a head vocabulary of ``head_vocab`` ids on a backbone of
    ``backbone_vocab`` ids with the special ids ``token_ids`` (pad, unk, start, eos, bos)."""

    def __init__(self, head_vocab: int, backbone_vocab: int, token_ids: dict):
        self.head_vocab, self.backbone_vocab = head_vocab, backbone_vocab
        self.start = token_ids["start"]
        to_backbone = project_token_ids(head_vocab, token_ids)  # head id -> backbone id
        if max(to_backbone) >= backbone_vocab:
            raise ValueError(
                f"a head vocabulary of {head_vocab} ids needs backbone ids up to {max(to_backbone)}, "
                f"but the backbone has {backbone_vocab}"
            )
        to_head = [UNK] * backbone_vocab  # an id outside the head's vocabulary reads as <unk>
        columns = [-1] * backbone_vocab  # the head id whose log-probability each backbone id gets (-1: NEG)
        for head_id in range(len(SPECIALS), head_vocab):
            to_head[to_backbone[head_id]] = columns[to_backbone[head_id]] = head_id
        # Later entries win where a backbone has one id for two specials (start = eos, start = pad).
        for name, head_id in (("start", BOS), ("pad", PAD), ("unk", UNK), ("eos", EOS)):
            to_head[token_ids[name]] = head_id
        columns[token_ids["unk"]], columns[token_ids["eos"]] = UNK, EOS
        self._lists = {"to_head": to_head, "columns": columns}
        self._tensors: dict = {}

    def _table(self, name: str, device: torch.device) -> torch.Tensor:
        key = (name, device)
        if key not in self._tensors:
            self._tensors[key] = torch.tensor(self._lists[name], dtype=torch.long, device=device)
        return self._tensors[key]

    def _order(self, device: torch.device, n_ext: int) -> torch.Tensor:
        """The head column each backbone output reads, (vocab_size + X,): V + X is an appended NEG column."""
        key = ("order", device, n_ext)
        if key not in self._tensors:
            columns = self._table("columns", device)
            missing = self.head_vocab + n_ext
            self._tensors[key] = torch.cat(
                [
                    torch.where(columns >= 0, columns, torch.full_like(columns, missing)),
                    torch.arange(self.head_vocab, missing, device=device),
                ]
            )
        return self._tensors[key]

    def to_head(self, ids: torch.Tensor, first_is_start: bool = False) -> torch.Tensor:
        """Backbone (extended) ids (...) -> head ids; -100 (ignored labels) -> <pad>. ``first_is_start``:
        ids (B, T) begin a decoder input, whose first position is <s> when it holds the decoder start."""
        ignored = ids < 0
        ids = ids.clamp_min(0)
        inside = ids < self.backbone_vocab
        table = self._table("to_head", ids.device)
        out = torch.where(
            inside, table[ids.clamp_max(self.backbone_vocab - 1)], ids - self.backbone_vocab + self.head_vocab
        )
        if first_is_start:
            out[:, 0] = torch.where(ids[:, 0] == self.start, torch.full_like(out[:, 0], BOS), out[:, 0])
        return out.masked_fill(ignored, PAD)

    def to_backbone_order(self, log_probs: torch.Tensor, n_ext: int) -> torch.Tensor:
        """log p over the head's extended ids (..., V + X) -> over the backbone's (..., vocab_size + X):
        each backbone id reads its piece's column, NEG where the head never emits it."""
        index = self._order(log_probs.device, n_ext)  # (vocab_size + X,)
        padded = torch.cat([log_probs, log_probs.new_full((*log_probs.shape[:-1], 1), NEG)], dim=-1)
        return padded.index_select(-1, index)
