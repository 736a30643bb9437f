"""This project beside OpenNMT-py, in one run on the same data: training target tokens/s of the
real training loop, and decoding sentences/s (greedy and beam search, a batch at a time and one
sentence at a time), for the deterministic default (math pins, deterministic kernels) and
unpinned, with every ratio to OpenNMT-py printed.

    PYTHONPATH=/tmp/site .venv/bin/python benchmarks/bench_vs_onmt.py                 # 16k and 50k, ~1.5 h on 2 cores
    PYTHONPATH=/tmp/site .venv/bin/python benchmarks/bench_vs_onmt.py --vocabs 16000 --rounds 1 --steps 20
    PYTHONPATH=/tmp/site .venv/bin/python benchmarks/bench_vs_onmt.py --simulate-vendor   # MKL told the other vendor

OpenNMT-py 3.5.1 is an optional extra, never a dependency of the pipeline: install it without its
dependencies beside the project (``benchmarks/bench_onmt_peer.py``'s docstring: the two wheels in
``.whl/``, ``pip install --no-deps --target /tmp/site``) and put it on PYTHONPATH; nothing is
downloaded at run time. The script exits with that message when it is missing.

What runs, per target vocabulary V (``--vocabs``):

1. Data: ``benchmarks/gigaword_shaped.py`` pairs (sources of 31 tokens, targets of 9, Zipfian words,
   half of each target copied from its source), V ids shared by source and target (the V - 4 most
   frequent words and 4 specials; the rest are OOV and reach the output only by copying), written
   once as text; both sides read the same files. Decoding sources: ``--decode-examples`` pairs of
   another seed.
2. Training, ``--rounds`` times in alternating order (OpenNMT, then each of ours, then again), each
   a fresh process on one thread: OpenNMT-py's ``onmt_train`` (``copy_attn``: brnn GRU encoder, GRU
   decoder, Bahdanau "mlp" attention, emb 150, hidden_size 300, batch 64 sentences, Adam 1e-3, clip
   5, dropout 0, its default 2 data workers; bench_onmt_peer.py) and this project's own training
   loop (``pipeline.training.loop.train``: the train stage's engine, batches built in the training
   process) for each ``--mechanisms`` x ``--encoder-hidden`` x ``--modes`` row: CopyNet against
   ``copy_attn`` (the same kind of model: Bahdanau GRU with a copy distribution mixed into one
   output distribution), and the pointer-generator with coverage. Figure: target tokens (with
   </s>) per second of wall clock between the optimizer steps ``--warmup`` and ``--warmup +
   --steps``, the mean over the rounds.
3. Decoding, with the model each side just trained (OpenNMT's saved at its last step, loaded by
   ``onmt_translate``; ours still in memory), in the same processes as step 2: the decoding
   sources, every output exactly ``--decode-len`` tokens long (both sides: minimum = maximum
   length, so the work does not depend on what a barely trained model prefers), greedy and beam
   ``--beam`` with ``--batch`` sentences per batch, and one sentence at a time over the first
   ``--single-examples``. Figure: sentences per second of the translate call (OpenNMT) / of the
   search and the ids-to-words step (ours), model loading excluded on both sides.

Modes (ours): ``pinned`` is the pipeline's default (``train.deterministic: true``: the math pins of
``pipeline.runtime.math_pins``, deterministic kernels); ``unpinned`` is ``deterministic: false``
without pins. ``--simulate-vendor`` runs every process (OpenNMT's too) with MKL's vendor check
answered as the other vendor's CPU would (the library of ``math_pins.other_vendor_library``, loaded
under the pins as ``tests/pipeline/runtime/test_math_pins.py`` does): on an AMD CPU the figures are
then "Intel (simulated)": MKL's Intel code paths on this machine's cores, not an Intel CPU's speed.

Sizes: ``--encoder-hidden`` is this project's encoder size per direction. OpenNMT's brnn splits its
hidden_size over the two directions (150 each at hidden_size 300): ``--encoder-hidden 150`` is the
like-for-like model (encoder 150 per direction, memory 300, decoder 300); ``300``, this project's
default (encoder_hidden = hidden), is a larger model (memory 600, decoder input 1,350 for CopyNet)
and the setting measured when the pins were chosen. Both are printed; the table says which.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks import bench_onmt_peer as peer
from benchmarks.gigaword_shaped import sample_pairs, words

ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--vocabs", nargs="+", type=int, default=[16000, 50000])
    p.add_argument("--mechanisms", nargs="+", default=["copynet", "pointer_generator"])
    p.add_argument("--encoder-hidden", nargs="+", type=int, default=[300, 150], help="ours, per direction")
    p.add_argument("--modes", nargs="+", default=["pinned", "unpinned"], choices=["pinned", "unpinned"])
    p.add_argument("--emb", type=int, default=150)
    p.add_argument("--hidden", type=int, default=300, help="decoder size (ours) = OpenNMT's hidden_size")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--warmup", type=int, default=10, help="untimed optimizer steps")
    p.add_argument("--steps", type=int, default=30, help="timed optimizer steps")
    p.add_argument("--rounds", type=int, default=2, help="alternating repetitions of every training run")
    p.add_argument("--decode-examples", type=int, default=256)
    p.add_argument("--single-examples", type=int, default=32, help="decoded one sentence at a time")
    p.add_argument("--decode-len", type=int, default=16, help="every output's length (both sides)")
    p.add_argument("--beam", type=int, default=10)
    p.add_argument("--no-onmt", action="store_true", help="ours only (no OpenNMT-py needed; no ratios)")
    p.add_argument("--simulate-vendor", action="store_true", help="MKL answers as the other CPU vendor")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=1800, help="seconds per process")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--keep", type=Path, default=None, help="keep data, models and logs here")
    args = p.parse_args(argv)
    if args.warmup % 5 or args.steps % 5:
        p.error("--warmup and --steps must be multiples of 5 (OpenNMT's report points)")
    return args


# --------------------------------------------------------------------------------------------------
# parent


def write_decode_sources(path: Path, vocab_size: int, n: int, seed: int) -> None:
    pool = np.array(words(int(vocab_size * 1.1)), dtype=object)
    src, tgt = sample_pairs(np.random.default_rng(seed + 1), n, len(pool))
    path.write_text("\n".join(" ".join(row) for row in pool[src]) + "\n")
    path.with_name(path.name.replace("src", "tgt")).write_text("\n".join(" ".join(row) for row in pool[tgt]) + "\n")


def child_env(vendor_lib: Path | None) -> dict:
    """The environment of a child: no inherited pins or preloads (ours pins itself when pinned),
    one thread, and the vendor simulation's library path when asked for."""
    from pipeline.runtime.math_pins import PINS

    env = {k: v for k, v in os.environ.items() if k not in {*PINS, "LD_PRELOAD"}}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", THP_MEM_ALLOC_ENABLE="1", PYTHONPATH=_pythonpath())
    if vendor_lib is not None:
        env["BENCH_VENDOR_LIB"] = str(vendor_lib)
    return env


