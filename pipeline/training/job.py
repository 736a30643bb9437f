"""One training job: (project root, task, mechanism) -> the trained checkpoint directory.

The train stage runs it in its own process, or, with ``train.nproc`` > 1 or ``train.nnodes`` > 1, on
every process of a torchrun job (:func:`pipeline.stages.train.worker_main`: ``python -m
pipeline.stages.train``), where rank 0 writes the checkpoint directory.

``mechanism`` is the row's name: a mechanism, or a variant of one (params.yaml ``variants``,
:mod:`pipeline.config.variants`), whose base mechanism is built and whose name names the folders;
model.pt records the base as ``mechanism`` and, for a variant, the row as ``variant``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from models.param_count import output_layer_parameters
from models.registry import MECHANISMS, model_config, reads_source_words, source_words
from pipeline.config.backbones import row_vocab_dir
from pipeline.config.params import section
from pipeline.config.paths import TaskPaths
from pipeline.config.validation import SettingsError
from pipeline.config.variants import resolve
from pipeline.training.checkpoints import vocab_identity
from pipeline.training.distributed import ONE_PROCESS, DistContext
from pipeline.training.loop import build_seeded_model, train
from pipeline.training.settings import TrainConfig
from pipeline.vocab.encoded import EncodedSplit
from pipeline.vocab.vocabulary import Vocab, load_features_vocab


@dataclass
class TrainJob:
    paths: TaskPaths
    mechanism: str  # the row: a mechanism or a variant's name (folders, runs)
    params: dict  # the task's effective params for it (presets and the variant's sections applied)
    vocab_dir: Path | None = None  # vocabularies and encoded splits (default: the vocab stage's output)

    def __post_init__(self) -> None:
        self.variant = resolve(self.params, self.mechanism, known=MECHANISMS)
        self.base = self.variant.mechanism  # what models.registry builds
        # A row on a pretrained backbone reads the vocab stage's output for that backbone's tokenizer.
        vocab_dir = self.vocab_dir or row_vocab_dir(self.paths.vocab, section(self.params, "model"), self.base)
        self.src_vocab = Vocab.load(vocab_dir / "src.vocab")
        self.tgt_vocab = Vocab.load(vocab_dir / "tgt.vocab")
        # A task with a features column: the tags' vocabulary (the task's, whatever the row's vocab_dir).
        self.features_vocab = load_features_vocab(self.paths.vocab)
        try:  # the mechanism's own options (model.<mechanism>) and the sizes it accepts, before any work
            self.model_cfg = model_config(
                section(self.params, "model"),
                self.base,
                src_vocab=len(self.src_vocab),
                tgt_vocab=len(self.tgt_vocab),
                features_vocab=len(self.features_vocab) if self.features_vocab is not None else 0,
            )
        except ValueError as err:
            raise SettingsError(f"params.yaml ({self.mechanism}): {err}") from None
        missing = [w for w in source_words(self.base, self.model_cfg) if w not in self.src_vocab]
        if missing:
            raise SettingsError(
                f"params.yaml ({self.mechanism}): model.{self.base} looks for {', '.join(map(repr, missing))} in the "
                f"sources, which the source vocabulary of {len(self.src_vocab)} words lacks: training would read "
                "<unk> there and decoding the word itself; choose words of the vocabulary (sentence_end) or keep "
                "them in it (vocab.min_count, vocab.src_max_size)"
            )
        evaluate = self.params.get("evaluate") or {}
        valid_kind = (evaluate.get("split_metrics") or {}).get("valid", evaluate.get("metric", "exact_match"))
        self.train_cfg = TrainConfig.from_dict(section(self.params, "train")).resolved(valid_kind)
        self.splits = {
            s: EncodedSplit(vocab_dir / "ids" / s, len(self.tgt_vocab), self.train_cfg.max_src_len)
            for s in ("train", "valid")
        }

    @property
    def data_hash(self) -> str:
        """The id-encoded splits' content hashes (they cover the shards and the vocabularies)."""
        return "".join(split.manifest["content_sha256"] for split in self.splits.values())

    @property
    def distributed(self) -> bool:
        return self.train_cfg.nproc > 1 or self.train_cfg.nnodes > 1

    @property
    def seeds(self) -> list[int]:
        """The row's training seeds (train.seeds of them from train.seed); the first is the registered model."""
        return [self.train_cfg.with_seed(i).seed for i in range(self.train_cfg.seeds)]

    def checkpoints(self, seed: int) -> Path:
        """Where the training of ``seed`` writes model.pt and history.json: the stage's checkpoint
        folder for the first seed, its ``seeds/<seed>/`` for the others."""
        top = self.paths.checkpoints(self.mechanism)
        return top if seed == self.train_cfg.seed else top / "seeds" / str(seed)

    def state(self, seed: int) -> Path:
        """Where the training of ``seed`` keeps its resumable last.pt (and run.json)."""
        top = self.paths.train_state(self.mechanism)
        return top if seed == self.train_cfg.seed else top / "seeds" / str(seed)

    def build_model(self, seed: int | None = None):
        model = build_seeded_model(self.base, self.model_cfg, self.train_cfg.seed if seed is None else seed)
        return model, {
            "n_parameters": sum(p.numel() for p in model.parameters()),
            "output_layer_parameters": output_layer_parameters(model),
        }  # WEAN Table 5's quantity

    def run(
        self,
        ctx: DistContext = ONE_PROCESS,
        on_validate: Callable[[dict], None] | None = None,
        on_step: Callable[[dict], None] | None = None,
        checkpoints: Path | None = None,
        state: Path | None = None,
        run_key: str = "",
        score_valid: Callable | None = None,
        seed: int | None = None,
    ) -> list[dict]:
        """Train with ``seed`` (default: train.seed) into ``checkpoints`` (default: :meth:`checkpoints`
        of the seed, model.pt and history.json) with the resumable last.pt in ``state`` (default:
        :meth:`state` of the seed, unless ``checkpoints`` is given: then there); ``run_key``: the
        training run's identity (the train stage's MLflow run id), see pipeline.training.loop;
        ``score_valid``: the task's validation metric (train.select_by: metric)."""
        seed = self.train_cfg.seed if seed is None else seed
        if state is None:
            state = checkpoints or self.state(seed)
        model, _ = self.build_model(seed)
        source = self.src_vocab if reads_source_words(self.base, self.model_cfg) else None
        return train(
            model,
            self.splits["train"],
            self.splits["valid"],
            replace(self.train_cfg, seed=seed),
            checkpoints or self.checkpoints(seed),
            model_config=vars(
                model.cfg
            ),  # as built: a backbone's loaded config is recorded, so model.pt rebuilds alone
            data_hash=self.data_hash,
            on_validate=on_validate,
            on_step=on_step,
            ctx=ctx,
            source_vocab=source,
            model_info={
                "mechanism": self.base,
                **({"variant": self.mechanism} if self.variant.is_variant else {}),
                "vocab": {"src": vocab_identity(self.src_vocab), "tgt": vocab_identity(self.tgt_vocab)},
            },
            state_dir=state,
            run_key=run_key,
            score_valid=score_valid,
        )
