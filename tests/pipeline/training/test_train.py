"""Training loop: step checkpoints that resume exactly (also after SIGKILL), fresh starts when they
must, schedules, early stopping, the non-finite guard, the bf16 autocast path, token budgets."""

from __future__ import annotations

import json
import math
import os
import random
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from models.config import ModelConfig
from models.registry import build_model
from pipeline.config.validation import SettingsError
from pipeline.data.corpora.copynet_rules import SCHEMA, RulesConfig, generate_examples
from pipeline.runtime.device import autocast
from pipeline.training.loop import NonFiniteLoss, build_seeded_model, staging_dir, train, without_wall_clock
from pipeline.training.schedule import EarlyStopping, LRSchedule
from pipeline.training.settings import TrainConfig
from pipeline.vocab.batching import collate, token_batches
from tests.helpers import REPO, StopTraining, encoded_task, stop_at


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("train_data")
    splits = generate_examples(RulesConfig(n_rules=5, instances_per_rule=10, unseen_per_rule=1, max_filler=4))
    encoded, src, tgt = encoded_task(root, {k: splits[k] for k in ("train", "valid")}, schema=SCHEMA)
    return root, encoded, src, tgt


def _cfg(src, tgt, dropout: float = 0.2) -> ModelConfig:
    return ModelConfig(
        src_vocab=len(src), tgt_vocab=len(tgt), emb=8, hidden=12, dropout=dropout
    )  # dropout uses the RNG


def _run(data, ckpt: Path, on_step=None, score_valid=None, **train_options):
    _, encoded, src, tgt = data
    cfg = _cfg(src, tgt)
    model = build_seeded_model("copynet", cfg, 0)
    options = {"epochs": 3, "batch_size": 8, "seed": 7, "lr": 1e-3, **train_options}
    history = train(
        model,
        encoded["train"],
        encoded["valid"],
        TrainConfig(**options),
        ckpt,
        model_config=vars(cfg),
        data_hash="d",
        progress=False,
        on_step=on_step,
        score_valid=score_valid,
    )
    return model, history


def _same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# A training process the tests kill with SIGKILL: it reports each optimizer step on stdout.
CHILD = textwrap.dedent("""
    import sys, torch
    from pathlib import Path
    from models.config import ModelConfig
    from pipeline.vocab.encoded import EncodedSplit
    from pipeline.training.loop import TrainConfig, build_seeded_model, train
    from pipeline.vocab.vocabulary import Vocab
    data, ckpt, out = map(Path, sys.argv[1:4])
    torch.set_num_threads(1)
    tgt = Vocab.load(data / "tgt.vocab")
    cfg = ModelConfig(src_vocab=len(Vocab.load(data / "src.vocab")), tgt_vocab=len(tgt), emb=8, hidden=12, dropout=0.2)
    splits = {s: EncodedSplit(data / "ids" / s, len(tgt)) for s in ("train", "valid")}
    model = build_seeded_model("copynet", cfg, 0)
    train(model, splits["train"], splits["valid"],
          TrainConfig(epochs=3, batch_size=6, seed=7, checkpoint_every=1, log_every=1, validate_every=5),
          ckpt, model_config=vars(cfg), progress=False,
          on_step=lambda row: print("step", row["step"], flush=True))
    torch.save(model.state_dict(), out)
""")