def _pythonpath() -> str:
    return os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)


def run_child(mode: str, spec: dict, run_dir: Path, env: dict, timeout: float) -> dict:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "spec.json").write_text(json.dumps(spec))
    log = run_dir / f"{mode}.log"
    with open(log, "w") as out:
        done = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), f"--_{mode}", str(run_dir)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            timeout=timeout,
        )
    result = run_dir / f"{mode}.json"
    if done.returncode != 0 or not result.exists():
        tail = "\n".join(log.read_text().splitlines()[-20:])
        raise SystemExit(f"bench_vs_onmt.py: the {mode} child failed (exit {done.returncode}); log tail:\n{tail}")
    return json.loads(result.read_text())


def onmt_train(args, env_info, shim_dir, data, run_dir: Path, size: int, env: dict) -> dict:
    """OpenNMT-py's training through bench_onmt_peer.run_one (its timing hooks), model saved."""
    ns = argparse.Namespace(
        emb=args.emb,
        onmt_hidden=args.hidden,
        batch=args.batch,
        warmup=args.warmup,
        steps=args.steps,
        report_every=5,
        pairs=args.pairs,
        num_workers=2,
        threads=1,
        seed=args.seed,
        timeout=args.timeout,
        verbose=False,
        save=True,
    )
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)  # run_one starts its child with os.environ
    try:
        row = peer.run_one(ns, env_info, shim_dir, data, run_dir, size, "fp32", cuda=False)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    if "error" in row:
        raise SystemExit(f"bench_vs_onmt.py: onmt_train failed: {row['error']}\n{row.get('log_tail', '')}")
    row["model"] = str(run_dir / f"model_step_{args.warmup + args.steps}.pt")
    return row


