"""The same bits on every x86-64 machine (pipeline.runtime.math_pins): a tiny task trained and evaluated in
fresh processes that see other machines gives the same weights, learning curve and metrics when
the math libraries are pinned, and other ones when they are not (the check can fail); the kernels'
fingerprints equal the reference machine's (an AMD EPYC: on an Intel CPU this compares two vendors
for real); MKL's vendor check is answered before torch loads, and in the children.

The other machine is simulated on this one: an AVX2-only CPU (MKL, oneDNN and ATen capped at AVX2,
what a CPU without AVX-512 runs by default), a CPU of the other vendor (a two-function library
answering MKL's vendor check as that vendor's CPU would, loaded after the pins and before torch, as
the CPU's own answer sits under the pins' on a real machine), and one core instead of two (taskset;
the thread count stays the params' 2). This machine's own CPU is the first machine. And the same
params give the same metrics: the same script twice, each time in a fresh process with the default
run's compute settings (fixed thread count, deterministic kernels, pinned math libraries), ends with
identical metrics, beam scores, learning curves and weights.
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

from pipeline.runtime.math_pins import AVX2_ONLY, PINS, cpu_flags, cpu_vendor, other_vendor_library
from tests.helpers import REPO

RUN = textwrap.dedent("""
    import sys
    import ctypes, os
    from pipeline.runtime.math_pins import pin_math_libraries
    state = pin_math_libraries(sys.argv[2] == "pinned")  # before torch loads, as every stage does
    if os.environ.get("SIMULATED_VENDOR_LIB"):  # the simulated CPU's own answer to MKL's vendor check
        ctypes.CDLL(os.environ["SIMULATED_VENDOR_LIB"], mode=ctypes.RTLD_GLOBAL)
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
    env = {k: v for k, v in os.environ.items() if k not in {*PINS, *AVX2_ONLY, "LD_PRELOAD", "SIMULATED_VENDOR_LIB"}}
    env.update(machine, PYTHONPATH=str(REPO))
    cmd = [sys.executable, str(script), str(tmp_path / name), "pinned" if pinned else "unpinned"]
    if one_core and shutil.which("taskset"):
        cmd = ["taskset", "-c", "0", *cmd]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_pinned_runs_give_the_same_bits_on_another_machine_and_unpinned_ones_do_not(tmp_path):
    flip = other_vendor_library(tmp_path)
    other = {**AVX2_ONLY, **({"SIMULATED_VENDOR_LIB": str(flip)} if flip else {})}
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
    # differs from the simulated one: the other vendor (MKL's VML exp and log take other code), or a
    # CPU with AVX-512 (capped to AVX2 over there).
    if flip is None and "avx512f" not in cpu_flags():
        pytest.skip("no C compiler for the vendor simulation and no AVX-512: the control would compare like with like")
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


def _python(code: str, env: dict, tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env={**env, "PYTHONPATH": str(REPO)}, capture_output=True, text=True
    )


def test_fingerprints_equal_the_reference_machine(tmp_path):
    """The kernels the pins fix give the reference machine's bits here (pipeline/runtime/
    reference_fingerprints.json, made on an AMD EPYC): on another vendor's CPU, a real comparison."""
    env = {k: v for k, v in os.environ.items() if k not in {*PINS, "LD_PRELOAD"}}
    done = subprocess.run(
        [sys.executable, "-m", "pipeline.runtime.math_check"], cwd=REPO, env=env, capture_output=True, text=True
    )
    report = json.loads(done.stdout)
    assert report["math_pinned"] == "true", report["math_pinned_why"]
    differing = [op for op, same in report["equal_to_reference"].items() if not same]
    assert not differing, f"{report['cpu']} computes other bits than {report['reference']['cpu']}: {differing}"
    assert done.returncode == 0


def test_mkl_vendor_check_answered_before_torch_and_in_children(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in {*PINS, "LD_PRELOAD"}}
    env["COPYSEQ_CACHE"] = str(tmp_path / "cache")  # built afresh, as on a new machine
    code = (
        "import json, os, subprocess, sys\n"
        "from pipeline.runtime.math_pins import pin_math_libraries\n"
        "state = pin_math_libraries(True)\n"
        "child = subprocess.run([sys.executable, '-c', 'from pipeline.runtime.math_pins import pin_math_libraries; "
        "import json; print(json.dumps(pin_math_libraries(False)))'], capture_output=True, text=True)\n"
        "print(json.dumps({'state': state, 'preload': os.environ.get('LD_PRELOAD', ''), "
        "'child': json.loads(child.stdout)}))\n"
    )
    out = json.loads(_python(code, env, tmp_path).stdout)
    intel = cpu_vendor() == "GenuineIntel"
    assert out["state"]["math_pinned"] == "true"
    assert out["state"]["mkl_intel_check"] == ("native (Intel CPU)" if intel else "answered: Intel")
    built = list((tmp_path / "cache").glob("libmkl_vendor_1_*.so"))
    assert len(built) == 1 and str(built[0]) in out["preload"].split(":")  # children load it at start
    # The child inherits the pins and the answer: pinned, without pinning itself.
    assert (
        out["child"]["math_pinned"] == "true" and out["child"]["math_pinned_why"] == "inherited from the parent process"
    )


def test_without_a_compiler_a_non_intel_cpu_runs_unpinned_and_says_why(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in {*PINS, "LD_PRELOAD"}}
    env.update(COPYSEQ_CACHE=str(tmp_path / "empty"), PATH=str(tmp_path), CC="no-such-compiler")
    code = "import json; from pipeline.runtime.math_pins import pin_math_libraries; print(json.dumps(pin_math_libraries(True)))"
    done = _python(code, env, tmp_path)
    state = json.loads(done.stdout)
    if cpu_vendor() == "GenuineIntel":  # MKL takes its AVX2 branch here unasked
        assert state["math_pinned"] == "true" and state["mkl_intel_check"] == "native (Intel CPU)"
    else:
        assert state["math_pinned"] == "false" and "no C compiler" in state["math_pinned_why"]
        assert "math libraries not pinned" in done.stderr  # said where the user sees it, not only in the tags


def test_install_step_without_a_compiler_warns_and_completes(tmp_path):
    """`make install` runs `mkl_vendor.main()` (the Makefile's line, run here): a machine without cc still
    installs (an Intel CPU needs no answer) and is told what it gives up, with no other warning."""
    env = {k: v for k, v in os.environ.items() if k not in {*PINS, "LD_PRELOAD"}}
    env.update(COPYSEQ_CACHE=str(tmp_path / "empty"), PATH=str(tmp_path), CC="no-such-compiler")
    line = next(x for x in (REPO / "Makefile").read_text().splitlines() if "mkl_vendor" in x)
    code = line.split('-c "', 1)[1].split('"', 1)[0]  # the install step's own Python
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "no working C compiler" in done.stderr and "math_pinned: false" in done.stderr
    assert "RuntimeWarning" not in done.stderr and done.stderr.count("\n") == 1, done.stderr  # its one line
    assert not list((tmp_path / "empty").glob("*.so"))