def _child(data_dir: Path, ckpt: Path, out: Path, tmp_path: Path) -> subprocess.Popen:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, str(script), str(data_dir), str(ckpt), str(out)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_sigkill_at_a_random_step_then_rerun_ends_bit_identical(data, tmp_path):
    root, _, src, tgt = data
    src.save(root / "src.vocab")
    tgt.save(root / "tgt.vocab")
    straight = _child(root, tmp_path / "a", tmp_path / "a.pt", tmp_path)
    _, err = straight.communicate(timeout=300)
    assert straight.returncode == 0, err[-3000:]
    steps = json.loads((tmp_path / "a" / "history.json").read_text())[-1]["step"]
    assert steps > 6

    kill_at = random.Random().randint(2, steps - 2)  # a different step every run
    victim = _child(root, tmp_path / "b", tmp_path / "b.pt", tmp_path)
    for line in victim.stdout:
        if line.strip() == f"step {kill_at}":
            victim.send_signal(signal.SIGKILL)
            break
    victim.wait(timeout=60)
    assert victim.returncode == -signal.SIGKILL, f"killed at step {kill_at}"
    assert not (tmp_path / "b.pt").exists()
    resumed = _child(root, tmp_path / "b", tmp_path / "b.pt", tmp_path)
    _, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err[-3000:]
    assert "resuming from" in err, f"killed at step {kill_at}: {err[-2000:]}"
    a = torch.load(tmp_path / "a.pt", weights_only=True)
    b = torch.load(tmp_path / "b.pt", weights_only=True)
    assert _same_weights(a, b), f"killed at step {kill_at}"
    assert not list((tmp_path / "b").glob(".*.tmp")), "a killed write left its temp file"


def test_resume_mid_epoch_from_a_step_checkpoint_equals_uninterrupted(data, tmp_path, capsys):
    """In-process: a run stopped by an exception mid-epoch resumes from its last step checkpoint."""
    straight, history = _run(data, tmp_path / "a", checkpoint_every=1)
    assert [r["epoch"] for r in history] == [0, 1, 2, 3]  # the untrained model, then each epoch
    assert history[0]["step"] == 0 and history[0]["train_loss"] is None
    assert history[-1]["train_loss"] < history[1]["train_loss"]

    with pytest.raises(StopTraining):
        _run(data, tmp_path / "b", on_step=stop_at(5), checkpoint_every=1, log_every=1)
    ckpt = torch.load(tmp_path / "b" / "last.pt", weights_only=True)
    assert ckpt["progress"]["step"] == 4 and ckpt["progress"]["batch"] > 0  # mid-epoch, before step 5's checkpoint
    capsys.readouterr()
    resumed, history_b = _run(data, tmp_path / "b", checkpoint_every=1, log_every=1)  # the settings it stopped with
    assert "resuming from" in capsys.readouterr().err  # (log_every is in the fingerprint: else a fresh run)
    assert _same_weights(straight.state_dict(), resumed.state_dict())
    for a, b in zip(history, history_b):
        assert a["valid_loss"] == pytest.approx(b["valid_loss"], abs=1e-12)


def test_an_interrupted_run_resumed_under_another_training_run_starts_afresh(data, tmp_path, capsys):
    """model.pt may date from before the interruption; continued under another training run (its
    MLflow run was not found again), the run that logged the first epochs would not be the one the
    model is registered under. Such a run starts afresh: the run key is in last.pt's fingerprint."""
    _, encoded, src, tgt = data
    cfg = _cfg(src, tgt)

    def run(run_key: str, on_step=None):
        return train(
            build_seeded_model("copynet", cfg, 0),
            encoded["train"],
            encoded["valid"],
            TrainConfig(epochs=3, batch_size=8, seed=7, checkpoint_every=1, log_every=1),
            tmp_path,
            model_config=vars(cfg),
            data_hash="d",
            progress=False,
            on_step=on_step,
            model_info={"mechanism": "copynet"},
            run_key=run_key,
        )

    with pytest.raises(StopTraining):
        run("run-a", stop_at(5))
    assert torch.load(tmp_path / "last.pt", weights_only=True)["progress"]["step"] == 4  # stopped before its save
    capsys.readouterr()
    history = run("run-b")
    assert "starting afresh" in capsys.readouterr().err
    assert [r["epoch"] for r in history] == [0, 1, 2, 3]  # from the start, not from step 4
    straight = run("run-c")  # a completed run is never resumed: the same training again
    assert [r["valid_loss"] for r in straight] == [r["valid_loss"] for r in history]