def main(argv=None) -> None:
    args = parse_args(argv)
    env_info = None if args.no_onmt else peer.onmt_environment()
    from pipeline.runtime.math_pins import cpu_model, cpu_vendor, other_vendor_library

    root = Path(tempfile.mkdtemp(prefix="vs_onmt_")) if args.keep is None else args.keep
    root.mkdir(parents=True, exist_ok=True)
    vendor_lib = other_vendor_library(root) if args.simulate_vendor else None
    if args.simulate_vendor and vendor_lib is None:
        raise SystemExit("--simulate-vendor needs a C compiler (cc)")
    this = "Intel" if cpu_vendor() == "GenuineIntel" else "AMD" if cpu_vendor() == "AuthenticAMD" else cpu_vendor()
    other = {"Intel": "AMD", "AMD": "Intel"}.get(this, "the other vendor")
    vendor = f"{other} (simulated on this {this} CPU: MKL's vendor check answered)" if vendor_lib else this
    args.pairs = args.batch * (args.warmup + args.steps + 2 * 200 + 2)  # OpenNMT's 2 workers prefetch 200 each
    header = {
        "cpu": cpu_model(),
        "MKL vendor paths": vendor,
        "python": platform.python_version(),
        "OpenNMT-py": env_info["onmt"] if env_info else "not run",
        "load_avg": f"{os.getloadavg()[0]:.2f}",
    }
    print("# " + ", ".join(f"{k} {v}" for k, v in header.items()), flush=True)
    print(
        f"# emb {args.emb}, decoder {args.hidden}, batch {args.batch} sentences, Adam 1e-3, clip 5, dropout 0, one "
        f"thread; {args.warmup} + {args.steps} timed steps x {args.rounds} rounds; decoding {args.decode_examples} "
        f"sources ({args.single_examples} one at a time), every output {args.decode_len} tokens, beam {args.beam}",
        flush=True,
    )
    results = []
    shim_dir = peer.write_shims(root / "shims", env_info) if env_info else None
    for size in args.vocabs:
        data = peer.write_data(root / f"data_{size}", size, args.pairs, args.seed)
        decode_src = root / f"data_{size}" / "decode_src.txt"
        write_decode_sources(decode_src, size, args.decode_examples, args.seed)
        ours = [(m, eh, mode) for m in args.mechanisms for eh in args.encoder_hidden for mode in args.modes]
        runs: dict = {}
        for r in range(args.rounds):
            if env_info:
                run_dir = root / f"onmt_{size}_{r}"
                row = onmt_train(args, env_info, shim_dir, data, run_dir, size, child_env(vendor_lib))
                spec = {
                    "model": row["model"],
                    "src": str(decode_src),
                    "beam": args.beam,
                    "batch": args.batch,
                    "single": args.single_examples,
                    "decode_len": args.decode_len,
                }
                env = child_env(vendor_lib)
                env["PYTHONPATH"] = os.pathsep.join(p for p in (env["PYTHONPATH"], str(shim_dir)) if p)
                row["decode"] = run_child("onmt_translate", spec, run_dir, env, args.timeout)
                runs.setdefault(("OpenNMT-py copy_attn", args.hidden // 2, "-"), []).append(row)
                print(f"  V={size} round {r + 1}: OpenNMT-py {row['tgt_tok_s']:,.0f} tok/s", flush=True)
            for mech, eh, mode in ours:
                spec = {
                    "mechanism": mech,
                    "encoder_hidden": eh,
                    "pinned": mode == "pinned",
                    "data": {k: str(v) for k, v in data.items() if k in ("src", "tgt", "vocab")},
                    "decode_src": str(decode_src),
                    "vocab_size": size,
                    **{k: getattr(args, k) for k in ("emb", "hidden", "batch", "warmup", "steps", "seed", "beam")},
                    **{k: getattr(args, k) for k in ("single_examples", "decode_len")},
                }
                row = run_child(
                    "ours",
                    spec,
                    root / f"ours_{size}_{mech}_{eh}_{mode}_{r}",
                    child_env(vendor_lib),
                    args.timeout,
                )
                runs.setdefault((mech, eh, mode), []).append(row)
                print(f"  V={size} round {r + 1}: {mech} enc {eh} {mode} {row['tgt_tok_s']:,.0f} tok/s", flush=True)
        results.append(summarise(size, runs))
        print_tables(size, results[-1], vendor)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps({"settings": vars(args), "environment": header, "results": results}, indent=2, default=str)
        )
    if args.keep is None:
        import shutil

        shutil.rmtree(root, ignore_errors=True)


DECODES = ("greedy_batched", "greedy_single", "beam_batched", "beam_single")


def summarise(size: int, runs: dict) -> dict:
    rows = []
    for (name, eh, mode), reps in runs.items():
        row = {
            "vocab": size,
            "model": name,
            "encoder_hidden": eh,
            "mode": mode,
            "tgt_tok_s": statistics.mean(r["tgt_tok_s"] for r in reps),
            "tgt_tok_s_runs": [r["tgt_tok_s"] for r in reps],
            "params": reps[0].get("params"),
            "math": reps[0].get("math"),
        }
        for d in DECODES:
            row[f"{d}_sent_s"] = statistics.mean(r["decode"][d]["sent_s"] for r in reps)
            row[f"{d}_len"] = reps[0]["decode"][d]["mean_len"]
        rows.append(row)
    return {"vocab": size, "rows": rows}


def print_tables(size: int, summary: dict, vendor: str) -> None:
    rows = summary["rows"]
    onmt = next((r for r in rows if r["model"].startswith("OpenNMT")), None)
    ratio = lambda v, key: f"{v / onmt[key]:.2f}x" if onmt else "n/a"  # noqa: E731
    print(f"\n## target vocabulary {size:,} ({vendor}): training, target tokens/s (one thread)\n")
    print(
        "| model | encoder / direction | mode | params | tok/s | runs | / OpenNMT-py |\n|---|---:|---|---:|---:|---|---:|"
    )
    for r in rows:
        runs = ", ".join(f"{x:,.0f}" for x in r["tgt_tok_s_runs"])
        print(
            f"| {r['model']} | {r['encoder_hidden']} | {r['mode']} | {r['params']:,} | {r['tgt_tok_s']:,.0f} | {runs} | "
            f"{ratio(r['tgt_tok_s'], 'tgt_tok_s')} |"
        )
    print(f"\n## target vocabulary {size:,} ({vendor}): decoding, sentences/s (outputs of equal length)\n")
    head = " | ".join(f"{d.replace('_', ' ')} | / ONMT" for d in DECODES)
    print(f"| model | encoder | mode | {head} |\n|---|---:|---|" + "---:|---:|" * len(DECODES))
    for r in rows:
        cells = " | ".join(f"{r[f'{d}_sent_s']:.1f} | {ratio(r[f'{d}_sent_s'], f'{d}_sent_s')}" for d in DECODES)
        print(f"| {r['model']} | {r['encoder_hidden']} | {r['mode']} | {cells} |")
    lens = {(r["model"], d): r[f"{d}_len"] for r in rows for d in DECODES}
    print(f"\nmean output length per decode (must be equal across rows): {sorted(set(lens.values()))}", flush=True)


# --------------------------------------------------------------------------------------------------
# children


def _load_vendor_simulation() -> None:
    """The simulated CPU's answer to MKL's vendor check, loaded as the CPU's own (under the pins',
    which a pinned process loaded first)."""
    lib = os.environ.get("BENCH_VENDOR_LIB")
    if lib:
        import ctypes

        ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)


