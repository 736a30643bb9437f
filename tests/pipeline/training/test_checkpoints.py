"""Model files are data, never code; a model is only loaded for the vocabularies, mechanism and
training run it was made by; a training that fails leaves no model of its own behind and never
deletes an earlier one."""

from __future__ import annotations

import hashlib
import io
import re
import shutil
import sys

import pytest
import torch

from models.config import ModelConfig
from pipeline.data.corpora.copynet_rules import SCHEMA, RulesConfig, generate_examples
from pipeline.io.files import sha256_file
from pipeline.training.checkpoints import CheckpointError, load_file, load_model, vocab_identity
from pipeline.training.loop import NoImprovement, build_seeded_model, staging_dir, train
from pipeline.training.settings import TrainConfig
from pipeline.vocab.vocabulary import SPECIALS, Vocab
from tests.helpers import encoded_task


class _RunsCode:
    """Unpickling this calls open(<marker>, "w"): what a crafted checkpoint would do instead."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _crafted(path, marker) -> None:
    """A torch checkpoint file (as torch.save writes it) whose unpickling runs code."""
    torch.save({"model": _RunsCode(str(marker)), "model_config": {}}, path)


def _train_copynet(encoded, src, tgt, cfg, out, run_key: str, state_dir=None) -> None:
    """One epoch of copynet into ``out``, with the model info the train stage records."""
    info = {"mechanism": "copynet", "vocab": {"src": vocab_identity(src), "tgt": vocab_identity(tgt)}}
    train(
        build_seeded_model("copynet", cfg, 0),
        encoded["train"],
        encoded["valid"],
        TrainConfig(epochs=1, batch_size=8, lr=0.01),
        out,
        model_config=vars(cfg),
        progress=False,
        model_info=info,
        run_key=run_key,
        state_dir=state_dir,
    )


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A copynet trained for one epoch, with the model info the train stage records."""
    root = tmp_path_factory.mktemp("ckpt")
    splits = generate_examples(RulesConfig(n_rules=4, instances_per_rule=8, unseen_per_rule=1, max_filler=3))
    encoded, src, tgt = encoded_task(root, {k: splits[k] for k in ("train", "valid")}, schema=SCHEMA)
    cfg = ModelConfig(src_vocab=len(src), tgt_vocab=len(tgt), emb=8, hidden=8)
    _train_copynet(encoded, src, tgt, cfg, root / "ckpt", "run-a")
    return root, encoded, src, tgt, cfg


def test_a_code_running_checkpoint_is_refused_before_anything_runs(tmp_path):
    marker = tmp_path / "pwned"
    _crafted(tmp_path / "model.pt", marker)
    with pytest.raises(CheckpointError, match="refused: not a checkpoint of tensors and plain data"):
        load_model(tmp_path / "model.pt", "copynet")
    assert not marker.exists()
    # Unsafe loading would have run it: the test's payload is real.
    torch.load(tmp_path / "model.pt", weights_only=False)  # demonstrating the attack the loader refuses
    assert marker.exists()


def test_predict_refuses_a_crafted_checkpoint(tmp_path, monkeypatch, capsys):
    from pipeline.serving import predict

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    marker = tmp_path / "pwned"
    _crafted(ckpt / "model.pt", marker)
    vocab = Vocab(list(SPECIALS) + ["a", "b", "c"], [0] * 4 + [1] * 3)
    for side in ("src", "tgt"):
        vocab.save(tmp_path / "vocab" / f"{side}.vocab")
    monkeypatch.setattr(sys, "stdin", io.StringIO("a b c\n"))
    code = predict.main(
        [
            "--checkpoint",
            str(ckpt),
            "--task",
            "copy_rules",
            "--mechanism",
            "copynet",
            "--vocab",
            str(tmp_path / "vocab"),
        ]
    )
    assert code == 2 and "refused: not a checkpoint of tensors and plain data" in capsys.readouterr().err
    assert not marker.exists()