def test_an_interrupted_run_whose_model_pt_was_deleted_starts_afresh(data, tmp_path, capsys):
    """`dvc exp run` after an interruption deletes the stage's outputs it holds no record of, the staged
    model.pt (the best weights so far) among them, while last.pt (data/train_state) stays: resumed, a run
    whose best validation came before the interruption would end without model.pt. It starts afresh and
    ends as an uninterrupted run."""
    straight, history = _run(data, tmp_path / "a", checkpoint_every=1)
    with pytest.raises(StopTraining):
        _run(data, tmp_path / "b", on_step=stop_at(5), checkpoint_every=1, log_every=1)
    staged = staging_dir(tmp_path / "b") / "model.pt"
    assert staged.exists() and not (tmp_path / "b" / "model.pt").exists()  # the untrained or first epoch's
    staged.unlink()
    capsys.readouterr()
    resumed, history_b = _run(data, tmp_path / "b", checkpoint_every=1, log_every=1)  # the settings it stopped with
    assert "is gone; starting afresh" in capsys.readouterr().err
    assert [r["epoch"] for r in history_b] == [0, 1, 2, 3]  # from the start, not from step 4
    assert _same_weights(straight.state_dict(), resumed.state_dict())
    assert (tmp_path / "b" / "model.pt").exists() and not staging_dir(tmp_path / "b").exists()


def test_rerun_after_a_completed_run_starts_afresh(data, tmp_path):
    """DVC reruns a finished training after a code change: that must retrain, not resume."""
    first, _ = _run(data, tmp_path / "d")
    again, history = _run(data, tmp_path / "d")
    assert [r["epoch"] for r in history] == [0, 1, 2, 3]  # trained again from epoch 1
    assert _same_weights(first.state_dict(), again.state_dict())  # seeded: the same result


def test_changed_settings_start_afresh(data, tmp_path):
    _run(data, tmp_path / "c")
    _, history = _run(data, tmp_path / "c", epochs=1)
    assert [r["epoch"] for r in history] == [0, 1]  # not a continuation of the 3-epoch run
    assert not list((tmp_path / "c").glob(".*.tmp"))  # no temp files left behind


def test_seeded_model_builds_identical_weights(data):
    _, _, src, tgt = data
    cfg = _cfg(src, tgt)
    a = build_seeded_model("copynet", cfg, seed=11)
    torch.rand(100)  # whatever ran before must not matter
    b = build_seeded_model("copynet", cfg, seed=11)
    c = build_seeded_model("copynet", cfg, seed=12)
    assert _same_weights(a.state_dict(), b.state_dict())
    assert not _same_weights(a.state_dict(), c.state_dict())


def test_non_finite_loss_stops_with_step_and_rows_and_saves_nothing_nan(data, tmp_path):
    """A NaN appears in the 5th training forward pass (the encoder's input, as a corrupt row or an
    overflow would make it): the run stops at step 5 naming the rows; the step is not applied and
    every checkpoint on disk holds finite weights from before it. The failed run replaces no output:
    an earlier run's model.pt stays as it was, and nothing of this run is staged."""
    _, encoded, src, tgt = data
    cfg = _cfg(src, tgt)
    earlier = {"model": {"w": torch.ones(2)}, "model_config": {}}
    (tmp_path / "nan").mkdir()
    torch.save(earlier, tmp_path / "nan" / "model.pt")
    earlier_bytes = (tmp_path / "nan" / "model.pt").read_bytes()
    model = build_seeded_model("copynet", cfg, 0)
    calls = []

    def poison(module, args):
        if module.training:
            calls.append(1)
            if len(calls) == 5:
                return (args[0] * float("nan"), *args[1:])
        return None

    model.encoder.register_forward_pre_hook(poison)
    with pytest.raises(NonFiniteLoss) as err:
        train(
            model,
            encoded["train"],
            encoded["valid"],
            TrainConfig(epochs=3, batch_size=8, seed=7, checkpoint_every=1),
            tmp_path / "nan",
            model_config=vars(cfg),
            progress=False,
        )
    message = str(err.value)
    assert "at step 5 " in message and "rows ['r" in message
    assert f"The earlier {tmp_path / 'nan' / 'model.pt'} was kept, not replaced by this run's." in message
    assert all(torch.isfinite(p).all() for p in model.parameters())  # the step was not applied
    last = torch.load(tmp_path / "nan" / "last.pt", weights_only=True)
    assert last["progress"]["step"] == 4
    assert all(torch.isfinite(t).all() for t in last["model"].values())
    assert (tmp_path / "nan" / "model.pt").read_bytes() == earlier_bytes
    assert not staging_dir(tmp_path / "nan").exists()