def ours_child(run_dir: Path) -> None:
    spec = json.loads((run_dir / "spec.json").read_text())
    from pipeline.runtime.math_pins import pin_math_libraries

    math = pin_math_libraries(spec["pinned"])  # before torch, as every stage does
    _load_vendor_simulation()
    import torch

    from models.config import ModelConfig
    from pipeline.decoding.search import beam_search, greedy
    from pipeline.io.shards import ShardWriter, make_schema
    from pipeline.runtime.device import compute_settings
    from pipeline.training.loop import build_seeded_model, train
    from pipeline.training.settings import TrainConfig
    from pipeline.vocab.batching import collate
    from pipeline.vocab.encoded import EncodedSplit, write_encoded_split
    from pipeline.vocab.extended import ext_ids_to_tokens
    from pipeline.vocab.vocabulary import SPECIALS, Vocab

    words_in = [line.split("\t")[0] for line in Path(spec["data"]["vocab"]).read_text().splitlines()]
    vocab = Vocab(list(SPECIALS) + words_in, [0] * len(SPECIALS) + [1] * len(words_in))
    assert len(vocab) == spec["vocab_size"]
    src = [line.split() for line in Path(spec["data"]["src"]).read_text().splitlines()]
    tgt = [line.split() for line in Path(spec["data"]["tgt"]).read_text().splitlines()]
    if len({len(t) for t in tgt}) != 1:
        raise SystemExit("every target must have the same length (tokens per step are counted from it)")
    schema = make_schema([])
    tokens_per_step = spec["batch"] * (len(tgt[0]) + 1)  # </s> included, as OpenNMT counts them
    for split, rows in {"train": range(len(src)), "valid": range(spec["batch"])}.items():
        with ShardWriter(run_dir / "shards" / split, schema) as writer:
            writer.write([{"id": str(i), "src": src[i], "tgt": tgt[i], "refs": []} for i in rows])
        write_encoded_split(run_dir / "shards" / split, run_dir / "ids" / split, vocab, vocab)
    train_split, valid_split = (EncodedSplit(run_dir / "ids" / s, len(vocab)) for s in ("train", "valid"))

    cfg = ModelConfig(
        src_vocab=len(vocab),
        tgt_vocab=len(vocab),
        emb=spec["emb"],
        hidden=spec["hidden"],
        encoder_hidden=spec["encoder_hidden"],
        dropout=0.0,
    )
    model = build_seeded_model(spec["mechanism"], cfg, spec["seed"])
    train_cfg = TrainConfig(
        epochs=1,
        max_steps=spec["warmup"] + spec["steps"],
        batch_size=spec["batch"],
        lr=1e-3,
        clip=5.0,
        threads=1,
        deterministic=spec["pinned"],
        device="cpu",
        log_every=1,
        seed=spec["seed"] + 1,
    )
    marks: dict[int, float] = {}
    train(
        model,
        train_split,
        valid_split,
        train_cfg,
        run_dir / "ckpt",
        model_config=vars(cfg),
        on_step=lambda row: marks.setdefault(row["step"], time.perf_counter()),
        progress=False,
    )
    first, last = spec["warmup"], spec["warmup"] + spec["steps"]
    tok_s = tokens_per_step * spec["steps"] / (marks[last] - marks[first])

    compute_settings(1, spec["pinned"])  # as the evaluate stage decodes (evaluate.deterministic)
    model.eval()
    sources = [line.split() for line in Path(spec["decode_src"]).read_text().splitlines()]
    length = spec["decode_len"]

    def decode(beam: int, batch: int, n: int) -> dict:
        outputs, start = [], time.perf_counter()
        for i in range(0, n, batch):
            b = collate(sources[i : i + batch], None, vocab, vocab)
            if beam == 1:
                hyps = greedy(model, b, max_len=length, min_len=length)
            else:
                hyps = [nbest[0] for nbest in beam_search(model, b, beam, max_len=length, min_len=length)]
            outputs += [ext_ids_to_tokens(h.ids, b.oovs[j], vocab) for j, h in enumerate(hyps)]
        seconds = time.perf_counter() - start
        return {
            "sent_s": n / seconds,
            "mean_len": float(np.mean([len([t for t in o if t != "</s>"]) for o in outputs])),
        }

    n, single = len(sources), spec["single_examples"]
    result = {
        "tgt_tok_s": tok_s,
        "params": sum(p.numel() for p in model.parameters()),
        "math": {**math, "torch_threads": torch.get_num_threads()},
        "decode": {
            "greedy_batched": decode(1, spec["batch"], n),
            "greedy_single": decode(1, 1, single),
            "beam_batched": decode(spec["beam"], spec["batch"], n),
            "beam_single": decode(spec["beam"], 1, single),
        },
    }
    (run_dir / "ours.json").write_text(json.dumps(result))


