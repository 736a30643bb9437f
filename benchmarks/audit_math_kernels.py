"""Which math kernels the pipeline runs under the pins, and whether any holds an instruction whose
result differs between CPU vendors: the evidence behind "the same bits on every x86-64 CPU with
AVX2" (pipeline.runtime.math_pins) that no simulation on one machine can give.

Two CPUs running the same code path (the pins fix it: MKL's AVX2 branch, vendor check answered;
ATen and oneDNN at AVX2) compute the same bits, unless an instruction's result is
implementation-defined: the approximate reciprocals ``rcpps``/``rcpss``/``rsqrtps``/``rsqrtss`` (and
their VEX forms) give other bits on Intel and AMD CPUs (both meet the documented 1.5 x 2^-12
error bound differently), as do the x87 transcendental instructions. Everything else (add, mul,
FMA, div, sqrt, conversions, shuffles) is exactly specified by IEEE 754 or the ISA.

What runs:

1. Every mechanism of ``models.registry`` on each decoder it accepts (not the ``backbone_*`` heads, which need a
   pretrained checkpoint), tiny sizes, under
   ``valgrind --tool=callgrind`` with the pins in force (as a stage process pins): two training
   steps (forward, backward, clipping, fused Adam), greedy and beam search; plus
   ``pipeline.runtime.math_check``'s fingerprint operations and the large products of a real
   output layer (MKL picks kernels by shape). Callgrind lists every function that ran.
2. ``objdump`` of ``libtorch_cpu.so`` (MKL and ATen are linked into it): the functions holding an
   approximate instruction, intersected with the functions that ran.
3. oneDNN builds its kernels at run time (JIT): the same workload natively with
   ``ONEDNN_JIT_DUMP=1`` writes each generated kernel to a file, and each is disassembled.

Prints the MKL kernels that ran, any executed function holding an approximate instruction, and
the JIT kernels' verdict; exits 1 when an executed kernel holds one.

    .venv/bin/python benchmarks/audit_math_kernels.py            # ~10-15 min (valgrind, objdump)
    .venv/bin/python benchmarks/audit_math_kernels.py --json out/audit.json

Needs valgrind and binutils (Debian: ``apt-get install valgrind binutils``). Measured result and
date: docs/training.md, "The same bits on every machine".
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APPROXIMATE = re.compile(
    r"\t(v?rcpps|v?rcpss|v?rsqrtps|v?rsqrtss|vrcp14\w*|vrsqrt14\w*|vrcp28\w*|vrsqrt28\w*|"
    r"f2xm1|fyl2x|fyl2xp1|fsin|fcos|fsincos|fptan|fpatan)\b"
)

PROBE = r"""
import sys
from pipeline.runtime.math_pins import pin_math_libraries
state = pin_math_libraries(True)
assert state["math_pinned"] == "true", state
import torch
from models.config import ModelConfig
from models.registry import DECLARED, build_model, runs_on_backbone
from pipeline.decoding.search import beam_search, greedy
from pipeline.runtime.device import compute_settings
from pipeline.runtime.math_check import fingerprints
from pipeline.vocab.batching import collate
from pipeline.vocab.vocabulary import SPECIALS, Vocab

compute_settings(int(sys.argv[1]), True)
fingerprints()
torch.set_num_threads(int(sys.argv[1]))
words = [f"w{i}" for i in range(40)]
vocab = Vocab(list(SPECIALS) + words[:30], [0] * 4 + [1] * 30)  # w30.. are OOV: the extended vocabulary
src = [[words[(3 * i + j) % 40] for j in range(6 + i % 3)] for i in range(4)]
tgt = [s[1:4] + [words[i]] for i, s in enumerate(src)]
batch = collate(src, tgt, vocab, vocab)
for name, mech in DECLARED.items():
    if runs_on_backbone(name):  # needs a pretrained checkpoint (model.backbone): not audited here
        continue
    for decoder in mech.decoders:
        torch.manual_seed(0)
        sizes = {"decoder": "transformer", "decoder_heads": 2} if decoder == "transformer" else {}
        model = build_model(name, ModelConfig(src_vocab=len(vocab), tgt_vocab=len(vocab), emb=8, hidden=16, **sizes))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
        model.train()
        for _ in range(2):
            loss = -model(batch).sum()
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            opt.step()
        model.eval()
        greedy(model, batch, max_len=5)
        beam_search(model, batch, 3, max_len=5)
# an output layer's own products (MKL picks kernels by shape)
for m, k, n in ((640, 300, 16000), (64, 1350, 900), (1, 750, 900), (10, 300, 16000)):
    a, w = torch.randn(m, k, requires_grad=True), torch.randn(n, k, requires_grad=True)
    torch.log_softmax(a @ w.t(), -1).sum().backward()
