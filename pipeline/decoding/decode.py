"""Decode a split with batched beam search: prediction records in the table's row order (the evaluate
stage, serving and ``predict`` all decode through :func:`decode_table`), and one example's per-step
copy or attention weights for the heat map (:func:`copy_trace`). Scoring the records:
:mod:`pipeline.decoding.scoring`."""

from __future__ import annotations

import threading

import pyarrow as pa
import torch
from tqdm import tqdm

from models.extended import NEG, gold_log_probs
from pipeline.decoding.search import beam_search, check_interrupt, greedy
from pipeline.decoding.settings import EvalConfig
from pipeline.vocab.batching import batch_from_rows, row_lengths, token_batches
from pipeline.vocab.extended import ext_ids_to_tokens
from pipeline.vocab.vocabulary import BOS, PAD, SPECIALS, UNK, Vocab

UNK_TOKEN = SPECIALS[UNK]


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
    shares: bool = False,
    features_vocab: Vocab | None = None,
) -> list[dict]:
    """Beam-search every row; returns prediction records in the table's row order. ``features_vocab``:
    the task's, for a table with a features column (each record then has its ``features``). ``deadline`` (a
    ``time.monotonic()`` value) / ``stop`` (an event): checked before every batch and decoding step,
    :class:`pipeline.decoding.search.DecodeTimeout` / :class:`pipeline.decoding.search.DecodeCancelled` when hit.
    ``shares``: each record also has ``copy_share``, per token of the best output the share of its
    probability that copying gave (:func:`copy_shares`)."""
    extra_cols = tuple(c for c in (cfg.group_by, "refs", "refs_raw") if c and c in table.column_names)
    records: list[dict | None] = [None] * table.num_rows
    features = table.column("features").to_pylist() if "features" in table.column_names else None
    batches = token_batches(*row_lengths(table), cfg.batch_size)
    for rows in tqdm(batches, desc=desc, unit="batch", disable=None, leave=False):
        rows = rows.tolist()
        check_interrupt(deadline, stop)
        batch = batch_from_rows(table, rows, src_vocab, tgt_vocab, extra_cols, cfg.max_src_len, features_vocab)
        batch = batch.to(device)
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
            ban_unk=cfg.ban_unk,
            keep_attention=cfg.replace_unk,
        )
        best_shares = copy_shares(model, batch, [hyps[0].ids for hyps in nbest]) if shares else None
        for i, row in enumerate(rows):
            outs = [ext_ids_to_tokens(h.ids, batch.oovs[i], tgt_vocab) for h in nbest[i]]
            if cfg.replace_unk:
                outs = [replace_unk(out, h, batch.src_tokens[i]) for out, h in zip(outs, nbest[i])]
            rec = {
                "id": batch.ids[i],
                "src": batch.src_tokens[i],
                "tgt": batch.tgt_tokens[i],
                "pred": outs[0],
                "nbest": outs,
                "scores": [round(h.score, 4) for h in nbest[i]],
                "copied": [tok for tok in outs[0] if tok in batch.oovs[i]],
            }
            if best_shares is not None:
                rec["copy_share"] = best_shares[i][: len(outs[0])]
            if features is not None:
                rec["features"] = features[row]
            for col in extra_cols:
                rec[col] = batch.extra[col][i]
            records[row] = rec
    return records  # type: ignore[return-value]


def replace_unk(tokens: list[str], hyp, src_tokens: list[str]) -> list[str]:
    """Each ``<unk>`` of ``tokens`` replaced by the source word the decoder attended to most at that
    step (Luong et al. 2015's unk replacement, OpenNMT-py's ``--replace_unk``); unchanged when the
    model has no attention (Enc-Dec). ``hyp.trace["attn"]`` (T, S): the hypothesis's attention."""
    attn = (hyp.trace or {}).get("attn")
    if attn is None or UNK_TOKEN not in tokens:
        return tokens
    best = attn[: len(tokens), : len(src_tokens)].argmax(dim=1).tolist()  # (T,) source position per step
    return [src_tokens[best[t]] if tok == UNK_TOKEN else tok for t, tok in enumerate(tokens)]


