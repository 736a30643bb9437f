"""Data parallelism and gradient accumulation: two CPU processes on gloo (DistributedDataParallel, as
torchrun runs them), each accumulating two batches per step (``train.update_freq: 2``), and one
process accumulating four batches take the same optimizer steps as one process on the combined
batch, for every mechanism."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from models.backbone_heads import TINY_BART
from models.registry import MECHANISMS, model_config, runs_on_backbone
from pipeline.data.corpora.copynet_rules import RulesConfig, generate_examples
from pipeline.training.distributed import (
    DistContext,
    JobMismatch,
    all_reduce_sum,
    check_same_job,
    lost_contact,
    main_rank,
    shard_batches,
    torchrun_command,
)
from pipeline.training.loop import Progress, _optimizer, _train_step, build_seeded_model
from pipeline.training.settings import TrainConfig
from pipeline.vocab.batching import collate
from pipeline.vocab.vocabulary import build_vocab
from tests.helpers import free_port

STEPS = 2  # a second step catches parameters DDP never saw a gradient for


def _data():
    rows = generate_examples(RulesConfig(n_rules=4, instances_per_rule=8, unseen_per_rule=1, max_filler=4))["train"]
    counts: dict[str, int] = {}
    for r in rows:
        for tok in r["src"] + r["tgt"]:
            counts[tok] = counts.get(tok, 0) + 1
    vocab = build_vocab(counts)
    # Each rank's rows in two batches of unequal sizes and token counts (other paddings than the whole's).
    ranks = [[rows[0:2], rows[2:6]], [rows[6:9], rows[9:14]]]

    def batch(part):
        return collate([r["src"] for r in part], [r["tgt"] for r in part], vocab, vocab)

    return vocab, [[batch(p) for p in parts] for parts in ranks], batch(rows[0:14])


def _setup(mechanism: str, vocab):
    tiny = {"backbone_config": TINY_BART}  # the heads on a pretrained backbone: a tiny one from its config
    backbones = {name: dict(tiny) for name in MECHANISMS if runs_on_backbone(name)}
    backbones["backbone_pointer_softmax"] = {**tiny, "shortlist": 12}
    cfg = model_config(
        {"emb": 8, "hidden": 6, "pointer_softmax": {"shortlist": 12}, **backbones},
        mechanism,
        src_vocab=len(vocab),
        tgt_vocab=len(vocab),
    )
    train_cfg = TrainConfig(seed=3, clip=1.0, lr=1e-3)
    model = build_seeded_model(mechanism, cfg, 0).train()
    return model, train_cfg, _optimizer(train_cfg, model, torch.device("cpu"))


def _steps(net, model, optimizer, train_cfg, batches: list, ctx: DistContext) -> dict:
    """STEPS optimizer steps, each accumulating ``batches``."""
    prog, schedule = Progress(), train_cfg.schedule()
    losses = [
        _train_step(net, model, optimizer, schedule, batches, train_cfg, torch.device("cpu"), ctx, prog)
        for _ in range(STEPS)
    ]
    return {
        "steps": prog.step,
        "tokens": prog.tokens,  # every rank's target tokens of every step
        "losses": losses,
        "params": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "grads": {k: p.grad.clone() for k, p in model.named_parameters() if p.requires_grad},  # a frozen one has none
    }


def _worker(rank: int, world: int, port: int, out: str) -> None:
    from torch.nn.parallel import DistributedDataParallel

    from pipeline.training.distributed import init_from_env, shutdown

    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank)
    )
    torch.set_num_threads(1)
    ctx = init_from_env("cpu")
    vocab, ranks, _ = _data()
    results = {}
    for mechanism in sorted(MECHANISMS):
        model, train_cfg, optimizer = _setup(mechanism, vocab)
        results[mechanism] = _steps(DistributedDataParallel(model), model, optimizer, train_cfg, ranks[rank], ctx)
    torch.save(results, Path(out) / f"rank{rank}.pt")
    shutdown(ctx, completed=True)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("ddp")
    mp.start_processes(_worker, args=(2, free_port(), str(out)), nprocs=2, start_method="spawn", join=True)
    return [torch.load(out / f"rank{r}.pt", weights_only=True) for r in range(2)]


def _assert_same_steps(got: dict, single: dict, label) -> None:
    assert (got["steps"], got["tokens"]) == (single["steps"], single["tokens"]), label
    assert got["losses"] == pytest.approx(single["losses"], abs=1e-6), label
    for name, grad in single["grads"].items():
        assert torch.allclose(got["grads"][name], grad, rtol=0, atol=1e-6), (label, name)
    for name, value in single["params"].items():
        assert torch.allclose(got["params"][name], value, rtol=0, atol=1e-6), (label, name)


def _one_process(mechanism: str, batches: list) -> dict:
    vocab = _data()[0]
    model, train_cfg, optimizer = _setup(mechanism, vocab)
    return _steps(model, model, optimizer, train_cfg, batches, DistContext())


@pytest.mark.parametrize("mechanism", sorted(MECHANISMS))
def test_two_gloo_ranks_accumulating_equal_one_process_on_the_combined_batch(two_ranks, mechanism):
    vocab, _, combined = _data()
    single = _one_process(mechanism, [combined])
    assert single["steps"] == STEPS and single["tokens"] == STEPS * combined.n_tokens
    for rank, results in enumerate(two_ranks):
        _assert_same_steps(results[mechanism], single, f"rank {rank}")
    # The step really moved the weights (the comparison is not between two untouched models).
    untouched, _, _ = _setup(mechanism, vocab)
    assert any(not torch.equal(untouched.state_dict()[k], v) for k, v in single["params"].items())


@pytest.mark.parametrize("mechanism", sorted(MECHANISMS))
def test_accumulated_batches_equal_one_step_on_their_concatenation(mechanism):
    _, ranks, combined = _data()
    four = [b for parts in ranks for b in parts]  # update_freq 4: 2 + 4 + 3 + 5 rows
    _assert_same_steps(_one_process(mechanism, four), _one_process(mechanism, [combined]), "update_freq 4")
    # and not by accident: one of the four batches alone is another step
    alone = _one_process(mechanism, four[:1])
    assert alone["losses"][0] != pytest.approx(_one_process(mechanism, [combined])["losses"][0], abs=1e-6)


def test_each_rank_gets_its_own_equal_share_of_the_batches():
    batches = list(range(11))
    shares = [shard_batches(batches, DistContext(rank=r, world=3)) for r in range(3)]
    assert shares == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]  # 9 of 11: every rank steps 3 times


def test_torchrun_command_one_machine_and_several():
    one = torchrun_command("pipeline.stages.train", ["--task", "t"], nproc=2)
    assert one[1:] == [
        "-m",
        "torch.distributed.run",
        "--nproc-per-node=2",
        "--standalone",
        "-m",
        "pipeline.stages.train",
        "--task",
        "t",
    ]
    many = torchrun_command("pipeline.stages.train", [], nproc=8, nnodes=4, rdzv_endpoint="node0:29500", rdzv_id="job")
    assert "--nnodes=4" in many and "--rdzv-endpoint=node0:29500" in many and "--rdzv-backend=c10d" in many
    assert "--max-restarts=0" in many and not any(a.startswith("--rdzv-conf") for a in many)
    # The stage's machine hosts the rendezvous store (rdzv_endpoint is its address); a joining one does not.
    owner = torchrun_command(
        "m", [], nproc=1, nnodes=2, rdzv_endpoint="10.0.0.1:29500", rdzv_timeout=90, rdzv_host=True
    )
    assert "--rdzv-conf=join_timeout=90,read_timeout=90,is_host=1" in owner
    joiner = torchrun_command("m", [], nproc=1, nnodes=2, rdzv_endpoint="10.0.0.1:29500", rdzv_host=False)
    assert "--rdzv-conf=is_host=0" in joiner
    with pytest.raises(ValueError, match="rdzv_endpoint"):
        torchrun_command("pipeline.stages.train", [], nproc=1, nnodes=2)


def test_the_writing_rank_is_the_one_on_the_machine_that_runs_the_stage():
    # torchrun's c10d rendezvous numbers machines by host name: the stage's machine may get any rank.
    assert main_rank([False, True], one_machine=False) == 1
    assert main_rank([True, False, False, False], one_machine=False) == 0
    assert main_rank([False, False], one_machine=True) == 0  # torchrun started by hand on one machine
    with pytest.raises(JobMismatch, match=r"ranks \[0, 2\] each run the train stage .* run the stage on one machine"):
        main_rank([True, False, True, False], one_machine=False)
    with pytest.raises(JobMismatch, match="no machine of this job runs the train stage"):
        main_rank([False, False], one_machine=False)


def test_ranks_with_other_settings_or_data_are_named(monkeypatch):
    seen = {0: "a", 1: "b", 2: "a"}  # what all_gather_object would collect from three ranks

    def gather(out, value):
        out[:] = [seen[r] for r in range(len(out))]

    monkeypatch.setattr(torch.distributed, "all_gather_object", gather)
    with pytest.raises(JobMismatch, match=r"ranks \[1\] have other train/model settings or data than rank 0"):
        check_same_job("a", DistContext(rank=0, world=3, main=0))
    with pytest.raises(JobMismatch, match=r"ranks \[0, 2\] have other .* than rank 1 \(the one that writes"):
        check_same_job("b", DistContext(rank=1, world=3, main=1))
    seen.update({1: "a"})
    check_same_job("a", DistContext(rank=2, world=3, main=0))  # all the same: no error
    check_same_job("x", DistContext())  # one process: nothing to compare


def _leaving_worker(rank: int, port: int, out: str, completed: bool) -> None:
    """Rank 1 plays the main rank writing its outputs (a second) after the last collective; rank 0
    has nothing left to do. Each records when it left the group."""
    import time

    from pipeline.training.distributed import init_from_env, shutdown

    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank)
    )
    ctx = init_from_env("cpu")
    all_reduce_sum(torch.ones(1), ctx)  # the last collective
    if rank == 1:
        time.sleep(1.0)
        (Path(out) / "outputs_written").write_text(str(time.monotonic()))
    shutdown(ctx, completed=completed)
    (Path(out) / f"rank{rank}_left").write_text(str(time.monotonic()))


@pytest.mark.parametrize("completed", [True, False])
def test_a_rank_that_completed_leaves_the_group_only_when_every_rank_has(tmp_path, completed):
    """Completed work: a barrier before the group is destroyed, so rank 0 stays until rank 1 has
    written its outputs. After an error (``completed=False``) no rank waits for the others."""
    mp.start_processes(
        _leaving_worker, args=(free_port(), str(tmp_path), completed), nprocs=2, start_method="spawn", join=True
    )
    written = float((tmp_path / "outputs_written").read_text())
    left = float((tmp_path / "rank0_left").read_text())
    assert (left >= written) == completed, (left, written)


def test_a_worker_that_crashes_natively_prints_where_it_was():
    """A training process killed by a native abort (as a collective library's thread may do) writes
    its Python stack to stderr before it dies, so the node's log names the function."""
    code = (
        "import os, pipeline.stages.train as train\n"
        "train.load_params = lambda *args: os.abort()  # a native crash once the worker runs\n"
        "train.worker_main(['--task', 't', '--mechanism', 'copynet'])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGABRT
    assert "Fatal Python error: Aborted" in done.stderr and "in worker_main" in done.stderr, done.stderr


def test_lost_contact_is_told_from_other_errors():
    gloo = RuntimeError(
        "[../third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [10.31.0.2]:30949: Connection reset by peer"
    )
    assert lost_contact(gloo) and lost_contact(torch.distributed.DistNetworkError("Broken pipe"))
    assert not lost_contact(RuntimeError("non-finite training loss nan")) and not lost_contact(ValueError("x"))