def onmt_translate_child(run_dir: Path) -> None:
    """onmt_translate (OpenNMT-py 3.5.1) on the saved model: each decode timed around
    ``Translator._translate`` (model loading excluded), outputs exactly ``decode_len`` tokens."""
    spec = json.loads((run_dir / "spec.json").read_text())
    _load_vendor_simulation()
    # OpenNMT-py 3.5.1 pickles its options (argparse.Namespace) into the checkpoint and loads it with
    # torch.load's old default; torch >= 2.6 loads weights only unless told. The file is the one the
    # training child just wrote.
    os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"
    import torch

    torch.set_num_threads(1)
    import onmt.bin.translate
    import onmt.translate.translator as translator_mod

    timings: list[float] = []
    plain = translator_mod.Translator._translate

    def timed(self, *a, **k):
        start = time.perf_counter()
        out = plain(self, *a, **k)
        timings.append(time.perf_counter() - start)
        return out

    translator_mod.Translator._translate = timed

    # OpenNMT-py 3.5.1 saves a copy generator's weights apart ("generator": {"linear.weight", ...}), and
    # its loader (onmt/models/model.py, load_state_dict) finds them there only for a plain generator: it
    # cannot load a copy_attn checkpoint it wrote ("Missing key in checkpoint: generator.linear.weight").
    # On loading, they move into the model's own weights under their full names, where it looks first.
    import onmt.model_builder

    plain_load = onmt.model_builder.load_checkpoint

    def load_checkpoint(path):
        checkpoint = plain_load(path)
        for key, value in (checkpoint.get("generator") or {}).items():
            checkpoint["model"][f"generator.{key}"] = value
        checkpoint["generator"] = None
        return checkpoint

    onmt.model_builder.load_checkpoint = load_checkpoint

    # Its inference engine builds the source iterator without the copy keys (``copy=False``: no
    # ``src_map``), so translating a copy_attn model fails ("KeyError: 'src_map'"); training passes
    # ``copy=True`` for such a model, and so does this wrapper.
    import onmt.inference_engine

    plain_iter = onmt.inference_engine.build_dynamic_dataset_iter

    def build_iter(*a, **k):
        return plain_iter(*a, **{**k, "copy": True})

    onmt.inference_engine.build_dynamic_dataset_iter = build_iter
    sources = Path(spec["src"]).read_text().splitlines()
    single_src = run_dir / "single_src.txt"
    single_src.write_text("\n".join(sources[: spec["single"]]) + "\n")
    results = {}
    for name, beam, batch, src in (
        ("greedy_batched", 1, spec["batch"], spec["src"]),
        ("greedy_single", 1, 1, str(single_src)),
        ("beam_batched", spec["beam"], spec["batch"], spec["src"]),
        ("beam_single", spec["beam"], 1, str(single_src)),
    ):
        out = run_dir / f"{name}.txt"
        sys.argv = [
            "onmt_translate",
            *("-model", spec["model"], "-src", src, "-output", str(out)),
            *("-beam_size", str(beam), "-batch_size", str(batch), "-batch_type", "sents"),
            *("-min_length", str(spec["decode_len"]), "-max_length", str(spec["decode_len"])),
            *("-n_best", "1", "-seed", "1"),
        ]
        timings.clear()
        onmt.bin.translate.main()
        lines = out.read_text().splitlines()
        results[name] = {
            "sent_s": len(lines) / sum(timings),
            "mean_len": float(np.mean([len(line.split()) for line in lines])),
        }
    (run_dir / "onmt_translate.json").write_text(json.dumps(results))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--_ours":
        ours_child(Path(sys.argv[2]))
    elif len(sys.argv) == 3 and sys.argv[1] == "--_onmt_translate":
        onmt_translate_child(Path(sys.argv[2]))
    else:
        main()
