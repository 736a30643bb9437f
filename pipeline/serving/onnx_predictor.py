"""An exported model answering raw text with onnxruntime and numpy only: :class:`OnnxPredictor`, the
twin of :class:`pipeline.serving.predictor.Predictor` (same inputs, limits, outputs and messages).

The path is the PyTorch predictor's, step for step: raw text -> the reader's source tokens
(:mod:`pipeline.data.corpora.raw_input`) -> batches of rows in the order and sizes the evaluate stage
forms them (:func:`length_batches`, :func:`encode_rows`) -> beam search
(:func:`pipeline.serving.onnx_search.beam_search`) -> extended ids back to words
(:func:`pipeline.vocab.extended.ext_ids_to_tokens`), ``<unk>`` replaced when ``replace_unk`` -> text
(:func:`pipeline.data.corpora.raw_input.detokenize`). :func:`decode_rows` is
:func:`pipeline.decoding.decode.decode_table`'s record for record. No torch is imported.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.data.corpora.raw_input import detokenize
from pipeline.serving.limits import RequestChecks, ServingConfig, verify_files
from pipeline.serving.onnx_model import OnnxModel
from pipeline.serving.onnx_search import DecodeCancelled, beam_search, check_interrupt
from pipeline.vocab.extended import ext_ids_to_tokens, extend_example
from pipeline.vocab.tokenizer import RECORD, BackboneTokenizer
from pipeline.vocab.vocabulary import EOS, FEATURES_VOCAB, PAD, SPECIALS, UNK, Vocab

UNK_TOKEN = SPECIALS[UNK]
SERVING_JSON = "serving.json"
BUCKET = 50  # pipeline.vocab.batching.token_batches: rows are length-sorted within blocks of 50 batches


def length_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Row indices in batches, as :func:`pipeline.vocab.batching.token_batches` cuts them for decoding
    (no shuffling, no token budget): blocks of ``batch_size`` x 50 rows, each sorted by length
    (stably), cut every ``batch_size`` rows. ``lengths``: source + target length per row."""
    order = np.arange(len(lengths))
    total = np.asarray(lengths, dtype=np.int64)
    block = batch_size * BUCKET
    out = []
    for start in range(0, len(order), block):
        rows = order[start : start + block]
        rows = rows[np.argsort(total[rows], kind="stable")]
        out += [rows[i : i + batch_size].tolist() for i in range(0, len(rows), batch_size)]
    return out


