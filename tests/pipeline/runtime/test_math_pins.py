"""The same bits on every x86-64 machine (pipeline.runtime.math_pins): a tiny task trained and evaluated in
fresh processes that see other machines gives the same weights, learning curve and metrics when
the math libraries are pinned, and other ones when they are not (the check can fail).

The other machine is simulated on this one, in the child's environment: an AVX2-only CPU (MKL,
oneDNN and ATen capped at AVX2, what a CPU without AVX-512 runs by default), a CPU of the other
vendor (a two-function library, LD_PRELOADed, that flips MKL's Intel check: MKL then takes the
code paths it takes on that vendor's CPUs), and one core instead of two (taskset; the thread count
stays the params' 2). This machine's own CPU is the first machine. And the same params give the
same metrics: the same script twice, each time in a fresh process with the default run's compute
settings (fixed thread count, deterministic kernels, pinned math libraries), ends with identical
metrics, beam scores, learning curves and weights.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pipeline.runtime.math_pins import AVX2_ONLY, PINS, cpu_flags, other_vendor_library
from tests.helpers import REPO

RUN = textwrap.dedent("""
    import sys
    from pipeline.runtime.math_pins import pin_math_libraries
    state = pin_math_libraries(sys.argv[2] == "pinned")  # before torch loads, as every stage does
    import hashlib, json
    from collections import Counter
    from pathlib import Path
    import pyarrow as pa
    import torch
    from models.config import ModelConfig
    from pipeline.data.corpora.copynet_rules import SCHEMA, RulesConfig, generate_examples
    from pipeline.decoding.decode import decode_table
    from pipeline.decoding.scoring import score_records
    from pipeline.decoding.settings import EvalConfig
    from pipeline.runtime.device import compute_settings
    from pipeline.training.loop import build_seeded_model, train
    from pipeline.training.settings import TrainConfig
    from pipeline.vocab.vocabulary import build_vocab
    from tests.helpers import encoded_task

    root = Path(sys.argv[1])
    splits = generate_examples(RulesConfig(n_rules=4, instances_per_rule=10, unseen_per_rule=1, max_filler=3))
    counts = {s: Counter(t for row in splits["train"] for t in row[s]) for s in ("src", "tgt")}
    encoded, src, tgt = encoded_task(root, {k: splits[k] for k in ("train", "valid")},
                                     build_vocab(counts["src"]), build_vocab(counts["tgt"]), schema=SCHEMA)
    out = {"state": state}
    for mechanism in ("copynet", "wean"):  # GRU + MKL products; LSTM (oneDNN) for WEAN
        cfg = ModelConfig(src_vocab=len(src), tgt_vocab=len(tgt), emb=12, hidden=16, dropout=0.1)
        model = build_seeded_model(mechanism, cfg, 5)
        train_cfg = TrainConfig(epochs=3, batch_size=8, lr=0.01, threads=2, deterministic=True)
        history = train(model, encoded["train"], encoded["valid"], train_cfg, root / mechanism,
                        model_config=vars(cfg), progress=False)
        ev = EvalConfig(beam_size=3, max_len=20, group_by="rule_type", threads=2, deterministic=True)
        compute_settings(ev.threads, ev.deterministic)
        records = decode_table(model.eval(), pa.Table.from_pylist(splits["test"], schema=SCHEMA), src, tgt, ev,
                               torch.device("cpu"))
        weights = hashlib.sha256(b"".join(t.numpy().tobytes() for t in model.state_dict().values())).hexdigest()
        out[mechanism] = {
            "metrics": score_records(records, ev),
            "valid_loss": [r["valid_loss"] for r in history],
            "scores": [r["scores"] for r in records],
            "weights": weights,
        }
    print(json.dumps(out, sort_keys=True))
""")


def _run(tmp_path: Path, name: str, pinned: bool, machine: dict, one_core: bool) -> dict:
    script = tmp_path / "run.py"
    script.write_text(RUN)
    env = {k: v for k, v in os.environ.items() if k not in {*PINS, *AVX2_ONLY, "LD_PRELOAD"}}
    env.update(machine, PYTHONPATH=str(REPO))
    cmd = [sys.executable, str(script), str(tmp_path / name), "pinned" if pinned else "unpinned"]
    if one_core and shutil.which("taskset"):
        cmd = ["taskset", "-c", "0", *cmd]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_pinned_runs_give_the_same_bits_on_another_machine_and_unpinned_ones_do_not(tmp_path):
    flip = other_vendor_library(tmp_path)
    other = {**AVX2_ONLY, **({"LD_PRELOAD": str(flip)} if flip else {})}
    here = _run(tmp_path, "here", True, {}, one_core=False)
    there = _run(tmp_path, "there", True, other, one_core=True)
    assert here["state"]["math_pinned"] == "true" and there["state"]["math_pinned"] == "true"
    for mechanism in ("copynet", "wean"):
        assert here[mechanism]["weights"] == there[mechanism]["weights"], mechanism
        assert here[mechanism]["valid_loss"] == there[mechanism]["valid_loss"], mechanism
        assert here[mechanism]["scores"] == there[mechanism]["scores"], mechanism
        assert here[mechanism]["metrics"] == there[mechanism]["metrics"], mechanism
        assert here[mechanism]["valid_loss"][-1] < here[mechanism]["valid_loss"][0]  # it trained

    # The control: without the pins the two machines compute other bits. It needs a machine that
    # differs from the simulated one: a CPU with AVX-512 (capped to AVX2 over there).
    if "avx512f" not in cpu_flags():
        pytest.skip("this CPU has no AVX-512: the unpinned control would compare AVX2 with AVX2")
    here_free = _run(tmp_path, "here_free", False, {}, one_core=False)
    there_free = _run(tmp_path, "there_free", False, other, one_core=True)
    assert here_free["state"]["math_pinned"] == "false"
    assert any(here_free[m]["weights"] != there_free[m]["weights"] for m in ("copynet", "wean"))


def test_same_params_give_identical_metrics_in_fresh_processes(tmp_path):
    first = _run(tmp_path, "a", True, {}, one_core=False)
    second = _run(tmp_path, "b", True, {}, one_core=False)
    for mechanism in ("copynet", "wean"):
        a, b = first[mechanism], second[mechanism]
        assert a["weights"] == b["weights"], mechanism
        assert a["metrics"] == b["metrics"], mechanism  # exact, not approximately
        assert a["scores"] == b["scores"] and a["valid_loss"] == b["valid_loss"], mechanism
        assert a["metrics"]["n"] > 0 and a["valid_loss"][-1] < a["valid_loss"][0]
