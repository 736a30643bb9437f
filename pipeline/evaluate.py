"""Decode a test split with batched beam search and score it (exact match top-1 / top-k)."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import pyarrow as pa
import torch
from tqdm import tqdm

from pipeline.config.validation import dataclass_from_dict
from pipeline.metrics import exact_match_by_group, text_metrics
from pipeline.search import beam_search, check_interrupt, greedy
from pipeline.vocab.batching import batch_from_rows, row_lengths, token_batches
from pipeline.vocab.extended import ext_ids_to_tokens
from pipeline.vocab.vocabulary import Vocab


@dataclass(frozen=True)
class EvalConfig:
    beam_size: int = 10  # CopyNet 5.1: "bin size = 10"
    max_len: int = 60
    min_len: int = 0
    length_penalty: float = 0.0
    block_ngram: int = 0
    batch_size: int = 64
    topk: int = 10
    splits: tuple[str, ...] = ("test",)
    group_by: str | None = None  # shard column to break metrics down by (e.g. rule_type)
    max_src_len: int | None = None
    device: str = "auto"
    # exact_match (CopyNet 5.1) or a text metric of pipeline.metrics.text_metrics: rouge_f,
    # rouge_f_chars, rouge_recall_75, bleu, bleu_sari; split_metrics overrides it per split.
    metric: str = "exact_match"
    split_metrics: tuple[tuple[str, str], ...] = ()
    optional_splits: tuple[str, ...] = ()  # evaluated when their shards exist (e.g. DUC 2004)
    max_examples: int | None = None  # the first N rows of each split only (cpu presets)
    threads: int = 0  # torch CPU threads (0: torch's default); fixed for the same results everywhere
    deterministic: bool = False  # torch.use_deterministic_algorithms while decoding

    @classmethod
    def from_dict(cls, d: dict) -> EvalConfig:
        d = dict(d)
        for key in ("splits", "optional_splits"):
            if key in d:
                d[key] = tuple(d[key])
        if "split_metrics" in d:
            d["split_metrics"] = tuple(sorted((d["split_metrics"] or {}).items()))
        return dataclass_from_dict(cls, d)

    def metric_for(self, split: str) -> str:
        return dict(self.split_metrics).get(split, self.metric)


def decode_table(
    model,
    table: pa.Table,
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    cfg: EvalConfig,
    device: torch.device,
    desc: str = "decode",
    deadline: float | None = None,
    stop: threading.Event | None = None,
) -> list[dict]:
    """Beam-search every row; returns prediction records in the table's row order. ``deadline`` (a
    ``time.monotonic()`` value) / ``stop`` (an event): checked before every batch and decoding step,
    :class:`pipeline.search.DecodeTimeout` / :class:`pipeline.search.DecodeCancelled` when hit."""
    extra_cols = tuple(c for c in (cfg.group_by, "refs", "refs_raw") if c and c in table.column_names)
    records: list[dict | None] = [None] * table.num_rows
    batches = token_batches(*row_lengths(table), cfg.batch_size)
    for rows in tqdm(batches, desc=desc, unit="batch", disable=None, leave=False):
        rows = rows.tolist()
        check_interrupt(deadline, stop)
        batch = batch_from_rows(table, rows, src_vocab, tgt_vocab, extra_cols, cfg.max_src_len).to(device)
        nbest = beam_search(
            model,
            batch,
            cfg.beam_size,
            cfg.max_len,
            cfg.min_len,
            cfg.length_penalty,
            cfg.block_ngram,
            deadline=deadline,
            stop=stop,
        )
        for i, row in enumerate(rows):
            outs = [ext_ids_to_tokens(h.ids, batch.oovs[i], tgt_vocab) for h in nbest[i]]
            rec = {
                "id": batch.ids[i],
                "src": batch.src_tokens[i],
                "tgt": batch.tgt_tokens[i],
                "pred": outs[0],
                "nbest": outs,
                "scores": [round(h.score, 4) for h in nbest[i]],
                "copied": [tok for tok in outs[0] if tok in batch.oovs[i]],
            }
            for col in extra_cols:
                rec[col] = batch.extra[col][i]
            records[row] = rec
    return records  # type: ignore[return-value]


def score_records(records: list[dict], cfg: EvalConfig, split: str = "test") -> dict:
    """The split's metrics: exact match (top-1/top-k, per group) or the task's text metric, whose
    references are the shard's ``refs`` (every reference) when present, else ``tgt``."""
    kind = cfg.metric_for(split)
    if kind == "exact_match":
        groups = [r[cfg.group_by] for r in records] if cfg.group_by else None
        return exact_match_by_group([r["tgt"] for r in records], [r["nbest"] for r in records], groups, cfg.topk)
    refs = [r.get("refs") or [r["tgt"]] for r in records]
    refs_raw = [r["refs_raw"] for r in records] if records and all(r.get("refs_raw") for r in records) else None
    return {
        "metric": kind,
        **text_metrics(kind, [r["pred"] for r in records], refs, [r["src"] for r in records], refs_raw=refs_raw),
    }


def copy_trace(
    model, table: pa.Table, row: int, src_vocab: Vocab, tgt_vocab: Vocab, max_len: int, device: torch.device
) -> dict:
    """Greedy-decode one example and return its per-step copy-mode (or attention) weights.

    CopyNet Figure 3: p(x_tau, c | .) of every input position (columns) at every output step
    (rows). Mechanisms without a copy mode give their attention weights instead.
    """
    batch = batch_from_rows(table, [row], src_vocab, tgt_vocab).to(device)
    hyp = greedy(model, batch, max_len, trace_keys=("copy_logp", "attn"))[0]
    trace = hyp.trace or {}
    if "copy_logp" in trace:
        weights, kind = trace["copy_logp"].exp(), "copy-mode probability p(x, c | s_t)"
    else:
        weights, kind = trace.get("attn"), "attention weight"
    out_tokens = ext_ids_to_tokens(hyp.ids, batch.oovs[0], tgt_vocab)
    steps = len(out_tokens) + (1 if len(out_tokens) < len(hyp.ids) else 0)  # include </s> when emitted
    return {
        "src": batch.src_tokens[0],
        "out": out_tokens + ["</s>"] * (steps - len(out_tokens)),
        "weights": None if weights is None else weights[:steps].tolist(),
        "kind": kind,
        "gold": batch.tgt_tokens[0],
    }
