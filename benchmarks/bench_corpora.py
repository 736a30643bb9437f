"""Corpus ingestion throughput: our readers end to end into shards vs a plain single-process loop.

For each corpus the input is built from ../shared/data when present (else from the test fixtures),
repeated with a unique marker token per copy so that deduplication does not shrink it, and
ingested twice in the same process: by our reader (chunks mapped over a process pool) and by a
baseline that does the same work in one plain Python loop. Printed: pairs/s of each and the
ratio. Peak memory (max RSS of a child process) at 1x and 4x the input shows whether ingestion
streams (flat) or loads the corpus (grows).

    .venv/bin/python benchmarks/bench_corpora.py                 # ~2-4 minutes on 2 cores
    .venv/bin/python benchmarks/bench_corpora.py --rush-pairs 400000 --workers 2 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

import pyarrow as pa  # noqa: E402
import pyarrow.ipc  # noqa: E402

from pipeline.io.parallel import ProcessMap, serial_map  # noqa: E402

SHARED = REPO.parent / "shared" / "data"
FIXTURES = REPO / "tests" / "fixtures"


def repeat_lines(src: Path, dst: Path, n_lines: int, mark: bool) -> None:
    """Write ``n_lines`` lines cycling through ``src``; copy k's lines get a unique ``zz<k>`` token."""
    lines = src.read_text(encoding="utf-8").splitlines()
    with open(dst, "w", encoding="utf-8") as out:
        for i in range(n_lines):
            copy, j = divmod(i, len(lines))
            out.write(f"{lines[j]} zz{copy}\n" if mark else lines[j] + "\n")


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


# --------------------------------------------------------------------------- #
# Rush format
# --------------------------------------------------------------------------- #


def rush_inputs(work: Path, pairs: int) -> tuple[Path, Path]:
    base = SHARED / "gigaword_train_slice" if (SHARED / "gigaword_train_slice").exists() else FIXTURES / "gigaword/rush"
    art, tit = work / "train.article.txt", work / "train.title.txt"
    repeat_lines(base / "train.article.txt", art, pairs, mark=True)
    repeat_lines(base / "train.title.txt", tit, pairs, mark=True)
    return art, tit


def rush_ours(art: Path, tit: Path, out: Path) -> dict:
    from pipeline.data.corpora import gigaword

    cfg = gigaword.Config(format="rush", train_src_file=str(art), train_tgt_file=str(tit))
    return gigaword.write_splits(cfg, out)


def rush_plain_loop(art: Path, tit: Path, out: Path) -> int:
    """The same work, naively: read both files, split tokens, map UNK, build rows, write Arrow."""
    from pipeline.io.shards import make_schema

    schema = make_schema()
    out.mkdir(parents=True, exist_ok=True)
    rows, n = [], 0
    with (
        open(art, encoding="utf-8") as fa,
        open(tit, encoding="utf-8") as ft,
        pa.OSFile(str(out / "plain.arrow"), "wb") as sink,
        pa.ipc.new_file(sink, schema) as writer,
    ):
        for i, (a, t) in enumerate(zip(fa, ft)):
            src = ["<unk>" if w == "UNK" else w for w in a.split()]
            tgt = ["<unk>" if w == "UNK" else w for w in t.split()]
            rows.append({"id": f"train:{i + 1}", "src": src, "tgt": tgt, "refs": [tgt]})
            if len(rows) == 50_000:
                writer.write_table(pa.Table.from_pylist(rows, schema=schema))
                n += len(rows)
                rows = []
        if rows:
            writer.write_table(pa.Table.from_pylist(rows, schema=schema))
            n += len(rows)
    return n


# --------------------------------------------------------------------------- #
# Readers whose chunk work is mapped: ours over a pool vs the same functions in one loop
# --------------------------------------------------------------------------- #


def sgml_config(work: Path, copies: int):
    from pipeline.data.corpora import gigaword

    base = SHARED / "gigaword_raw_cna_sample"
    files = (
        sorted(p for p in base.glob("cna_eng_*"))
        if base.exists()
        else sorted((FIXTURES / "gigaword/sgml").glob("cna_eng_*"))
    )
    paths = []
    for k in range(copies):  # distinct doc ids per copy so the split hash spreads them
        for f in files:
            dst = work / f"{f.name}.{k}"
            dst.write_text(f.read_text(encoding="utf-8").replace('id="', f'id="c{k}_'), encoding="utf-8")
            paths.append(str(dst))
    return gigaword, gigaword.Config(format="sgml", sgml_files=tuple(paths))


def lcsts_config(work: Path, view: str, pairs: int):
    from pipeline.data.corpora import lcsts

    base = SHARED / "lcsts_clge_subset" / "train.tsv"
    if not base.exists():
        base = FIXTURES / "lcsts" / "tsv" / "train.tsv"
    dst = work / f"lcsts_{view}.tsv"
    repeat_lines(base, dst, pairs, mark=False)
    cfg = lcsts.Config(train_file=str(dst), valid_file=None, test_file=None, view=view, cache_dir=None)
    return lcsts, cfg


def dress_config(work: Path, pairs: int):
    from pipeline.data.corpora import dress

    base = SHARED / "wikilarge_zhang_lapata"
    if not base.exists():
        base = FIXTURES / "simplification" / "wikismall"
    prefix = "wiki.full.aner" if "wikilarge" in base.name else "PWKP_108016.tag.80.aner"
    for side in ("src", "dst"):
        repeat_lines(base / f"{prefix}.ori.valid.{side}", work / f"bench.ori.train.{side}", pairs, mark=True)
    return dress, dress.Config(data_dir=str(work), prefix="bench", variant="ori", splits=("train",))


