"""The ``evaluate`` section of params.yaml as a typed, checked settings object: decoding (beam search),
which splits are scored and how, where and how deterministically it runs, and the heat map."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.config.checks import DECODING, check_decoding
from pipeline.config.params import section
from pipeline.config.validation import dataclass_from_dict


@dataclass(frozen=True)
class HeatmapConfig:
    """``evaluate.heatmap``: the example of the CopyNet Figure 3-style heat map, the first row of
    ``split`` (default: the first scored split) whose shard columns equal ``match``."""

    split: str | None = None
    match: tuple[tuple[str, object], ...] = ()  # (column, value) pairs, e.g. rule_type: x->xx

    @classmethod
    def from_dict(cls, d: dict | None) -> HeatmapConfig:
        d = dict(d or {})
        if "match" in d:
            d["match"] = tuple((d["match"] or {}).items())
        return dataclass_from_dict(cls, d)


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
    # exact_match (CopyNet 5.1) or a text metric of pipeline.metrics.registry.text_metrics: rouge_f,
    # rouge_f_chars, rouge_recall_75, bleu, bleu_sari; split_metrics overrides it per split.
    metric: str = "exact_match"
    split_metrics: tuple[tuple[str, str], ...] = ()
    optional_splits: tuple[str, ...] = ()  # evaluated when their shards exist (e.g. DUC 2004)
    max_examples: int | None = None  # the first N rows of each split only (cpu presets)
    threads: int = 0  # torch CPU threads (0: torch's default); fixed for the same results everywhere
    deterministic: bool = False  # torch.use_deterministic_algorithms while decoding
    heatmap: HeatmapConfig = field(default_factory=HeatmapConfig)  # the evaluate stage's heat map example
    replace_unk: bool = False  # each output <unk> -> the source word with the highest attention at that step
    ban_unk: bool = False  # search never emits <unk> (the best other word, a copy among them)
    average_last: int = 0  # > 0: score the mean weights of the last K step checkpoints (train.keep_checkpoints)

    def __post_init__(self) -> None:
        check_decoding({k: getattr(self, k) for k in DECODING})

    @classmethod
    def from_dict(cls, d: dict) -> EvalConfig:
        d = dict(d)
        for key in ("splits", "optional_splits"):
            if key in d:
                d[key] = tuple(d[key])
        if "split_metrics" in d:
            d["split_metrics"] = tuple(sorted((d["split_metrics"] or {}).items()))
        if "heatmap" in d:
            d["heatmap"] = HeatmapConfig.from_dict(d["heatmap"])
        return dataclass_from_dict(cls, d)

    @classmethod
    def from_params(cls, params: dict) -> EvalConfig:
        """The ``evaluate`` section of (effective) params."""
        return cls.from_dict(section(params, "evaluate"))

    def metric_for(self, split: str) -> str:
        return dict(self.split_metrics).get(split, self.metric)