def test_a_crafted_last_pt_in_a_checkpoint_directory_is_never_unpickled(trained, tmp_path, capsys):
    _, encoded, src, tgt, cfg = trained
    marker = tmp_path / "pwned"
    (tmp_path / "run").mkdir()
    _crafted(tmp_path / "run" / "last.pt", marker)
    train(
        build_seeded_model("copynet", cfg, 0),
        encoded["train"],
        encoded["valid"],
        TrainConfig(epochs=1, batch_size=8, lr=0.01),
        tmp_path / "run",
        model_config=vars(cfg),
        progress=False,
    )
    assert not marker.exists()
    assert "is not a resumable checkpoint" in capsys.readouterr().err


def test_another_vocabulary_or_mechanism_is_a_clear_error(trained):
    root, _, src, tgt, _ = trained
    path = root / "ckpt" / "model.pt"
    model, ckpt = load_model(path, "copynet", vocabs=(src, tgt), sha256=sha256_file(path))  # the right ones load
    assert ckpt["mechanism"] == "copynet" and not model.training
    bigger = Vocab(tgt.itos + ["zzz"], tgt.counts + [1])
    with pytest.raises(CheckpointError, match=r"tgt vocabulary of \d+ words .* differ in size"):
        load_model(path, "copynet", vocabs=(src, bigger))
    words = tgt.itos[len(SPECIALS) :]
    shuffled = Vocab(list(SPECIALS) + words[::-1], tgt.counts)
    with pytest.raises(CheckpointError, match="differ in order or words"):
        load_model(path, "copynet", vocabs=(src, shuffled))
    with pytest.raises(CheckpointError, match="is a copynet model, not rnnsearch"):
        load_model(path, "rnnsearch")


def test_a_model_of_another_training_run_is_refused(trained):
    """The train stage records the sha256 of the model.pt it wrote (run.json); any other file is refused."""
    root, _, src, tgt, _ = trained
    path = root / "ckpt" / "model.pt"
    recorded = sha256_file(path)
    other = hashlib.sha256(b"another run's model.pt").hexdigest()
    with pytest.raises(CheckpointError, match="is not the model.pt its training run wrote.*another run's model"):
        load_model(path, "copynet", vocabs=(src, tgt), sha256=other)
    assert recorded == hashlib.sha256(path.read_bytes()).hexdigest()


def test_model_pt_holds_nothing_of_the_run(trained, tmp_path):
    """model.pt is a DVC output: the same training (another run key, another directory) writes the
    same bytes, and it records no run identity."""
    root, encoded, src, tgt, cfg = trained
    _train_copynet(encoded, src, tgt, cfg, tmp_path / "again", "run-b", state_dir=tmp_path / "state")
    assert (tmp_path / "again" / "model.pt").read_bytes() == (root / "ckpt" / "model.pt").read_bytes()
    assert (tmp_path / "again" / "history.json").read_bytes() == (root / "ckpt" / "history.json").read_bytes()
    assert "tokens_per_s" not in (tmp_path / "again" / "history.json").read_text()
    assert (tmp_path / "state" / "last.pt").exists() and not (tmp_path / "again" / "last.pt").exists()
    saved = load_file(tmp_path / "again" / "model.pt")
    assert set(saved) == {"model", "model_config", "mechanism", "vocab", "step", "epoch", "valid_loss"}


def _earlier_run(trained, out):
    """``out`` holding the fixture's trained model.pt and history.json (an earlier run's outputs);
    returns their bytes."""
    root = trained[0]
    out.mkdir()
    for name in ("model.pt", "history.json"):
        shutil.copy2(root / "ckpt" / name, out / name)
    return {name: (out / name).read_bytes() for name in ("model.pt", "history.json")}


def _train(trained, out, on_validate=None, unchecked: dict | None = None, **options):
    """Train into ``out``; ``unchecked``: settings forced past TrainConfig's checks (the loop must be
    safe on its own, whatever the schema lets through)."""
    _, encoded, src, tgt, cfg = trained
    info = {"mechanism": "copynet", "vocab": {"src": vocab_identity(src), "tgt": vocab_identity(tgt)}}
    train_cfg = TrainConfig(**{"epochs": 2, "batch_size": 8, "lr": 0.01, **options})
    for name, value in (unchecked or {}).items():
        object.__setattr__(train_cfg, name, value)  # a frozen dataclass
    return train(
        build_seeded_model("copynet", cfg, 0),
        encoded["train"],
        encoded["valid"],
        train_cfg,
        out,
        model_config=vars(cfg),
        progress=False,
        model_info=info,
        on_validate=on_validate,
    )