def test_early_stopping_ends_the_run_and_keeps_the_best_model(data, tmp_path):
    # Improvements smaller than min_delta do not count: patience 2 stops the run 2 validations after step 0.
    _, history = _run(data, tmp_path / "es", epochs=20, patience=2, min_delta=0.5)
    assert (
        len(history) == 3 and history[-1]["epoch"] == 2
    )  # the untrained baseline, then 2 epochs without a min_delta gain
    best = min(r["valid_loss"] for r in history)
    assert torch.load(tmp_path / "es" / "model.pt", weights_only=True)["valid_loss"] == best
    assert torch.load(tmp_path / "es" / "last.pt", weights_only=True)["progress"]["completed"]


def test_validation_every_n_steps_and_learning_curve_rows(data, tmp_path):
    _, history = _run(data, tmp_path / "v", epochs=2, validate_every=2, warmup_steps=3, lr_decay="inverse_sqrt")
    assert [r["step"] for r in history] == [0, 2, 4, 6]  # 3 steps per epoch: every 2 steps, not at epoch ends
    assert history[1]["lr"] == pytest.approx(1e-3 * 2 / 3)  # the lr of the last step before the validation
    assert {"step", "epoch", "train_loss", "valid_loss", "valid_ppl", "lr", "tokens_per_s"} <= set(history[1])


def test_max_steps_stops_mid_epoch_and_validates_the_last_step(data, tmp_path):
    _, history = _run(data, tmp_path / "ms", epochs=10, max_steps=4)
    assert [r["step"] for r in history] == [0, 3, 4]  # untrained, the end of epoch 1, then the last step
    assert torch.load(tmp_path / "ms" / "last.pt", weights_only=True)["progress"]["completed"]


def test_lr_schedule_warmup_inverse_sqrt_plateau_and_halving():
    s = LRSchedule(1.0, warmup_steps=4, decay="inverse_sqrt")
    assert [s.at(k, 1) for k in (1, 2, 3, 4, 16)] == [0.25, 0.5, 0.75, 1.0, 0.5]
    p = LRSchedule(0.1, decay="plateau", plateau_factor=0.5, plateau_patience=2, min_lr=0.02)
    for loss in (3.0, 2.0, 2.5, 2.4):  # two validations without a new best: halve
        p.observe(loss)
    assert p.at(10, 1) == pytest.approx(0.05)
    for loss in (2.2, 2.1, 2.3, 2.3):
        p.observe(loss)
    assert p.at(10, 1) == pytest.approx(0.02)  # 0.0125 floored at min_lr
    restored = LRSchedule(0.1, decay="plateau", plateau_factor=0.5, plateau_patience=2, min_lr=0.02)
    restored.load_state_dict(p.state_dict())
    assert restored.at(10, 1) == p.at(10, 1)
    assert LRSchedule(2.0, halve_after=5).at(1, 7) == 0.5
    with pytest.raises(ValueError):
        LRSchedule(1.0, decay="cosine")
    stop = EarlyStopping(patience=2, min_delta=0.1)
    assert stop.observe(3.0) and not stop.observe(2.95) and not stop.should_stop
    assert not stop.observe(3.5) and stop.should_stop


