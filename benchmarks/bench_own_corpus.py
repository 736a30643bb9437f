"""Scale of your own corpus: a generated copy-heavy TSV and the same pairs as Parquet through the
parallel reader (one file, valid/test carved by the hash of the source) and the vocab stage, at two
sizes; pairs/s and peak resident memory of every stage, which must stay flat in the corpus size.

For each size N (default 200,000 and 2,000,000 pairs):
  generate         benchmarks/support_qa.py writes pairs.tsv and pairs.parquet (N pairs each)
  prepare_tsv      pipeline.data.corpora.parallel.write_splits on pairs.tsv (1% valid, 1% test by hash)
  prepare_parquet  the same on pairs.parquet (record batches of chunk_size rows)
  vocab            the vocab stage on the TSV's shards: token counts part by part, vocabularies,
                   the id-encoded train and valid splits
Each stage runs in a fresh child process (benchmarks.bench_scale.run_stage: peak RSS is the child's
ru_maxrss; anonymous and file-backed peaks sampled every 0.2 s by bench_scale.MemorySampler).

    .venv/bin/python benchmarks/bench_own_corpus.py                                   # ~10 min on 2 cores, ~1 GB disk
    .venv/bin/python benchmarks/bench_own_corpus.py --sizes 20000 200000 --tokenizer moses
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

from benchmarks.bench_scale import MemorySampler, print_memory_growth, print_stage_table, run_stage


def stage_generate(work: Path, pairs: int) -> dict:
    from benchmarks.support_qa import write_corpus

    for fmt in ("tsv", "parquet"):
        write_corpus(work / "raw", pairs, seed=0, single=True, fmt=fmt)
    return {"pairs": 2 * pairs}


def stage_prepare(work: Path, fmt: str, tokenizer: str) -> dict:
    from pipeline.data.corpora import parallel

    cfg = parallel.Config(
        train_file=str(work / "raw" / f"pairs.{fmt}"),
        valid_fraction=0.01,
        test_fraction=0.01,
        src_col="question",
        tgt_col="answer",
        tokenizer=tokenizer,
    )
    manifests = parallel.write_splits(cfg, work / f"shards_{fmt}")
    return {
        "pairs": sum(m["rows_in"] for m in manifests.values()),
        "rows": {s: m["rows"] for s, m in manifests.items()},
    }


def stage_vocab(work: Path) -> dict:
    from pipeline.io.shards import read_manifest
    from pipeline.vocab.encoded import write_encoded_split
    from pipeline.vocab.vocabulary import build_vocab, count_split_tokens

    shards = work / "shards_tsv"
    vocabs = {side: build_vocab(count_split_tokens(shards / "train", side)) for side in ("src", "tgt")}
    for split in ("train", "valid"):
        write_encoded_split(shards / split, work / "vocab" / "ids" / split, vocabs["src"], vocabs["tgt"])
    rows = sum(read_manifest(shards / s)["rows"] for s in ("train", "valid"))
    return {"pairs": rows, "src_vocab": len(vocabs["src"]), "tgt_vocab": len(vocabs["tgt"])}


def child(argv: list[str]) -> None:
    name, work, extra = argv[0], Path(argv[1]), argv[2:]
    sampler = MemorySampler()
    if name == "generate":
        result = stage_generate(work, int(extra[0]))
    elif name.startswith("prepare_"):
        result = stage_prepare(work, name.removeprefix("prepare_"), extra[0])
    else:
        result = stage_vocab(work)
    (work / f"{name}.json").write_text(json.dumps({**result, **sampler.stop()}))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", nargs="+", type=int, default=[200_000, 2_000_000])
    p.add_argument("--tokenizer", default="whitespace", help="the parallel reader's tokenizer")
    p.add_argument("--work", type=Path, default=None, help="working directory (default: a temp dir, removed)")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    root = args.work or Path(tempfile.mkdtemp(prefix="bench_own_corpus-"))
    results: dict[int, dict] = {}
    try:
        for size in args.sizes:
            work = root / str(size)
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            rows = {"generate": run_stage("generate", work, str(size), script=__file__)}
            for fmt in ("tsv", "parquet"):
                rows[f"prepare_{fmt}"] = run_stage(f"prepare_{fmt}", work, args.tokenizer, script=__file__)
            rows["vocab"] = run_stage("vocab", work, script=__file__)
            results[size] = rows
            notes = {name: f"rows {r['rows']}" if "rows" in r else "" for name, r in rows.items()}
            notes["vocab"] = f"vocabularies {rows['vocab']['src_vocab']:,} / {rows['vocab']['tgt_vocab']:,}"
            notes["generate"] = "TSV and Parquet (pairs/s counts both)"
            print_stage_table(f"{size:,} pairs (tokenizer {args.tokenizer})", rows, notes)
            shutil.rmtree(work, ignore_errors=True)
        print_memory_growth(results)
        if args.json:
            args.json.write_text(json.dumps(results, indent=2))
    finally:
        if args.work is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "stage":
        child(sys.argv[2:])
    else:
        main()
