"""The task's own metric on the validation split, for choosing checkpoints while training
(``train.select_by: metric``) and epoch budgets (scripts/convergence.py).

The validation rows are decoded as the evaluate stage decodes, with the search narrowed to
``train.select_beam`` (1: greedy, far cheaper than the evaluate stage's beam, and said so in the
learning curve's column name), and scored by the key the task's champion is chosen by
(:func:`pipeline.config.tasks.selection_metric`): exact-match top-1, ROUGE-2, BLEU, ...
Only the validation split is ever read here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pyarrow as pa
import torch

from pipeline.config.backbones import row_vocab_dir
from pipeline.config.tasks import selection_metric
from pipeline.decoding.decode import decode_table, decode_words
from pipeline.decoding.scoring import score_records
from pipeline.decoding.settings import EvalConfig
from pipeline.io.shards import read_split
from pipeline.runtime.device import resolve_device
from pipeline.vocab.tokenizer import RECORD, BackboneTokenizer
from pipeline.vocab.vocabulary import Vocab, load_features_vocab

VALID = "valid"


@dataclasses.dataclass(frozen=True)
class ValidationScorer:
    """``scorer(model) -> value`` of ``key`` on the validation rows (higher is better)."""

    table: pa.Table  # the validation rows scored (already cut to train.max_valid_examples)
    vocabs: tuple[Vocab, Vocab]
    cfg: EvalConfig  # the task's evaluate settings with the search narrowed to the selection beam
    key: str  # the metric key, e.g. top1, rouge2, bleu
    device: torch.device
    tokenizer: BackboneTokenizer | None = None  # a row on a pretrained backbone decodes its pieces
    features_vocab: Vocab | None = None  # a task with a features column: its tags

    @property
    def name(self) -> str:
        """The learning curve's column: ``valid_top1_greedy`` / ``valid_rouge2_beam5``."""
        beam = "greedy" if self.cfg.beam_size == 1 else f"beam{self.cfg.beam_size}"
        return f"valid_{self.key}_{beam}"

    def __call__(self, model) -> float:
        was_training = model.training
        model.eval()
        with torch.inference_mode():
            if self.tokenizer is not None:
                records = decode_words(model, self.table, self.tokenizer, self.cfg, self.device, desc="validation")
            else:
                records = decode_table(
                    model,
                    self.table,
                    *self.vocabs,
                    self.cfg,
                    self.device,
                    desc="validation",
                    features_vocab=self.features_vocab,
                )
        model.train(was_training)
        return float(score_records(records, self.cfg, VALID)[self.key])


def validation_scorer(
    table: pa.Table,
    vocabs: tuple[Vocab, Vocab],
    eval_cfg: EvalConfig,
    key: str,
    beam: int,
    device: torch.device,
    limit: int | None = None,
    tokenizer: BackboneTokenizer | None = None,
    features_vocab: Vocab | None = None,
) -> Callable[[torch.nn.Module], float]:
    """A :class:`ValidationScorer` over the first ``limit`` rows of ``table`` (the valid split), with a
    beam of ``beam`` (the top-k the metric needs is kept within it)."""
    rows = table if limit is None or limit >= table.num_rows else table.slice(0, limit)
    cfg = dataclasses.replace(eval_cfg, beam_size=beam, topk=min(eval_cfg.topk, beam))
    return ValidationScorer(rows, vocabs, cfg, key, device, tokenizer, features_vocab)


def job_scorer(job) -> ValidationScorer | None:
    """The scorer a training job (:class:`pipeline.training.job.TrainJob`) passes to its loop when its
    checkpoints are chosen by the task's metric (``train.select_by: metric``), else None: the valid
    split's rows (``train.max_valid_examples`` of them), the row's vocabularies (a backbone row: its
    tokenizer) and the task's evaluate settings and selection metric."""
    cfg = job.train_cfg
    if cfg.select_by != "metric":
        return None
    _, key, _ = selection_metric(job.params, job.paths.task)
    vocab_dir = job.vocab_dir or row_vocab_dir(job.paths.vocab, job.params.get("model"), job.base)  # as the job's
    tokenizer = BackboneTokenizer.load(vocab_dir) if (vocab_dir / RECORD).is_file() else None
    return validation_scorer(
        read_split(job.paths.split(VALID)),
        (job.src_vocab, job.tgt_vocab),
        EvalConfig.from_params(job.params),
        key,
        cfg.select_beam,
        resolve_device(cfg.device),
        limit=cfg.max_valid_examples,
        tokenizer=tokenizer,
        features_vocab=load_features_vocab(job.paths.vocab),
    )