def rows_written(manifests: dict) -> int:
    return sum(m["rows_in"] for m in manifests.values())


def compare_mapped(name: str, module, cfg, work: Path, workers: int) -> dict:
    with ProcessMap(workers) as pool:
        t_ours = timed(lambda: setattr(pool, "m", module.write_splits(cfg, work / f"{name}_ours", map_chunks=pool)))
        n = rows_written(pool.m)
    t_loop = timed(lambda: module.write_splits(cfg, work / f"{name}_loop", map_chunks=serial_map))
    return {
        "corpus": name,
        "records": n,
        "ours_s": t_ours,
        "loop_s": t_loop,
        "ours_per_s": n / t_ours,
        "loop_per_s": n / t_loop,
        "ratio": t_loop / t_ours,
    }


def jieba_vs_ours(work: Path, pairs: int, workers: int) -> dict:
    """LCSTS word view (jieba-bound) against jieba's own throughput on the same texts."""
    import jieba

    module, cfg = lcsts_config(work, "word", pairs)
    texts = []
    for line in open(cfg.train_file, encoding="utf-8"):
        texts.extend(line.rstrip("\n").split("\t")[:2])
    jieba.lcut("预热")  # build jieba's dictionary cache outside the timing
    t_jieba = timed(lambda: [jieba.lcut(t) for t in texts])
    with ProcessMap(workers) as pool:
        t_ours = timed(lambda: module.write_splits(cfg, work / "lcsts_word_ours", map_chunks=pool))
    return {
        "corpus": "lcsts_word (jieba)",
        "records": pairs,
        "ours_s": t_ours,
        "jieba_s": t_jieba,
        "ours_per_s": pairs / t_ours,
        "jieba_per_s": pairs / t_jieba,
        "ours_over_jieba_time": t_ours / t_jieba,
    }


# --------------------------------------------------------------------------- #
# Peak memory: a child process per size
# --------------------------------------------------------------------------- #


def peak_rss_mb(pairs: int) -> float:
    code = (
        f"import sys, resource, tempfile; from pathlib import Path; "
        "from benchmarks.bench_corpora import rush_inputs, rush_ours;"
        f"w = Path(tempfile.mkdtemp()); a, t = rush_inputs(w, {pairs:d}); rush_ours(a, t, w / 'out');"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return int(out.split()[-1]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rush-pairs", type=int, default=200_000)
    parser.add_argument("--sgml-copies", type=int, default=2, help="copies of the raw CNA sample (1,880 docs each)")
    parser.add_argument("--lcsts-pairs", type=int, default=20_000)
    parser.add_argument("--dress-pairs", type=int, default=50_000)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    results: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        art, tit = rush_inputs(work, args.rush_pairs)
        t_ours = timed(lambda: rush_ours(art, tit, work / "rush_ours"))
        t_loop = timed(lambda: rush_plain_loop(art, tit, work / "rush_loop"))
        n = args.rush_pairs
        results.append(
            {
                "corpus": "gigaword rush format",
                "records": n,
                "ours_s": t_ours,
                "loop_s": t_loop,
                "ours_per_s": n / t_ours,
                "loop_per_s": n / t_loop,
                "ratio": t_loop / t_ours,
            }
        )
        module, cfg = sgml_config(work, args.sgml_copies)
        results.append(compare_mapped("gigaword raw sgml (docs)", module, cfg, work, args.workers))
        module, cfg = lcsts_config(work, "char", args.lcsts_pairs)
        results.append(compare_mapped("lcsts char", module, cfg, work, args.workers))
        results.append(jieba_vs_ours(work, args.lcsts_pairs, args.workers))
        module, cfg = dress_config(work, args.dress_pairs)
        results.append(compare_mapped("pwkp/wikilarge dress layout", module, cfg, work, args.workers))

    print(f"\n{os.cpu_count()} CPU cores, {args.workers} workers for the mapped readers\n")
    print("| corpus | records | ours (records/s) | baseline (records/s) | baseline | speed-up (ours / baseline) |")
    print("|---|---:|---:|---:|---|---:|")
    for r in results:
        if "jieba_s" in r:
            print(
                f"| {r['corpus']} | {r['records']:,} | {r['ours_per_s']:,.0f} | {r['jieba_per_s']:,.0f} | "
                f"jieba.lcut alone, 1 process | {1 / r['ours_over_jieba_time']:.2f}x (our time = "
                f"{r['ours_over_jieba_time']:.2f}x jieba's) |"
            )
        else:
            base = "plain Python loop" if r["corpus"].startswith("gigaword rush") else "same reader, 1 process"
            print(
                f"| {r['corpus']} | {r['records']:,} | {r['ours_per_s']:,.0f} | {r['loop_per_s']:,.0f} | "
                f"{base} | {r['ratio']:.2f}x |"
            )
    if not args.skip_memory:
        small, large = args.rush_pairs // 4, args.rush_pairs
        m_small, m_large = peak_rss_mb(small), peak_rss_mb(large)
        print(
            f"\nPeak RSS, Rush-format ingestion: {small:,} pairs {m_small:.0f} MB, {large:,} pairs "
            f"{m_large:.0f} MB ({m_large / m_small:.2f}x for 4x the input)"
        )
        results.append({"memory_mb": {str(small): m_small, str(large): m_large}})
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
