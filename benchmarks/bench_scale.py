"""Scale: a generated Gigaword-shaped corpus through prepare, vocab and training steps, at two sizes;
pairs/s of every stage and its peak resident memory, which must stay flat in the corpus size.

For each size N (default 400,000 and 4,000,000 pairs):
  generate   benchmarks/gigaword_shaped.py writes train.article.txt / train.title.txt (N pairs) and a
             2,000-pair valid split in the Rush release's format (Zipfian 50,000 words)
  prepare    pipeline.data.corpora.gigaword.write_splits, format rush (the prepare stage's reader)
  vocab      the vocab stage: token counts part by part, the vocabularies, the id-encoded splits
  train      pipeline.training.loop.train on the encoded splits: --steps optimizer steps of --mechanism
             (emb 150 / hidden 300, batch 64, target vocabulary = every corpus word), then validation
Each stage runs in a fresh child process; its peak RSS is the child's ru_maxrss (os.wait4).

    .venv/bin/python benchmarks/bench_scale.py                        # ~35 min on 2 cores, ~3 GB of disk
    .venv/bin/python benchmarks/bench_scale.py --sizes 100000 400000 --steps 100 --work /tmp/scale
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------- #
# Stages (run in a child process: ``bench_scale.py stage <name> <work dir> ...``). Each imports what
# it runs inside its function, not at the top: the child's peak RSS then counts what its stage
# loads, not torch and the models for the prepare stage.
# --------------------------------------------------------------------------- #


def stage_generate(work: Path, pairs: int) -> dict:
    from benchmarks.gigaword_shaped import write_rush

    write_rush(work / "raw", pairs, seed=0, prefix="train")
    write_rush(work / "raw", 2000, seed=1, prefix="valid")
    return {"pairs": pairs}


def stage_prepare(work: Path) -> dict:
    from pipeline.data.corpora import gigaword

    raw = work / "raw"
    cfg = gigaword.Config(
        format="rush",
        train_src_file=str(raw / "train.article.txt"),
        train_tgt_file=str(raw / "train.title.txt"),
        valid_src_file=str(raw / "valid.article.txt"),
        valid_tgt_file=str(raw / "valid.title.txt"),
    )
    manifests = gigaword.write_splits(cfg, work / "shards")
    return {
        "pairs": manifests["train"]["rows_in"] + manifests["valid"]["rows_in"],
        "rows": {s: m["rows"] for s, m in manifests.items()},
    }


def stage_vocab(work: Path) -> dict:
    from pipeline.io.shards import read_manifest
    from pipeline.vocab.encoded import write_encoded_split
    from pipeline.vocab.vocabulary import build_vocab, count_split_tokens

    vocabs = {}
    for side in ("src", "tgt"):
        vocabs[side] = build_vocab(count_split_tokens(work / "shards" / "train", side))
        vocabs[side].save(work / "vocab" / f"{side}.vocab")
    for split in ("train", "valid"):
        write_encoded_split(work / "shards" / split, work / "vocab" / "ids" / split, vocabs["src"], vocabs["tgt"])
    rows = sum(read_manifest(work / "shards" / s)["rows"] for s in ("train", "valid"))
    return {"pairs": rows, "src_vocab": len(vocabs["src"]), "tgt_vocab": len(vocabs["tgt"])}


def stage_train(work: Path, steps: int, mechanism: str, threads: int) -> dict:
    import torch

    from models.config import ModelConfig
    from pipeline.training.loop import build_seeded_model, train
    from pipeline.training.settings import TrainConfig
    from pipeline.vocab.encoded import EncodedSplit
    from pipeline.vocab.vocabulary import Vocab

    torch.set_num_threads(threads)
    src, tgt = Vocab.load(work / "vocab" / "src.vocab"), Vocab.load(work / "vocab" / "tgt.vocab")
    splits = {s: EncodedSplit(work / "vocab" / "ids" / s, len(tgt)) for s in ("train", "valid")}
    cfg = ModelConfig(src_vocab=len(src), tgt_vocab=len(tgt), emb=150, hidden=300)
    model = build_seeded_model(mechanism, cfg, 0)
    start = time.perf_counter()
    history = train(
        model,
        splits["train"],
        splits["valid"],
        TrainConfig(epochs=1, max_steps=steps, batch_size=64),
        work / "checkpoints",
        model_config=vars(cfg),
        progress=False,
    )
    seconds = time.perf_counter() - start
    return {
        "pairs": steps * 64,
        "steps": history[-1]["step"],
        "tokens_per_s": history[-1]["tokens_per_s"],
        "valid_loss": history[-1]["valid_loss"],
        "train_seconds": seconds,
    }


STAGES = {"generate": stage_generate, "prepare": stage_prepare, "vocab": stage_vocab, "train": stage_train}


def run_stage(name: str, work: Path, *extra: str, script: str = __file__) -> dict:
    """Run one stage in a child process (``script stage <name> <work> ...``, which writes
    ``<work>/<name>.json``): its result, wall seconds and peak RSS (MB)."""
    out = work / f"{name}.json"
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, script, "stage", name, str(work), *extra], cwd=REPO)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"stage {name} failed with exit code {proc.returncode}")
    result = json.loads(out.read_text())
    return {
        **result,
        "seconds": seconds,
        "pairs_per_s": result["pairs"] / seconds,
        "peak_rss_mb": usage.ru_maxrss / 1024,
    }


class MemorySampler:
    """Peak anonymous and file-backed resident memory of this process, sampled every 0.2 s
    (/proc/self/status RssAnon, RssFile). ru_maxrss counts both; the file-backed part is the
    memory-mapped shards in the page cache, which the kernel reclaims under pressure."""

    def __init__(self) -> None:
        import threading

        self.peak = {"RssAnon": 0, "RssFile": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def sample(self) -> None:
        for line in Path("/proc/self/status").read_text().splitlines():
            key = line.split(":")[0]
            if key in self.peak:
                self.peak[key] = max(self.peak[key], int(line.split()[1]) // 1024)  # MB

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.sample()

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join()
        self.sample()
        hwm = [line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmHWM")]
        return {
            "peak_anon_mb": self.peak["RssAnon"],
            "peak_file_mb": self.peak["RssFile"],
            "vm_hwm_mb": int(hwm[0].split()[1]) // 1024 if hwm else None,
        }


def child(argv: list[str]) -> None:
    name, work, extra = argv[0], Path(argv[1]), argv[2:]
    sampler = MemorySampler()
    args = {
        "generate": lambda: (work, int(extra[0])),
        "prepare": lambda: (work,),
        "vocab": lambda: (work,),
        "train": lambda: (work, int(extra[0]), extra[1], int(extra[2])),
    }[name]()
    result = STAGES[name](*args)
    (work / f"{name}.json").write_text(json.dumps({**result, **sampler.stop()}))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", nargs="+", type=int, default=[400_000, 4_000_000])
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--mechanism", default="copynet")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--work", type=Path, default=None, help="working directory (default: a temp dir, removed)")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    root = args.work or Path(tempfile.mkdtemp(prefix="bench_scale-"))
    results = {}
    try:
        for size in args.sizes:
            work = root / str(size)
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            rows = {"generate": run_stage("generate", work, str(size))}
            for name in ("prepare", "vocab"):
                rows[name] = run_stage(name, work)
            rows["train"] = run_stage("train", work, str(args.steps), args.mechanism, str(args.threads))
            results[size] = rows
            notes = {
                name: {
                    "vocab": f"vocabularies {r.get('src_vocab')} / {r.get('tgt_vocab')}",
                    "train": f"{r.get('steps')} steps, {r.get('tokens_per_s', 0):.0f} target tok/s",
                    "prepare": f"rows {r.get('rows')}",
                }.get(name, "")
                for name, r in rows.items()
            }
            print_stage_table(f"{size:,} pairs", rows, notes)
            shutil.rmtree(work / "raw", ignore_errors=True)
        print_memory_growth(results)
        if args.json:
            args.json.write_text(json.dumps(results, indent=2))
    finally:
        if args.work is None:
            shutil.rmtree(root, ignore_errors=True)


def print_stage_table(title: str, rows: dict[str, dict], notes: dict[str, str]) -> None:
    """One markdown row per stage: seconds, pairs/s, peak memory, a note."""
    print(f"\n## {title}", flush=True)
    print(
        "| stage | seconds | pairs/s | peak RSS (MB) | peak anonymous (MB) | peak file-backed (MB) | notes |\n"
        "|---|---:|---:|---:|---:|---:|---|"
    )
    for name, r in rows.items():
        print(
            f"| {name} | {r['seconds']:.1f} | {r['pairs_per_s']:,.0f} | {r['peak_rss_mb']:,.0f} | "
            f"{r['peak_anon_mb']:,} | {r['peak_file_mb']:,} | {notes.get(name, '')} |",
            flush=True,
        )


def print_memory_growth(results: dict[int, dict[str, dict]]) -> None:
    """Each stage's peak RSS and anonymous memory at the smallest and the largest size, and the ratio."""
    if len(results) < 2:
        return
    small, big = min(results), max(results)
    print(f"\n## peak memory, {big:,} vs {small:,} pairs ({big / small:.0f}x the data)")
    for name in results[small]:
        for key, what in (("peak_rss_mb", "RSS"), ("peak_anon_mb", "anonymous")):
            a, b = results[small][name][key], results[big][name][key]
            print(f"- {name}, peak {what}: {a:,.0f} MB -> {b:,.0f} MB ({b / a:.2f}x)")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "stage":
        child(sys.argv[2:])
    else:
        main()
