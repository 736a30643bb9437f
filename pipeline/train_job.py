"""One training job: (project root, task, mechanism) -> the trained checkpoint directory.

The train flow runs it in its own process, or, with ``train.nproc`` > 1 or ``train.nnodes`` > 1,
launches it on every process under torchrun:

    python -m torch.distributed.run --standalone --nproc-per-node=2 -m pipeline.train_job \\
        --task copy_rules --mechanism copynet [--params params.yaml] [--mlflow-run-id ID]

(``pipeline.distributed.torchrun_command`` builds that line). Rank 0 writes the checkpoint directory
and, given ``--mlflow-run-id``, logs the learning curve to that MLflow run.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from models.param_count import output_layer_parameters
from models.registry import model_config
from pipeline.checkpoints import vocab_identity
from pipeline.config.params import load_params, project_root, section
from pipeline.config.paths import TaskPaths
from pipeline.config.tasks import effective_params
from pipeline.distributed import ONE_PROCESS, DistContext, init_from_env, shutdown
from pipeline.train import TrainConfig, build_seeded_model, resolve_device, train
from pipeline.vocab.encoded import EncodedSplit
from pipeline.vocab.vocabulary import Vocab


def _needs_source_words(mechanism: str, model_cfg) -> bool:
    """Read-Again with several sentences finds sentence ends by their words (models.read_again)."""
    return mechanism == "read_again" and model_cfg.options.get("sentences", "single") != "single"


@dataclass
class TrainJob:
    paths: TaskPaths
    mechanism: str
    params: dict  # the task's effective params (presets applied)
    vocab_dir: Path | None = None  # vocabularies and encoded splits (default: the vocab stage's output)

    def __post_init__(self) -> None:
        vocab_dir = self.vocab_dir or self.paths.vocab
        self.src_vocab = Vocab.load(vocab_dir / "src.vocab")
        self.tgt_vocab = Vocab.load(vocab_dir / "tgt.vocab")
        self.model_cfg = model_config(
            section(self.params, "model"), self.mechanism, src_vocab=len(self.src_vocab), tgt_vocab=len(self.tgt_vocab)
        )
        self.train_cfg = TrainConfig.from_dict(section(self.params, "train"))
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

    def build_model(self):
        model = build_seeded_model(self.mechanism, self.model_cfg, self.train_cfg.seed)
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
    ) -> list[dict]:
        """Train into ``checkpoints`` (default: the train stage's data/checkpoints/<task>/<mechanism>,
        model.pt and history.json) with the resumable last.pt in ``state`` (default: the train
        stage's data/train_state/<task>/<mechanism>, unless ``checkpoints`` is given: then there);
        ``run_key``: the training run's identity (the train stage's MLflow run id), see pipeline.train."""
        if state is None:
            state = checkpoints or self.paths.train_state(self.mechanism)
        model, _ = self.build_model()
        source = self.src_vocab if _needs_source_words(self.mechanism, self.model_cfg) else None
        return train(
            model,
            self.splits["train"],
            self.splits["valid"],
            self.train_cfg,
            checkpoints or self.paths.checkpoints(self.mechanism),
            model_config=vars(self.model_cfg),
            data_hash=self.data_hash,
            on_validate=on_validate,
            on_step=on_step,
            ctx=ctx,
            source_vocab=source,
            model_info={
                "mechanism": self.mechanism,
                "vocab": {"src": vocab_identity(self.src_vocab), "tgt": vocab_identity(self.tgt_vocab)},
            },
            state_dir=state,
            run_key=run_key,
        )


def worker_args(job: TrainJob, params_path: str | None, mlflow_run_id: str | None) -> list[str]:
    """The command-line arguments of ``main`` that rerun ``job`` in another process."""
    args = ["--task", job.paths.task, "--mechanism", job.mechanism]
    if params_path:
        args += ["--params", str(Path(params_path).resolve())]
    if mlflow_run_id:
        args += ["--mlflow-run-id", mlflow_run_id, "--run-key", mlflow_run_id]
    return args


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Train one mechanism on one task (one process of a torchrun job).")
    parser.add_argument("--task", required=True)
    parser.add_argument("--mechanism", required=True)
    parser.add_argument("--params", default=None, help="params file (default: the repository's params.yaml)")
    parser.add_argument("--mlflow-run-id", default=None, help="rank 0 logs the learning curve to this run")
    parser.add_argument(
        "--run-key", default="", help="the training run's identity (a last.pt of another is not resumed)"
    )
    args = parser.parse_args(argv)
    params = effective_params(load_params(args.params), args.task, args.mechanism)
    job = TrainJob(TaskPaths(args.task, project_root(args.params)), args.mechanism, params)
    ctx = init_from_env(resolve_device(job.train_cfg.device).type)
    on_validate = on_step = None
    if ctx.is_main and args.mlflow_run_id:
        from pipeline.tracking.runs import run_metric_logger

        log = run_metric_logger(args.mlflow_run_id)
        on_validate = lambda row: log(row, row["step"])  # noqa: E731
        on_step = lambda row: log({"step_loss": row["loss"], "step_lr": row["lr"]}, row["step"])  # noqa: E731
    try:
        job.run(ctx, on_validate, on_step, run_key=args.run_key)
    finally:
        shutdown(ctx)


if __name__ == "__main__":
    main()