print("probe done")
"""


def run_probe(workdir: Path, env: dict, threads: int, valgrind: bool) -> subprocess.CompletedProcess:
    script = workdir / "probe.py"
    script.write_text(PROBE)
    cmd = [sys.executable, str(script), str(threads)]
    if valgrind:
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={workdir / 'callgrind.out'}", *cmd]
    return subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True)


def executed_functions(callgrind_out: Path) -> dict[str, set[str]]:
    """Functions callgrind saw run, per object file (names as callgrind writes them: demangled)."""
    names: dict[str, dict[str, str]] = {"ob": {}, "fn": {}}
    ran: dict[str, set[str]] = defaultdict(set)
    obj = None
    line_re = re.compile(r"^(c?)(ob|fn)=\((\d+)\)(?: (.*))?$")
    with open(callgrind_out, errors="replace") as fh:
        for line in fh:
            m = line_re.match(line.rstrip("\n"))
            if not m:
                continue
            called, kind, ident, name = m.groups()
            if name:
                names[kind][ident] = name
            if not called:
                if kind == "ob":
                    obj = names["ob"].get(ident)
                else:
                    ran[obj or "?"].add(names["fn"].get(ident, ident))
    return ran


def approximate_functions(library: Path) -> dict[str, set[str]]:
    """Every function of ``library`` holding an approximate instruction -> those instructions."""
    found: dict[str, set[str]] = defaultdict(set)
    proc = subprocess.Popen(
        ["objdump", "-d", "--no-show-raw-insn", "-C", str(library)], stdout=subprocess.PIPE, text=True, errors="replace"
    )
    function = None
    header = re.compile(r"^[0-9a-f]+ <(.*)>:$")
    for line in proc.stdout:
        m = header.match(line.rstrip("\n"))
        if m:
            function = m.group(1)
            continue
        a = APPROXIMATE.search(line)
        if a and function:
            found[function].add(a.group(1))
    proc.wait()
    return found


def jit_kernels(workdir: Path, env: dict, threads: int) -> dict[str, set[str]]:
    """oneDNN's JIT kernels of the probe (ONEDNN_JIT_DUMP=1), each disassembled -> approximate instructions."""
    jit_dir = workdir / "jit"
    jit_dir.mkdir()
    done = run_probe(jit_dir, {**env, "ONEDNN_JIT_DUMP": "1", "DNNL_JIT_DUMP": "1"}, threads, valgrind=False)
    if done.returncode != 0:
        raise SystemExit(f"probe failed:\n{done.stderr[-2000:]}")
    out = {}
    for dump in sorted(jit_dir.glob("*.bin")):
        text = subprocess.run(
            ["objdump", "-D", "-b", "binary", "-m", "i386:x86-64", str(dump)], capture_output=True, text=True
        ).stdout
        out[dump.name] = {m.group(1) for m in APPROXIMATE.finditer(text)}
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=2, help="torch threads in the probe (the stages' default: 2)")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    for tool in ("valgrind", "objdump"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} not found (Debian: apt-get install valgrind binutils)")
    import torch

    library = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        done = run_probe(workdir, env, args.threads, valgrind=True)
        if done.returncode != 0 or "probe done" not in done.stdout:
            raise SystemExit(f"probe under valgrind failed:\n{done.stderr[-3000:]}")
        ran = executed_functions(workdir / "callgrind.out")
        ran_torch = next((fns for obj, fns in ran.items() if obj.endswith("libtorch_cpu.so")), set())
        approx = approximate_functions(library)
        jit = jit_kernels(workdir, env, args.threads)
    hazards = {fn: sorted(approx[fn]) for fn in sorted(ran_torch) if fn in approx}
    mkl = sorted(fn for fn in ran_torch if re.match(r"mkl_(blas|vml|lapack)_", fn))
    jit_hazards = {name: sorted(i) for name, i in jit.items() if i}
    print(f"# libtorch_cpu.so (torch {torch.__version__}): {len(ran_torch):,} functions ran under the pins")
    print(f"# MKL math kernels that ran ({len(mkl)}):")
    for fn in mkl:
        print(f"  {fn}{'   <- ' + ', '.join(approx[fn]) if fn in approx else ''}")
    print(
        f"# functions of libtorch_cpu.so holding approximate instructions: {len(approx):,}; of them ran: {len(hazards)}"
    )
    for fn, ins in hazards.items():
        print(f"  {fn}: {', '.join(ins)}")
    print(f"# oneDNN JIT kernels generated: {len(jit)}; holding approximate instructions: {len(jit_hazards)}")
    for name, ins in jit_hazards.items():
        print(f"  {name}: {', '.join(ins)}")
    verdict = "no executed kernel holds an approximate instruction" if not hazards and not jit_hazards else "HAZARDS"
    print(f"\n{verdict}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "torch": torch.__version__,
                    "mkl_kernels": mkl,
                    "hazards": hazards,
                    "jit": {k: sorted(v) for k, v in jit.items()},
                },
                indent=2,
            )
        )
    if hazards or jit_hazards:
        sys.exit(1)


if __name__ == "__main__":
    main()