def _pad(rows: list[list[int]]) -> np.ndarray:
    width = max(1, max(len(r) for r in rows))
    out = np.full((len(rows), width), PAD, np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def encode_rows(
    sources: list[list[str]],
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    max_src_len: int | None = None,
    features: list[list[str]] | None = None,
    features_vocab: Vocab | None = None,
) -> tuple[dict[str, np.ndarray], list[list[str]], list[list[str]], int]:
    """The encoder's inputs of one batch as :func:`pipeline.vocab.batching.collate` builds them (the
    source cut at ``max_src_len``; an empty source read as one ``</s>``): (inputs, the source tokens,
    each row's OOVs (extended id V + k is ``oovs[k]``), the number of extended slots X)."""
    if max_src_len:
        sources = [s[:max_src_len] for s in sources]
    sources = [s if s else [tgt_vocab.itos[EOS]] for s in sources]
    ext = [extend_example(s, None, tgt_vocab) for s in sources]
    inputs = {
        "src": _pad([src_vocab.encode(s) for s in sources]),
        "src_len": np.array([len(s) for s in sources], np.int64),
        "src_ext": _pad([e.src_ext for e in ext]),
    }
    if features is not None:
        inputs["features"] = _pad([features_vocab.encode(f) for f in features])
    return inputs, sources, [e.oovs for e in ext], max(len(e.oovs) for e in ext)


def replace_unk(tokens: list[str], hyp, src_tokens: list[str]) -> list[str]:
    """Each ``<unk>`` -> the source word attended to most at that step
    (:func:`pipeline.decoding.decode.replace_unk`)."""
    attn = (hyp.trace or {}).get("attn")
    if attn is None or UNK_TOKEN not in tokens:
        return tokens
    best = attn[: len(tokens), : len(src_tokens)].argmax(axis=1).tolist()
    return [src_tokens[best[t]] if tok == UNK_TOKEN else tok for t, tok in enumerate(tokens)]


def decode_rows(
    model: OnnxModel,
    sources: list[list[str]],
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    cfg,
    deadline: float | None = None,
    stop=None,
    features: list[list[str]] | None = None,
    features_vocab: Vocab | None = None,
    lengths: Sequence[int] | None = None,
) -> list[dict]:
    """Beam-search every source (token lists); prediction records in the input order, as
    :func:`pipeline.decoding.decode.decode_table` gives them: ``src``, ``pred``, ``nbest``, ``scores``
    (rounded to 4 places), ``copied``. ``cfg``: an :class:`pipeline.decoding.settings.EvalConfig`;
    ``lengths``: what rows are batched by (default: the source lengths, as for rows without a
    target; decode_table batches a split's rows by source + target length)."""
    records: list[dict | None] = [None] * len(sources)
    lengths = [len(s) for s in sources] if lengths is None else lengths
    for rows in length_batches(lengths, cfg.batch_size):
        check_interrupt(deadline, stop)
        inputs, src_tokens, oovs, n_ext = encode_rows(
            [sources[r] for r in rows],
            src_vocab,
            tgt_vocab,
            cfg.max_src_len,
            None if features is None else [features[r] for r in rows],
            features_vocab,
        )
        nbest = beam_search(
            model,
            inputs,
            n_ext,
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
        for i, row in enumerate(rows):
            outs = [ext_ids_to_tokens(h.ids, oovs[i], tgt_vocab) for h in nbest[i]]
            if cfg.replace_unk:
                outs = [replace_unk(out, h, src_tokens[i]) for out, h in zip(outs, nbest[i])]
            records[row] = {
                "src": src_tokens[i],
                "pred": outs[0],
                "nbest": outs,
                "scores": [round(h.score, 4) for h in nbest[i]],
                "copied": [tok for tok in outs[0] if tok in oovs[i]],
            }
    return records  # type: ignore[return-value]


class OnnxPredictor(RequestChecks):
    """Raw text -> output text with an exported model (:mod:`pipeline.serving.export`), within the
    limits of its :class:`ServingConfig`; :meth:`predict` answers as
    :meth:`pipeline.serving.predictor.Predictor.predict`."""

    def __init__(
        self,
        export_dir: str | Path,
        config: ServingConfig | None = None,
        threads: int | None = None,
        verify: bool = True,
    ) -> None:
        export_dir = Path(export_dir)
        self.dir = export_dir
        if config is None:
            config = ServingConfig.from_dict(_read_json(export_dir / SERVING_JSON))
        self.config = config
        files = [export_dir / name for name in sorted(config.files)]
        missing = [str(p) for p in files if not p.exists()]
        if missing:
            raise ValueError(f"{', '.join(missing)}: missing from the exported model")
        if verify:
            verify_files(config, files)
        self.model = OnnxModel(export_dir, threads)
        self.src_vocab, self.tgt_vocab = Vocab.load(export_dir / "src.vocab"), Vocab.load(export_dir / "tgt.vocab")
        features = export_dir / FEATURES_VOCAB
        self.features_vocab = Vocab.load(features) if features.is_file() else None
        subword = export_dir / "subword.model"
        self.subword_model = str(subword) if subword.is_file() else None
        # A model on a pretrained backbone: its tokenizer (exported beside the graphs) turns the reader's
        # tokens into pieces and the output pieces back into text, as the PyTorch predictor does.
        self.backbone = BackboneTokenizer.load(export_dir) if (export_dir / RECORD).is_file() else None
        self.init_checks()

    def predict(
        self,
        texts: Sequence[str],
        beam_size: int | None = None,
        max_len: int | None = None,
        deadline: float | None = None,
        pretokenized: bool | None = None,
        features: Sequence[Any] | None = None,
    ) -> list[dict]:
        """One dict per text: ``src``, ``tokens``, ``output``, ``copied``, ``score``, ``warning``, as
        :meth:`pipeline.serving.predictor.Predictor.predict` (every limit checked first)."""
        if deadline is None:
            deadline = time.monotonic() + float(self.config.request_timeout_s)
        beam_size, max_len, sources, tags, out = self.admit(texts, beam_size, max_len, pretokenized, features)
        todo = [i for i, s in enumerate(sources) if s]
        if not todo:
            return out
        if self.stop.is_set():
            raise DecodeCancelled("stopped before decoding")
        longest = max(len(sources[i]) for i in todo)
        rows = max(1, min(self.config.batch_size, self.config.max_batch_positions // (beam_size * longest)))
        cfg = self.config.eval_config(beam_size=beam_size, max_len=max_len, batch_size=rows)
        with self._slot(deadline):
            todo_sources = [sources[i] for i in todo]
            records = decode_rows(
                self.model,
                self.backbone.words_to_pieces(todo_sources) if self.backbone is not None else todo_sources,
                self.src_vocab,
                self.tgt_vocab,
                cfg,
                deadline=deadline,
                stop=self.stop,
                features=[tags[i] for i in todo] if self.features_vocab is not None else None,
                features_vocab=self.features_vocab,
            )
        if self.backbone is not None:
            # tokens: the text each output piece adds. copied: the copied source pieces outside the
            # vocabulary (the PyTorch predictor also lists known pieces mostly copied, which needs the
            # copy-only distribution the step graph does not return)
            for i, rec in zip(todo, records):
                spans = self.backbone.spans(rec["pred"])
                copied = [span for span, piece in zip(spans, rec["pred"]) if piece in rec["copied"] and span.strip()]
                out[i].update(tokens=spans, copied=copied, score=rec["scores"][0], output="".join(spans).strip())
            return out
        for i, rec in zip(todo, records):
            out[i].update(
                tokens=rec["pred"],
                copied=rec["copied"],
                score=rec["scores"][0],
                output=detokenize(rec["pred"], self.config.prepare, self.subword_model),
            )
        return out


def _read_json(path: Path) -> dict:
    if not path.is_file():
        raise ValueError(f"{path}: no such file: not an exported model (copyseq export writes one)")
    return json.loads(path.read_text(encoding="utf-8"))
