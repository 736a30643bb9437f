"""Checkpoint averaging (train.keep_checkpoints, evaluate.average_last) and gradient accumulation
(train.update_freq) in the training loop: the mean by hand, the kept files, exact resumption."""

from __future__ import annotations

import pytest
import torch

from models.config import ModelConfig
from pipeline.data.corpora.copynet_rules import SCHEMA, RulesConfig, generate_examples
from pipeline.training.averaging import (
    average_checkpoints,
    average_state_dicts,
    last_snapshots,
    main,
    snapshots,
    write_average,
)
from pipeline.training.checkpoints import load_file, load_model, save_atomic
from pipeline.training.loop import build_seeded_model, train
from pipeline.training.settings import TrainConfig
from tests.helpers import StopTraining, encoded_task, stop_at


def test_average_by_hand():
    a = {"w": torch.tensor([1.0, 2.0]), "b": torch.tensor([[0.5]]), "n": torch.tensor(3)}
    b = {"w": torch.tensor([2.0, 4.0]), "b": torch.tensor([[0.0]]), "n": torch.tensor(3)}
    c = {"w": torch.tensor([6.0, 0.0]), "b": torch.tensor([[1.0]]), "n": torch.tensor(3)}
    mean = average_state_dicts([a, b, c])
    assert mean["w"].tolist() == [3.0, 2.0]  # (1 + 2 + 6) / 3, (2 + 4 + 0) / 3
    assert mean["b"].tolist() == [[0.5]]  # (0.5 + 0 + 1) / 3
    assert mean["n"].item() == 3 and mean["n"].dtype == torch.int64  # integers are not averaged
    assert mean["w"].dtype == torch.float32
    # float64 accumulation: the mean of 0.1, 0.2, 0.3 in float32 is the float32 nearest to 0.2
    thirds = [{"x": torch.tensor([v], dtype=torch.float32)} for v in (0.1, 0.2, 0.3)]
    assert average_state_dicts(thirds)["x"].item() == torch.tensor([0.2], dtype=torch.float32).item()


def test_average_refuses_what_is_not_one_model():
    with pytest.raises(ValueError, match="no checkpoints"):
        average_state_dicts([])
    with pytest.raises(ValueError, match="other parameters"):
        average_state_dicts([{"w": torch.zeros(2)}, {"v": torch.zeros(2)}])
    with pytest.raises(ValueError, match="shapes differ"):
        average_state_dicts([{"w": torch.zeros(2)}, {"w": torch.zeros(3)}])
    with pytest.raises(ValueError, match="non-floating-point"):
        average_state_dicts([{"n": torch.tensor(1)}, {"n": torch.tensor(2)}])


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("avg_data")
    splits = generate_examples(RulesConfig(n_rules=5, instances_per_rule=10, unseen_per_rule=1, max_filler=4))
    encoded, src, tgt = encoded_task(root, {k: splits[k] for k in ("train", "valid")}, schema=SCHEMA)
    return encoded, ModelConfig(src_vocab=len(src), tgt_vocab=len(tgt), emb=8, hidden=12, dropout=0.2)


def _train(data, ckpt, on_step=None, **options):
    encoded, cfg = data
    model = build_seeded_model("copynet", cfg, 0)
    history = train(
        model,
        encoded["train"],
        encoded["valid"],
        TrainConfig(**{"epochs": 4, "batch_size": 8, "seed": 7, "lr": 1e-3, **options}),
        ckpt,
        model_config=vars(cfg),
        data_hash="d",
        progress=False,
        on_step=on_step,
        model_info={"mechanism": "copynet"},
    )
    return model, history