def _outputs(out) -> dict:
    return {name: (out / name).read_bytes() for name in ("model.pt", "history.json")}


@pytest.mark.parametrize(
    "options, says",
    [
        ({"unchecked": {"epochs": 0}}, r"no training step ran: train.epochs 0"),  # the untrained model is the best
        ({"unchecked": {"epochs": -1}}, r"no training step ran: train.epochs -1"),
        ({"unchecked": {"lr": 0.0}}, r"best \d+\.\d+ after \d+ steps"),  # trains, never moves
    ],
)
def test_a_training_that_never_improves_fails_and_keeps_the_earlier_model(trained, tmp_path, options, says):
    """A run that produces no usable model fails the stage and leaves the earlier run's model.pt and
    history.json byte for byte (it never deletes a model it did not replace), nor anything of its own."""
    out = tmp_path / "stalled"
    earlier = _earlier_run(trained, out)
    with pytest.raises(NoImprovement) as err:
        _train(trained, out, **options)
    message = str(err.value)
    assert "did not improve on the untrained model's validation loss" in message
    assert re.search(says, message), message
    assert f"the earlier {out / 'model.pt'} was kept, not replaced by this run's" in message
    assert _outputs(out) == earlier
    assert not staging_dir(out).exists()


def test_a_training_that_never_improves_in_an_empty_folder_writes_no_model(trained, tmp_path):
    with pytest.raises(NoImprovement, match=f"no model.pt was written to {re.escape(str(tmp_path / 'new'))}"):
        _train(trained, tmp_path / "new", unchecked={"lr": 0.0})
    assert not (tmp_path / "new" / "model.pt").exists() and not staging_dir(tmp_path / "new").exists()


class _Killed(Exception):
    pass


def _kill_after_first_improvement(row: dict) -> None:
    if row["step"] > 0:  # model.pt of this validation is staged when on_validate runs
        raise _Killed


def test_a_run_stopped_mid_way_keeps_the_earlier_model_and_its_rerun_replaces_it(trained, tmp_path, capsys):
    """Interrupted after its first improvement, a run has replaced nothing: the earlier model.pt and
    history.json stay; its own best weights wait in the staging folder, from which its rerun resumes and
    ends with the model.pt of an uninterrupted run."""
    options = {"epochs": 3, "checkpoint_every": 1}
    _train(trained, tmp_path / "straight", **options)
    out = tmp_path / "run"
    earlier = _earlier_run(trained, out)
    with pytest.raises(_Killed):
        _train(trained, out, on_validate=_kill_after_first_improvement, **options)
    assert _outputs(out) == earlier
    assert (staging_dir(out) / "model.pt").exists()  # the resumption's best weights so far
    capsys.readouterr()
    _train(trained, out, **options)
    assert "resuming from" in capsys.readouterr().err
    assert _outputs(out) == _outputs(tmp_path / "straight") != earlier
    assert not staging_dir(out).exists()


def test_a_completed_run_replaces_model_pt_history_and_steps_and_leaves_no_staging(trained, tmp_path):
    out = tmp_path / "run"
    earlier = _earlier_run(trained, out)
    (out / "steps").mkdir()
    (out / "steps" / "step-00000099.pt").write_bytes(b"an earlier run's snapshot")
    history = _train(trained, out, keep_checkpoints=1)
    assert _outputs(out) != earlier
    assert load_file(out / "model.pt")["valid_loss"] == min(r["valid_loss"] for r in history)
    assert [p.name for p in (out / "steps").iterdir()] == [f"step-{history[-1]['step']:08d}.pt"]
    assert not staging_dir(out).exists() and not list(out.glob(".*"))  # nothing hidden left for DVC to track