def test_bf16_autocast_path_on_the_cpu(data, tmp_path):
    """The CUDA AMP code path, exercised with CPU autocast: bf16 matmuls, float32 scores and loss."""
    _, encoded, src, tgt = data
    model = build_model("copynet", _cfg(src, tgt, dropout=0.0)).train()
    batch = encoded["train"].batch(np.arange(8))
    with autocast(torch.device("cpu"), "bf16"):
        gold = model(batch)
        hidden = model.tgt_emb(batch.tgt_in) @ model.output.w_c.weight[:, :8].t()  # a plain matmul under autocast
    assert hidden.dtype == torch.bfloat16  # autocast is really on
    assert gold.dtype == torch.float32  # the output layer scores in float32
    with torch.no_grad():
        reference = model(batch)
    assert torch.isfinite(gold).all()
    assert (gold - reference).abs().max() < 0.1  # bf16 rounding only
    _, history = _run(data, tmp_path / "bf16", amp="bf16", epochs=2)
    assert all(math.isfinite(r["valid_loss"]) for r in history)


def test_token_budget_batches_cover_every_row_once_and_respect_the_budget():
    rng = np.random.default_rng(0)
    src, tgt = rng.integers(1, 60, 1000), rng.integers(2, 30, 1000)
    batches = token_batches(src, tgt, batch_size=64, max_tokens=600, shuffle=True, seed=3)
    rows = np.concatenate(batches)
    assert sorted(rows.tolist()) == list(range(1000))
    for b in batches:
        assert len(b) <= 64
        assert len(b) == 1 or len(b) * (src[b].max() + tgt[b].max()) <= 600
    again = token_batches(src, tgt, batch_size=64, max_tokens=600, shuffle=True, seed=3)
    assert all(np.array_equal(a, b) for a, b in zip(batches, again))  # a function of the seed
    other = token_batches(src, tgt, batch_size=64, max_tokens=600, shuffle=True, seed=4)
    assert any(not np.array_equal(a, b) for a, b in zip(batches, other))
    big = token_batches(np.array([500, 3]), np.array([500, 3]), batch_size=8, max_tokens=100)
    assert sorted(len(b) for b in big) == [1, 1]  # a row over the budget is a batch of its own


def test_encoded_batches_equal_collated_ones(data, tmp_path):
    """The id-encoded path builds exactly the tensors collate builds from strings, truncation and
    pointer annotations included."""
    rows = [
        {
            "id": "0",
            "src": ["a", "q1", "b", "q1"],
            "tgt": ["q1", "b", "q2"],
            "refs": [],
            "tgt_pointer": [1, 2, -1],
            "tgt_switch": [True, False, False],
        },
        {"id": "1", "src": [], "tgt": ["a"], "refs": [], "tgt_pointer": [-1], "tgt_switch": [False]},
        {
            "id": "2",
            "src": ["q3", "c", "q4", "q3", "a", "q5"],
            "tgt": ["q5", "q4", "q3", "c"],
            "refs": [],
            "tgt_pointer": [5, 2, 0, 1],
            "tgt_switch": [True, True, True, False],
        },
    ]
    from pipeline.vocab.vocabulary import SPECIALS, Vocab

    src_vocab = Vocab(list(SPECIALS) + ["a", "b", "c", "q1"], [0] * 4 + [1] * 4)
    tgt_vocab = Vocab(list(SPECIALS) + ["a", "b", "c"], [0] * 4 + [1] * 3)
    encoded, _, _ = encoded_task(tmp_path, {"train": rows, "valid": rows}, src_vocab, tgt_vocab)
    for max_src_len in (None, 3):
        split = encoded["train"]
        split.max_src_len = max_src_len
        got = split.batch(np.array([2, 0, 1]))
        order = [rows[i] for i in (2, 0, 1)]
        want = collate(
            [r["src"] for r in order],
            [r["tgt"] for r in order],
            src_vocab,
            tgt_vocab,
            max_src_len=max_src_len,
            pointers=[r["tgt_pointer"] for r in order],
            switches=[r["tgt_switch"] for r in order],
        )
        for key in ("src", "src_len", "src_ext", "tgt_in", "tgt_out", "tgt_pointer", "tgt_switch"):
            assert torch.equal(getattr(got, key), getattr(want, key)), (max_src_len, key)
        assert got.n_ext == want.n_ext and got.ids == ["2", "0", "1"]