def copy_trace(
    model,
    table: pa.Table,
    row: int,
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    max_len: int,
    device: torch.device,
    features_vocab: Vocab | None = None,
) -> dict:
    """Greedy-decode one example and return its per-step copy-mode (or attention) weights.

    CopyNet Figure 3: p(x_tau, c | .) of every input position (columns) at every output step
    (rows). Mechanisms without a copy mode give their attention weights instead.
    """
    batch = batch_from_rows(table, [row], src_vocab, tgt_vocab, features_vocab=features_vocab).to(device)
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


@torch.no_grad()
def copy_shares(model, batch, outputs: list[list[int]]) -> list[list[float]]:
    """For each example's output (extended ids, as search returns them), per token the share of its
    probability that the copy side gave: p_copy(y_t) / p(y_t), from the output layer's scores with the
    output as the decoder's input (teacher forcing). 0 for every token of a layer that cannot copy.
    Pointer-generator: (1 - p_gen) sum_{x_j = y} a_j over the mixture; CopyNet: the copy mode's share
    of eq. 4; Pointer Softmax: the location side's."""
    device = batch.src.device
    width = max(1, max((len(ids) for ids in outputs), default=0))
    tgt_in = torch.full((batch.size, width), PAD, dtype=torch.long, device=device)
    target = torch.full((batch.size, width), PAD, dtype=torch.long, device=device)
    for b, ids in enumerate(outputs):
        seq = torch.tensor(ids, dtype=torch.long, device=device)
        target[b, : len(ids)] = seq
        tgt_in[b, 0] = BOS
        tgt_in[b, 1 : len(ids)] = seq[: len(ids) - 1]
    view = model.teacher_forced(model.encode(batch), tgt_in)
    scores = model.output.score_all(view["s"], view["context"], view)
    if scores.copy is None:
        return [[0.0] * len(ids) for ids in outputs]
    # log p(y_t) as the layer itself reads it: its generate scores may be logits it normalises there
    total = model.output.sequence_gold(scores, view, target, batch, objective=False)  # (B, T)
    no_gen = torch.full_like(scores.gen, NEG)
    copied = gold_log_probs(no_gen, None, scores.copy, scores.copy_shift, view["src_ext"], view["src_mask"], target)
    share = (copied - total).exp().clamp(0.0, 1.0)  # (B, T)
    return [share[b, : len(ids)].tolist() for b, ids in enumerate(outputs)]


def decode_words(
    model, table: pa.Table, tokenizer, cfg: EvalConfig, device: torch.device, desc: str = "decode", **limits
) -> list[dict]:
    """:func:`decode_table` for a model on a pretrained backbone: the rows' tokens (words) become the
    tokenizer's pieces, are decoded, and the outputs go back to text. Each record as decode_table's,
    with ``src``/``tgt`` the row's words, ``pred``/``nbest`` the output texts' words, ``pieces`` the best
    output's pieces, ``spans`` the text each adds, and ``copied`` the spans of those mostly copied
    (``copy_share`` > 1/2)."""
    extra = tuple(c for c in (cfg.group_by, "refs", "refs_raw") if c and c in table.column_names)
    pieces = tokenizer.piece_table(table, keep=extra)
    records = decode_table(model, pieces, tokenizer.vocab, tokenizer.vocab, cfg, device, desc, shares=True, **limits)
    words = {c: table.column(c).to_pylist() for c in ("src", "tgt")}
    for row, rec in enumerate(records):
        spans = tokenizer.spans(rec["pred"])
        rec["pieces"], rec["spans"] = rec["pred"], spans
        rec["copied"] = [span for span, share in zip(spans, rec["copy_share"]) if share > 0.5 and span.strip()]
        rec["nbest"] = [tokenizer.detokenise(out).split() for out in rec["nbest"]]
        rec["pred"] = rec["nbest"][0] if rec["nbest"] else []
        rec["src"], rec["tgt"] = words["src"][row], words["tgt"][row]
    return records
