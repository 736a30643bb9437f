"""One trained model answering raw text, with no MLflow in it: :class:`Predictor` and its settings.

:class:`Predictor` is the whole path: raw text -> the corpus reader's source tokens
(:mod:`pipeline.data.corpora.raw_input`) -> the project's batched beam search
(:func:`pipeline.decoding.decode.decode_table`, so a prediction here equals the evaluate stage's for
the same tokens) -> extended ids back to words, a source word outside the decoder vocabulary coming
out as itself when the model copies it (:func:`pipeline.vocab.extended.ext_ids_to_tokens`) -> text
(:func:`pipeline.data.corpora.raw_input.detokenize`). ``copied`` lists those output tokens that are
source words outside the decoder vocabulary: only a copy (pointer) can produce them, so they are the
copies one can be sure of (a copy of an in-vocabulary word looks like a generated one).

A model trained on a corpus with a features column (tags kept apart from the source,
docs/own_data.md) takes, beside each text, its features: a text split as the column was
(``V;PST;3;SG``) or a list of tags (``features``, with the vocab stage's ``features.vocab``); a text
without them is decoded with none, a tag the model never saw adds a ``warning``.

:class:`ServingConfig` is what a served model needs besides its weights and vocabularies
(``serving.json``, :mod:`pipeline.serving.limits`, shared with the ONNX predictor): the reader settings, the decoding settings of the evaluate stage, and the
limits of ``params['serving']`` (docs/tracking.md): texts per request, characters per text, source
tokens per text, the largest ``beam_size``/``max_len`` a client may ask for, a decoding deadline per
request and the number of decodes at once. A violation is refused before anything is decoded
(:class:`InputRejected`), never silently clamped. A source whose tokens are mostly outside the
source vocabulary is decoded but its row carries a ``warning``. Decoding checks the deadline and a
stop event between steps (:class:`pipeline.decoding.search.DecodeTimeout` /
:class:`pipeline.decoding.search.DecodeCancelled`). The MLflow face of a Predictor:
:mod:`pipeline.serving.pyfunc`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from pipeline.data.corpora.raw_input import detokenize
from pipeline.decoding.decode import decode_table, decode_words
from pipeline.decoding.search import DecodeCancelled
from pipeline.runtime.device import resolve_device
from pipeline.serving.limits import (  # noqa: F401  (the settings and refusals: re-exported for the predictor's callers)
    DECODE_KEYS,
    LIMIT_KEYS,
    InputRejected,
    RequestChecks,
    ServerBusy,
    ServingConfig,
    verify_files,
)
from pipeline.training.checkpoints import load_model
from pipeline.vocab.tokenizer import RECORD, BackboneTokenizer
from pipeline.vocab.vocabulary import FEATURES_VOCAB, Vocab


class Predictor(RequestChecks):
    """Raw text -> output text with one trained model (no MLflow involved), within the limits of
    its :class:`ServingConfig`."""

    def __init__(
        self,
        checkpoint: str | Path,
        src_vocab: str | Path,
        tgt_vocab: str | Path,
        config: ServingConfig,
        subword_model: str | Path | None = None,
        backbone_tokenizer: str | Path | None = None,
        features_vocab: str | Path | None = None,
    ) -> None:
        self.config = config
        self.device = resolve_device(config.device)
        self.src_vocab, self.tgt_vocab = Vocab.load(src_vocab), Vocab.load(tgt_vocab)
        # A model on a pretrained backbone: its tokenizer (the vocab stage's backbones/<name>/) turns the
        # reader's tokens into pieces and the output pieces back into text.
        self.backbone = BackboneTokenizer.load(backbone_tokenizer) if backbone_tokenizer else None
        self.model, _ = load_model(checkpoint, config.mechanism, self.device, (self.src_vocab, self.tgt_vocab))
        # A model trained with a features column: its tags' vocabulary, and how a features text splits.
        self.features_vocab = Vocab.load(features_vocab) if features_vocab else None
        size = len(self.features_vocab) if self.features_vocab else 0
        if getattr(self.model.cfg, "features_vocab", 0) != size:
            raise ValueError(
                f"{checkpoint}: the model reads {self.model.cfg.features_vocab} feature ids, given a features "
                f"vocabulary of {size}: give the {FEATURES_VOCAB} of its task's vocab stage"
            )
        self.subword_model = str(subword_model) if subword_model else None
        self.init_checks()  # the tokenisers (raw or ``pretokenized`` text), the decoding slots, the stop event

    @classmethod
    def from_checkpoint_dir(
        cls,
        checkpoint_dir: str | Path,
        vocab_dir: str | Path,
        config: ServingConfig,
        subword_model: str | Path | None = None,
    ) -> Predictor:
        """``<checkpoint_dir>/model.pt`` with ``<vocab_dir>/{src,tgt}.vocab`` (the stage outputs; a
        backbone's vocabulary directory also holds its tokenizer, a task with features its
        ``features.vocab``)."""
        checkpoint_dir, vocab_dir = Path(checkpoint_dir), Path(vocab_dir)
        backbone = vocab_dir if (vocab_dir / RECORD).is_file() else None
        features = vocab_dir / FEATURES_VOCAB if (vocab_dir / FEATURES_VOCAB).is_file() else None
        return cls(
            checkpoint_dir / "model.pt",
            vocab_dir / "src.vocab",
            vocab_dir / "tgt.vocab",
            config,
            subword_model,
            backbone,
            features,
        )

    # ----------------------------------------------------------------------------- decoding
    def predict(
        self,
        texts: Sequence[str],
        beam_size: int | None = None,
        max_len: int | None = None,
        deadline: float | None = None,
        pretokenized: bool | None = None,
        features: Sequence[Any] | None = None,
    ) -> list[dict]:
        """One dict per text, in order: ``src`` (tokens), ``tokens`` (output tokens), ``output``
        (text), ``copied`` (output tokens that are source words outside the decoder vocabulary),
        ``score`` (log-probability of the best hypothesis), ``warning`` ('' or why the output is
        likely unreliable). An empty source gives an empty output. ``pretokenized``: the texts are
        already in the corpus's token form, space-separated (None: the config's ``pretokenized``).
        ``features``: one per text (:meth:`check_features`), for a model trained with a features
        column; None: no text has any.

        Every limit is checked before decoding (:class:`InputRejected`). ``deadline`` (a
        ``time.monotonic()`` value; default: now + ``request_timeout_s``) ends decoding with
        :class:`pipeline.decoding.search.DecodeTimeout`; :attr:`stop` set ends it with
        :class:`pipeline.decoding.search.DecodeCancelled`; no slot free before the deadline: :class:`ServerBusy`."""
        if deadline is None:
            deadline = time.monotonic() + float(self.config.request_timeout_s)
        beam_size, max_len, sources, tags, out = self.admit(texts, beam_size, max_len, pretokenized, features)
        todo = [i for i, s in enumerate(sources) if s]
        if not todo:
            return out
        if self.stop.is_set():
            raise DecodeCancelled("stopped before decoding")
        list_type = pa.list_(pa.string())
        columns = {
            "id": pa.array([str(i) for i in todo]),
            "src": pa.array([sources[i] for i in todo], type=list_type),
            "tgt": pa.array([[] for _ in todo], type=list_type),
        }
        if self.features_vocab is not None:
            columns["features"] = pa.array([tags[i] for i in todo], type=list_type)
        table = pa.table(columns)
        # Memory is about beam rows x source positions per batch: fewer rows per batch for long sources.
        longest = max(len(sources[i]) for i in todo)
        rows = max(1, min(self.config.batch_size, self.config.max_batch_positions // (beam_size * longest)))
        cfg = self.config.eval_config(beam_size=beam_size, max_len=max_len, batch_size=rows)
        with self._slot(deadline):
            if self.backbone is not None:
                records = decode_words(
                    self.model, table, self.backbone, cfg, self.device, "predict", deadline=deadline, stop=self.stop
                )
            else:
                records = decode_table(
                    self.model,
                    table,
                    self.src_vocab,
                    self.tgt_vocab,
                    cfg,
                    self.device,
                    desc="predict",
                    deadline=deadline,
                    stop=self.stop,
                    features_vocab=self.features_vocab,
                )
        if self.backbone is not None:  # tokens: the text each output piece adds; copied: those mostly copied
            for i, rec in zip(todo, records):
                text = "".join(rec["spans"]).strip()
                out[i].update(tokens=rec["spans"], copied=rec["copied"], score=rec["scores"][0], output=text)
            return out
        for i, rec in zip(todo, records):
            tokens = rec["pred"]
            out[i].update(
                tokens=tokens,
                copied=rec["copied"],
                score=rec["scores"][0],
                output=detokenize(tokens, self.config.prepare, self.subword_model),
            )
        return out