def test_the_last_k_validations_are_kept_and_averaged(data, tmp_path):
    model, history = _train(data, tmp_path / "run", keep_checkpoints=2)
    kept = snapshots(tmp_path / "run")
    steps = [r["step"] for r in history]  # 0 (untrained), then each epoch's end
    assert [p.name for p in kept] == [f"step-{s:08d}.pt" for s in steps[-2:]]
    last = load_file(kept[-1])
    assert all(torch.equal(last["model"][k], v) for k, v in model.state_dict().items())  # the final weights
    assert last["step"] == steps[-1] and last["valid_loss"] == history[-1]["valid_loss"]

    out = write_average(tmp_path / "run", 2, tmp_path / "avg.pt")
    averaged = load_file(out)
    first = load_file(kept[0])
    for key, value in averaged["model"].items():
        by_hand = ((first["model"][key].double() + last["model"][key].double()) / 2).to(value.dtype)
        assert torch.equal(value, by_hand), key
    assert averaged["averaged_steps"] == steps[-2:] and averaged["model_config"] == last["model_config"]
    averaged_model, _ = load_model(out, "copynet")  # a model.pt like any other
    assert not torch.equal(averaged_model.state_dict()["tgt_emb.weight"], model.state_dict()["tgt_emb.weight"])

    # asking for more than were kept names how many there are and the setting
    with pytest.raises(FileNotFoundError, match=r"2 step checkpoint\(s\), 3 asked for.*keep_checkpoints >= 3"):
        last_snapshots(tmp_path / "run", 3)
    assert main([str(tmp_path / "run"), "--last", "3", "-o", str(tmp_path / "x.pt")]) == 2
    assert not (tmp_path / "x.pt").exists()
    assert main([str(tmp_path / "run"), "--last", "1", "-o", str(tmp_path / "one.pt")]) == 0
    assert all(torch.equal(load_file(tmp_path / "one.pt")["model"][k], v) for k, v in last["model"].items())

    # a fresh run of the same folder leaves none of the previous run's snapshots behind
    _train(data, tmp_path / "run", epochs=1, keep_checkpoints=2, seed=8)
    assert [p.name for p in snapshots(tmp_path / "run")] == [f"step-{steps[1]:08d}.pt"]


def test_without_keep_checkpoints_nothing_is_kept(data, tmp_path):
    _train(data, tmp_path / "run", epochs=1)
    assert snapshots(tmp_path / "run") == [] and not (tmp_path / "run" / "steps").exists()


def test_checkpoints_of_two_model_configs_are_not_averaged(data, tmp_path):
    _, cfg = data
    for i, emb in enumerate((8, 10)):
        model = build_seeded_model("copynet", ModelConfig(**{**vars(cfg), "emb": emb}), 0)
        save_atomic({"model": model.state_dict(), "model_config": {**vars(cfg), "emb": emb}}, tmp_path / f"{i}.pt")
    with pytest.raises(ValueError, match="different model configs"):
        average_checkpoints([tmp_path / "0.pt", tmp_path / "1.pt"])


def test_update_freq_counts_optimizer_steps_and_resumes_exactly(data, tmp_path):
    encoded, _ = data
    batches_per_epoch = len(encoded["train"]) // 4 + bool(len(encoded["train"]) % 4)
    straight, history = _train(data, tmp_path / "a", epochs=2, batch_size=4, update_freq=3, checkpoint_every=1)
    steps_per_epoch = -(-batches_per_epoch // 3)  # an epoch's last step takes what is left
    assert [r["step"] for r in history] == [0, steps_per_epoch, 2 * steps_per_epoch]

    with pytest.raises(StopTraining):
        _train(
            data,
            tmp_path / "b",
            on_step=stop_at(4),
            epochs=2,
            batch_size=4,
            update_freq=3,
            checkpoint_every=1,
            log_every=1,
        )
    ckpt = torch.load(tmp_path / "b" / "last.pt", weights_only=True)
    assert ckpt["progress"]["step"] == 3 and ckpt["progress"]["batch"] % 3 == 0
    resumed, history_b = _train(data, tmp_path / "b", epochs=2, batch_size=4, update_freq=3, checkpoint_every=1)
    assert all(torch.equal(v, resumed.state_dict()[k]) for k, v in straight.state_dict().items())
    assert [r["valid_loss"] for r in history_b] == [r["valid_loss"] for r in history]


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="update_freq"):
        TrainConfig(update_freq=0)
    with pytest.raises(ValueError, match="keep_checkpoints"):
        TrainConfig(keep_checkpoints=-1)
    with pytest.raises(ValueError, match="train.compile and train.cuda_graphs"):
        TrainConfig(compile=True, cuda_graphs=True)
