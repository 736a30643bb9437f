"""The batch every model reads: padded id tensors in the source and extended vocabularies, with the
words they came from. Built by ``pipeline.vocab.batching`` (from shard rows) and
``pipeline.vocab.encoded`` (from id-encoded splits); a model reads ``src``, ``src_len``, ``src_ext``,
``n_ext``, ``tgt_in``/``tgt_out``, ``features`` when the corpus has a features column, and, where a
mechanism trains on them, the pointer annotations."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from models.specials import BOS, PAD, UNK


@dataclass
class Batch:
    src: torch.Tensor  # (B, S) encoder ids (source vocabulary, UNK for its OOVs)
    src_len: torch.Tensor  # (B,)
    src_ext: torch.Tensor  # (B, S) decoder/extended ids of each source token
    tgt_in: torch.Tensor  # (B, T) <s> y_1 .. y_{T-1}, extended ids
    tgt_out: torch.Tensor  # (B, T) y_1 .. y_n </s> <pad>.., extended ids
    n_ext: int  # X: extended slots in this batch
    oovs: list[list[str]]  # per example, the word of extended id V + k
    ids: list[str]
    src_tokens: list[list[str]]
    tgt_tokens: list[list[str]]
    extra: dict = field(default_factory=dict)  # other shard columns for these rows (e.g. rule_type)
    # Pointer annotations aligned with tgt_out (Pointer Softmax 5.2-5.3), when the shard has them:
    tgt_pointer: torch.Tensor | None = None  # (B, T) source position of each target token, -1: none
    tgt_switch: torch.Tensor | None = None  # (B, T) True where the target token is pointed at
    # Tags kept apart from the source (a features column), ids in the features vocabulary, <pad>-padded;
    # None: the corpus has none. Never part of the source, so never a copy candidate.
    features: torch.Tensor | None = None  # (B, F)

    @property
    def size(self) -> int:
        return self.src.size(0)

    TENSORS = ("src", "src_len", "src_ext", "tgt_in", "tgt_out", "tgt_pointer", "tgt_switch", "features")

    def _map(self, fn) -> Batch:
        return replace(self, **{k: None if getattr(self, k) is None else fn(getattr(self, k)) for k in self.TENSORS})

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        return self._map(lambda t: t.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> Batch:
        """Page-locked copies (DataLoader ``pin_memory=True`` calls this), for asynchronous copies to CUDA."""
        return self._map(lambda t: t.pin_memory())

    def padded(self, rows: int, src_steps: int, tgt_steps: int) -> Batch:
        """This batch padded up to (rows, src_steps, tgt_steps) = (B', S', T') (each at least the
        batch's own): positions past the ends are <pad>, and each added row is a one-token source
        (<unk>) with no target (``tgt_out`` all <pad>), so it adds nothing to the objective. The shape
        CUDA graphs are captured for (models/graphed.py)."""
        b, s, t = self.src.size(0), self.src.size(1), self.tgt_in.size(1)
        if rows < b or src_steps < s or tgt_steps < t:
            raise ValueError(f"cannot pad a ({b}, {s}, {t}) batch down to ({rows}, {src_steps}, {tgt_steps})")

        def grow(x: torch.Tensor, steps: int, fill, first=None) -> torch.Tensor:  # (B, L) -> (B', steps)
            out = x.new_full((rows, steps), fill)
            out[:b, : x.size(1)] = x
            if first is not None:
                out[b:, 0] = first
            return out

        extra = rows - b
        return replace(
            self,
            src=grow(self.src, src_steps, PAD, UNK),
            src_len=torch.cat([self.src_len, self.src_len.new_ones(extra)]),
            src_ext=grow(self.src_ext, src_steps, PAD, UNK),
            tgt_in=grow(self.tgt_in, tgt_steps, PAD, BOS),
            tgt_out=grow(self.tgt_out, tgt_steps, PAD),
            tgt_pointer=None if self.tgt_pointer is None else grow(self.tgt_pointer, tgt_steps, -1),
            tgt_switch=None if self.tgt_switch is None else grow(self.tgt_switch, tgt_steps, False),
            features=None if self.features is None else grow(self.features, self.features.size(1), PAD),
            oovs=self.oovs + [[] for _ in range(extra)],
            ids=self.ids + ["<bucket padding>"] * extra,
            src_tokens=self.src_tokens + [["<unk>"] for _ in range(extra)],
            tgt_tokens=self.tgt_tokens + [[] for _ in range(extra)],
        )

    @property
    def n_tokens(self) -> int:
        """Target tokens, </s> included, padding excluded."""
        return int((self.tgt_out != PAD).sum())