class ScriptedScore:
    """A validation metric that returns the next value of a script at each validation (the untrained
    model's first), recording the weights it saw; ``name`` as pipeline.decoding.validation's scorer."""

    name = "valid_top1_greedy"

    def __init__(self, values: list[float]):
        self.values, self.seen = list(values), []

    def __call__(self, model) -> float:
        self.seen.append({k: v.clone() for k, v in model.state_dict().items()})
        return self.values[len(self.seen) - 1]


def test_select_by_metric_keeps_the_best_metric_not_the_best_loss(data, tmp_path):
    # Four validations (untrained + 3 epochs); the metric peaks at epoch 2 whatever the losses do.
    score = ScriptedScore([0.0, 10.0, 50.0, 30.0])
    _, history = _run(data, tmp_path, select_by="metric", score_valid=score)
    assert [row["valid_top1_greedy"] for row in history] == [0.0, 10.0, 50.0, 30.0]
    saved = torch.load(tmp_path / "model.pt", weights_only=True)
    assert saved["epoch"] == 2 and saved["valid_top1_greedy"] == 50.0
    assert _same_weights(saved["model"], score.seen[2])  # the weights the metric was measured on
    assert min(history, key=lambda r: r["valid_loss"])["epoch"] == 3  # the loss alone would keep epoch 3
    recorded = json.loads((tmp_path / "history.json").read_text())
    assert [r["valid_top1_greedy"] for r in recorded] == [0.0, 10.0, 50.0, 30.0]  # in the learning curve


def test_select_by_metric_breaks_ties_by_the_loss(data, tmp_path):
    score = ScriptedScore([0.0, 40.0, 40.0, 40.0])
    _, history = _run(data, tmp_path, select_by="metric", score_valid=score)
    tied = history[1:]
    expected = min(tied, key=lambda r: r["valid_loss"])["epoch"]  # the lowest loss among equal metrics
    assert torch.load(tmp_path / "model.pt", weights_only=True)["epoch"] == expected


def test_select_by_metric_stops_early_on_the_metric(data, tmp_path):
    score = ScriptedScore([0.0, 20.0, 10.0, 10.0, 10.0, 10.0])
    _, history = _run(data, tmp_path, select_by="metric", score_valid=score, epochs=5, patience=2)
    assert [row["epoch"] for row in history] == [0, 1, 2, 3]  # two validations without a better metric
    assert torch.load(tmp_path / "model.pt", weights_only=True)["epoch"] == 1


def test_select_by_loss_is_unchanged_by_a_metric(data, tmp_path):
    _, plain = _run(data, tmp_path / "plain")
    _, by_loss = _run(data, tmp_path / "loss", select_by="loss", score_valid=ScriptedScore([0.0, 90.0, 10.0, 5.0]))
    assert without_wall_clock(by_loss) == without_wall_clock(plain)  # no metric column, the same curve
    assert (tmp_path / "plain" / "model.pt").read_bytes() == (tmp_path / "loss" / "model.pt").read_bytes()


def test_select_by_metric_without_a_scorer_is_refused(data, tmp_path):
    with pytest.raises(ValueError, match="train.select_by: metric needs"):
        _run(data, tmp_path, select_by="metric")


def test_select_by_auto_resolves_by_the_metric_kind():
    assert TrainConfig().resolved("exact_match").select_by == "metric"
    assert TrainConfig().resolved("rouge_f").select_by == "loss"
    assert TrainConfig(select_by="loss").resolved("exact_match").select_by == "loss"
    with pytest.raises(SettingsError, match="train.select_by is 'accuracy': must be one of 'auto', 'loss' or 'metric'"):
        TrainConfig.from_dict({"select_by": "accuracy"})
    with pytest.raises(SettingsError, match="train.seeds is 0: must be >= 1"):
        TrainConfig.from_dict({"seeds": 0})
