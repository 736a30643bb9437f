"""The duplicate check's cost: N distinct 8-byte pair keys added to prepare's KeySet against a Python
set (pipeline/data/corpora/keyset.py), in process CPU seconds and bytes held, in the same process.

    .venv/bin/python benchmarks/bench_keyset.py            # 2,000,000 keys
    .venv/bin/python benchmarks/bench_keyset.py --keys 200000
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time

from pipeline.data.corpora.keyset import KeySet


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--keys", type=int, default=2_000_000)
    args = p.parse_args(argv)
    keys = [hashlib.blake2b(str(i).encode(), digest_size=8).digest() for i in range(args.keys)]

    start = time.process_time()
    plain: set[bytes] = set()
    for key in keys:  # write_corpus's old check: a lookup, then the insert
        if key not in plain:
            plain.add(key)
    set_seconds = time.process_time() - start
    set_bytes = sys.getsizeof(plain) + sum(sys.getsizeof(k) for k in plain)

    start = time.process_time()
    ours = KeySet()
    for key in keys:
        ours.add(key)
    ours_seconds = time.process_time() - start
    assert len(ours) == len(plain) == args.keys

    print(f"| structure | CPU seconds for {args.keys:,} adds | us a key | MB held |")
    print("|---|---:|---:|---:|")
    print(f"| Python set | {set_seconds:.2f} | {1e6 * set_seconds / args.keys:.2f} | {set_bytes / 2**20:.0f} |")
    print(
        f"| KeySet | {ours_seconds:.2f} | {1e6 * ours_seconds / args.keys:.2f} | {ours.nbytes / 2**20:.0f} (+ pending) |"
    )
    print(f"KeySet / set: {ours_seconds / set_seconds:.1f}x the CPU time, {ours.nbytes / set_bytes:.2f}x the memory")


if __name__ == "__main__":
    main()
