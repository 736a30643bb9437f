"""A small copy-heavy "own data" corpus: customer questions and support answers that copy names,
order numbers and product codes from the question (docs/own_data.md's tutorial; the scale
benchmark ``benchmarks/bench_own_corpus.py`` writes 2,000,000 pairs of it).

Every question carries one to three slot values -- a customer name (syllable-built, so most names
of the test split never occur in training: only a copying model can answer them), a five-digit
order number, a product code such as ``ZX-417`` -- and its answer repeats them in another order
inside a fixed phrase of its template. Text is cased and tokenised (punctuation separated by
spaces), in a TSV with the header ``question<TAB>answer``.

    python -m benchmarks.support_qa --out data/raw/support --pairs 3000          # train/valid/test.tsv (80/10/10)
    python -m benchmarks.support_qa --out /tmp/big --pairs 2000000 --single --format parquet
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

SYLLABLES = "ka lo mi ra ve tu sen dor bri an el ros vik mar lin tes go nu".split()
PRODUCTS = ["router", "modem", "kettle", "headset", "charger", "keyboard", "monitor", "printer"]
TEMPLATES = [  # (question, answer): {name}, {order}, {code}, {product}
    (
        "hello , my name is {name} and my order {order} has not arrived yet .",
        "dear {name} , your order {order} ships today and arrives within two days .",
    ),
    (
        "hi , this is {name} . the {product} {code} I bought stopped working .",
        "sorry {name} , please send the {product} {code} back and we replace it for free .",
    ),
    (
        "can you tell me where order {order} is ? thanks , {name}",
        "hi {name} , order {order} is at the depot and will be delivered tomorrow .",
    ),
    (
        "is the {product} {code} compatible with my old {product} ?",
        "yes , the {product} {code} works with every {product} we sold since 2019 .",
    ),
    (
        "please cancel order {order} , I ordered the wrong {product} . {name}",
        "done {name} : order {order} is cancelled and the {product} will not ship .",
    ),
    (
        "{name} here : I was charged twice for order {order} .",
        "thank you {name} , the second charge for order {order} is refunded within five days .",
    ),
]
BATCH = 50_000  # pairs per Parquet row group


def name(rng: random.Random) -> str:
    """A capitalised first and last name of 2-3 syllables each (an open vocabulary)."""
    part = lambda: "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()
    return f"{part()} {part()}"


def pairs(n: int, seed: int = 0) -> Iterator[tuple[str, str]]:
    """``n`` (question, answer) pairs, seeded."""
    rng = random.Random(seed)
    for _ in range(n):
        question, answer = rng.choice(TEMPLATES)
        slots = {
            "name": name(rng),
            "order": str(rng.randint(10000, 99999)),
            "code": f"{rng.choice('ABCDEFGHJKLMNPQRSTUVWXZ')}{rng.choice('ABCDEFGHJKLMNPQRSTUVWXZ')}-{rng.randint(100, 999)}",
            "product": rng.choice(PRODUCTS),
        }
        yield question.format(**slots), answer.format(**slots)


def write_tsv(path: Path, rows: Iterator[tuple[str, str]]) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("question\tanswer\n")
        for question, answer in rows:
            fh.write(f"{question}\t{answer}\n")
            n += 1
    return n


def write_parquet(path: Path, rows: Iterator[tuple[str, str]]) -> int:
    """Row groups of :data:`BATCH` pairs, written as they are generated (memory stays flat)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    schema = pa.schema([("question", pa.string()), ("answer", pa.string())])
    n = 0
    with pq.ParquetWriter(path, schema) as writer:
        batch: list[tuple[str, str]] = []
        for row in rows:
            batch.append(row)
            if len(batch) == BATCH:
                writer.write_table(pa.table(list(map(list, zip(*batch))), schema=schema))
                n, batch = n + len(batch), []
        if batch:
            writer.write_table(pa.table(list(map(list, zip(*batch))), schema=schema))
            n += len(batch)
    return n


def write_corpus(out: Path, n: int, seed: int = 0, single: bool = False, fmt: str = "tsv") -> dict[str, int]:
    """``out/pairs.<fmt>`` (``single``) or ``out/{train,valid,test}.<fmt>`` (80/10/10, each seeded on
    its own); returns the pairs written per file."""
    write = write_tsv if fmt == "tsv" else write_parquet
    if single:
        return {f"pairs.{fmt}": write(out / f"pairs.{fmt}", pairs(n, seed))}
    sizes = {"train": n - 2 * (n // 10), "valid": n // 10, "test": n // 10}
    return {f"{s}.{fmt}": write(out / f"{s}.{fmt}", pairs(k, seed + i)) for i, (s, k) in enumerate(sizes.items())}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--pairs", type=int, default=3000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--single", action="store_true", help="one file (split it with fractions)")
    p.add_argument("--format", choices=["tsv", "parquet"], default="tsv")
    args = p.parse_args(argv)
    for file, n in write_corpus(args.out, args.pairs, args.seed, args.single, args.format).items():
        print(f"{args.out / file}: {n:,} pairs")


if __name__ == "__main__":
    main()
