"""Every hostile input kind through every corpus reader, each in its real format built from the small
fixtures (the generators copynet_rules and rarest_word read no files and are left out).

Kinds and what must happen (``Case.line`` is a line of ``Case.target`` holding a record that is a
row when the file is intact):

* ``long_line`` (the line replaced by 5 MiB without a space): quarantined ``line_too_long`` at
  ``file:line``, never a 5,242,880-character token in a shard;
* ``long_token`` (a 5000-character token put into the line): ``token_too_long`` at ``file:line``
  (LCSTS: ``summary_too_long``, its own older per-field rule, which the 5000 characters break
  first; Europarl: ``line_too_long``, its lines being limited to 5000 characters);
* ``nul`` (a NUL byte put into the line): ``nul_byte`` at ``file:line``;
* ``invalid_utf8`` (a 0xFF byte put into the line): ``invalid_utf8`` at ``file:line`` (SGML
  documents: at the line the document starts);
* ``empty_train`` (the files of the train split -- the first split of an evaluation-only
  reader -- emptied): an error naming those files, and nothing written;
* ``truncated_gz`` (the target gzipped and cut in half): ``CorpusFormatError`` naming the ``.gz``;
* ``valid_gz`` / ``crlf`` / ``bom`` (the target gzipped / with CRLF line ends / with a UTF-8 BOM):
  read correctly, the same rows and quarantine counts as the plain file.

The parallel reader (your own corpus) runs on its TSV, CSV, JSON Lines and text formats here; its
Parquet and Arrow inputs, which are not lines of text, are checked in ``test_parallel.py``.

For every run that writes: ``rows_in == rows + rows_quarantined`` per split, and a quarantined
record costs exactly one row.
"""

from __future__ import annotations

import gzip
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import pytest

from pipeline.data.corpora import (
    dress,
    duc,
    europarl,
    ewsew,
    gigaword,
    gigaword_pointers,
    lcsts,
    parallel,
    pwkp,
    turkcorpus,
)
from pipeline.data.corpora.common import CorpusFormatError
from tests.helpers import FIXTURES, StubTagger, quarantine, split_rows

FIX = FIXTURES
FIVE_MB = 5 * 1024 * 1024
KINDS = ("long_line", "long_token", "nul", "invalid_utf8", "empty_train", "truncated_gz", "valid_gz", "crlf", "bom")
QUARANTINED = {
    "long_line": "line_too_long",
    "long_token": "token_too_long",
    "nul": "nul_byte",
    "invalid_utf8": "invalid_utf8",
}


@dataclass
class Case:
    """One reader's minimal input in a temporary directory, and what to change in it."""

    module: ModuleType
    settings: dict  # Config.from_dict input (paths as strings)
    target: Path  # the file the kinds change (train side, or the reader's first split)
    line: int  # a line of target inside a record that is a row when intact
    train_files: list[Path]  # emptied by empty_train
    full_paths: bool = False  # quarantine `where` names the path as configured (SGML readers), not the file name
    doc_line: int | None = None  # SGML: the line the target's document starts (invalid_utf8's where)
    expect: dict[str, tuple[str, int]] = field(default_factory=dict)  # kind -> (reason, line) where it differs
    kwargs: dict = field(default_factory=dict)  # extra write_splits arguments

    def config(self, target: Path | None = None):
        """The reader's Config, with ``target`` named instead of the plain target file."""
        old, new = str(self.target), str(target or self.target)

        def swap(value):
            if isinstance(value, list):
                return [swap(v) for v in value]
            return new if value == old else value

        return self.module.Config.from_dict({k: swap(v) for k, v in self.settings.items()})

    def run(self, out: Path, target: Path | None = None) -> dict[str, dict]:
        return self.module.write_splits(self.config(target), out, **self.kwargs)

    def where(self, line: int) -> str:
        return f"{self.target if self.full_paths else self.target.name}:{line}"


def _copy(root: Path, *sources: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for src in sources:
        if src.is_dir():
            shutil.copytree(src, root / src.name, dirs_exist_ok=True)
        else:
            shutil.copy2(src, root / src.name)


def _gigaword_rush(root: Path) -> Case:
    _copy(root, *(FIX / "gigaword" / "rush").iterdir())
    files = {
        "train_src_file": "train.article.txt",
        "train_tgt_file": "train.title.txt",
        "test_src_file": "input.txt",
        "test_tgt_file": "task1_ref0.txt",
    }
    settings = {k: str(root / v) for k, v in files.items()}
    # line 2 is a row (line 1 is, too, but line 3 repeats it: dropping 1 would keep 3)
    return Case(
        gigaword, settings, root / "train.article.txt", 2, [root / "train.article.txt", root / "train.title.txt"]
    )


def _gigaword_sgml(root: Path) -> Case:
    _copy(root, FIX / "gigaword" / "sgml" / "cna_eng_200403", FIX / "gigaword" / "sgml" / "cna_eng_test")
    settings = {
        "format": "sgml",
        "sgml_files": [str(root / "cna_eng_200403")],
        "test_sgml_files": [str(root / "cna_eng_test")],
        "valid_fraction": 0.0,
        "test_fraction": 0.0,
        "unk_min_count": 1,
    }
    target = root / "cna_eng_200403"  # line 26: the lead paragraph of CNA_ENG_20040301.0002 (from line 15)
    return Case(gigaword, settings, target, 26, [target], full_paths=True, doc_line=15)


def _gigaword_pointers_sgml(root: Path) -> Case:
    _copy(root, FIX / "gigaword_pointers" / "train.sgml", FIX / "gigaword_pointers" / "test.sgml")
    settings = {
        "format": "sgml",
        "mode": "unk",
        "sgml_files": [str(root / "train.sgml")],
        "test_sgml_files": [str(root / "test.sgml")],
        "valid_fraction": 0.0,
        "test_fraction": 0.0,
    }
    target = root / "train.sgml"  # line 26: the lead of CNA_ENG_19971001.0002 (from line 16)
    return Case(gigaword_pointers, settings, target, 26, [target], full_paths=True, doc_line=16)


def _gigaword_pointers_entity_sgml(root: Path) -> Case:
    case = _gigaword_pointers_sgml(root)
    case.settings["mode"] = "entity"
    case.kwargs = {"tagger": StubTagger()}
    return case


def _gigaword_pointers_tagged(root: Path) -> Case:
    _copy(root, FIX / "gigaword_pointers" / "train.article.tag", FIX / "gigaword_pointers" / "train.title.tag")
    settings = {
        "format": "rush",
        "mode": "entity",
        "train_src_file": str(root / "train.article.tag"),
        "train_tgt_file": str(root / "train.title.tag"),
    }
    files = [root / "train.article.tag", root / "train.title.tag"]
    return Case(gigaword_pointers, settings, files[0], 2, files)


def _duc(root: Path) -> Case:
    _copy(root, FIX / "duc" / "docs", FIX / "duc" / "models")
    settings = {"docs_dir": str(root / "docs"), "models_dir": str(root / "models")}
    target = root / "docs" / "d100a" / "APW19990519.0113"  # line 10: its lead; the document starts at 2
    return Case(duc, settings, target, 10, [target], full_paths=True, doc_line=2)


def _lcsts(root: Path) -> Case:
    _copy(root, *(FIX / "lcsts" / name for name in ("PART_I.txt", "PART_II.txt", "PART_III.txt")))
    settings = {"train_file": "PART_I.txt", "valid_file": "PART_II.txt", "test_file": "PART_III.txt"}
    settings = {k: str(root / v) for k, v in settings.items()} | {"view": "char"}
    target = root / "PART_I.txt"  # line 35: the summary of <doc id=4> (from line 33)
    return Case(lcsts, settings, target, 35, [target], expect={"long_token": ("summary_too_long", 33)})


def _lcsts_tsv(root: Path) -> Case:
    _copy(root, *(FIX / "lcsts" / "tsv").iterdir())
    settings = {"train_file": "train.tsv", "valid_file": "val.tsv", "test_file": "test.tsv"}
    settings = {k: str(root / v) for k, v in settings.items()} | {"view": "char"}
    target = root / "train.tsv"  # line 2 (1 and 3 are one pair)
    return Case(lcsts, settings, target, 2, [target], expect={"long_token": ("summary_too_long", 2)})


def _dress(root: Path) -> Case:
    _copy(root, *(FIX / "simplification" / "wikismall").iterdir())
    settings = {"data_dir": str(root), "prefix": "PWKP_108016.tag.80.aner"}
    src, dst = (root / f"PWKP_108016.tag.80.aner.ori.train.{ext}" for ext in ("src", "dst"))
    return Case(dress, settings, src, 2, [src, dst])  # line 4 repeats line 1


def _pwkp(root: Path) -> Case:
    _copy(root, *(FIX / "simplification" / "pwkp").iterdir())
    settings = {"pwkp_file": str(root / "PWKP_108016"), "test_file": str(root / "PWKP_test"), "valid_size": 3}
    target = root / "PWKP_108016"  # line 8: a complex sentence (block 1 has a duplicate at 11)
    return Case(pwkp, settings, target, 8, [target])


def _turkcorpus(root: Path) -> Case:
    _copy(root, *(FIX / "simplification" / "turk").iterdir())
    tune = turkcorpus.part_paths(root, "tune")  # the valid split: this reader's first
    return Case(turkcorpus, {"data_dir": str(root)}, tune[0], 1, tune)


def _ewsew_hwang(root: Path) -> Case:
    _copy(root, FIX / "simplification" / "turk", *(FIX / "simplification" / "hwang").iterdir())
    good, partial = root / "aligned-good-0.67.txt", root / "aligned-good_partial-0.53.txt"
    settings = {"turk_dir": str(root / "turk"), "good_file": str(good), "good_partial_file": str(partial)}
    return Case(ewsew, settings, good, 1, [good, partial])


def _ewsew_kauchak(root: Path) -> Case:
    _copy(root, FIX / "simplification" / "turk", *(FIX / "simplification" / "kauchak").iterdir())
    normal, simple = root / "normal.aligned", root / "simple.aligned"
    settings = {
        "turk_dir": str(root / "turk"),
        "train_source": "kauchak",
        "kauchak_src_files": [str(normal)],
        "kauchak_tgt_files": [str(simple)],
    }
    return Case(ewsew, settings, normal, 2, [normal, simple])  # line 1 leaks into TurkCorpus


def _europarl(root: Path) -> Case:
    _copy(root, *(FIX / "europarl").iterdir())
    settings = {
        "europarl_dir": str(root),
        "newstest_dir": str(root / "dev"),
        "max_len": 20,
        "shortlist_size": 8,
        "dictionary_file": str(root / "dict.fr-en.tsv"),
    }
    en, fr = root / "europarl-v7.fr-en.en", root / "europarl-v7.fr-en.fr"
    # a 5000-character token makes the line longer than Europarl's max_line_chars (5000)
    return Case(europarl, settings, en, 2, [en, fr], expect={"long_token": ("line_too_long", 2)})


def _parallel(names: tuple[str, ...], **settings):
    """The parallel reader (your own corpus) on one format of tests/fixtures/parallel: line 2 of the
    train file is the first example of a table (its line 1 a header) and an example of text files."""

    def case(root: Path) -> Case:
        _copy(root, *(FIX / "parallel" / name for name in names))
        paths = {k: str(root / v) for k, v in settings.items() if k.endswith("_file")}
        config = {k: v for k, v in settings.items() if not k.endswith("_file")} | paths
        train = [Path(v) for k, v in paths.items() if k.startswith("train_")]
        return Case(parallel, config, train[0], 2, train)

    return case


READERS: dict[str, Callable[[Path], Case]] = {
    "gigaword_rush": _gigaword_rush,
    "gigaword_sgml": _gigaword_sgml,
    "gigaword_pointers_sgml_unk": _gigaword_pointers_sgml,
    "gigaword_pointers_sgml_entity": _gigaword_pointers_entity_sgml,
    "gigaword_pointers_tagged": _gigaword_pointers_tagged,
    "duc": _duc,
    "lcsts": _lcsts,
    "lcsts_tsv": _lcsts_tsv,
    "dress": _dress,
    "pwkp": _pwkp,
    "turkcorpus": _turkcorpus,
    "ewsew_hwang": _ewsew_hwang,
    "ewsew_kauchak": _ewsew_kauchak,
    "europarl": _europarl,
    "parallel_tsv": _parallel(
        ("train.tsv", "valid.tsv"), train_file="train.tsv", valid_file="valid.tsv", src_col="question", tgt_col="answer"
    ),
    "parallel_csv": _parallel(
        ("train.csv", "valid.csv"), train_file="train.csv", valid_file="valid.csv", src_col="question", tgt_col="answer"
    ),
    "parallel_jsonl": _parallel(
        ("train.jsonl", "valid.jsonl"), train_file="train.jsonl", valid_file="valid.jsonl", src_col="q", tgt_col="a"
    ),
    "parallel_text": _parallel(
        ("train.src", "train.tgt", "valid.src", "valid.tgt"),
        train_src_file="train.src",
        train_tgt_file="train.tgt",
        valid_src_file="valid.src",
        valid_tgt_file="valid.tgt",
        tokenizer="moses",
    ),
}


def _insert(data: bytes, line: int, kind: str) -> bytes:
    """``data`` with line ``line`` replaced (long_line) or something put after its first space."""
    lines = data.split(b"\n")
    text = lines[line - 1]
    at = text.find(b" ") + 1  # 0 when the line has no space (Chinese)
    hostile = {"long_token": b"y" * 5000 + b" ", "nul": b"\x00", "invalid_utf8": b"\xff"}
    lines[line - 1] = b"x" * FIVE_MB if kind == "long_line" else text[:at] + hostile[kind] + text[at:]
    return b"\n".join(lines)


def _outcome(out: Path, manifests: dict[str, dict]) -> dict:
    """What a run wrote: rows and quarantine counts per split (rows_in checked on the way)."""
    for split, m in manifests.items():
        assert m["rows_in"] == m["rows"] + m["rows_quarantined"], split
    return {s: (split_rows(out / s), m["quarantine_reasons"]) for s, m in manifests.items()}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("reader", list(READERS))
def test_hostile_input(reader, kind, tmp_path):
    case = READERS[reader](tmp_path / "in")
    plain = _outcome(tmp_path / "plain", case.run(tmp_path / "plain"))
    target, data = case.target, case.target.read_bytes()
    out = tmp_path / "out"

    if kind in QUARANTINED:
        target.write_bytes(_insert(data, case.line, kind))
        manifests = case.run(out)
        got = _outcome(out, manifests)
        line = case.doc_line if kind == "invalid_utf8" and case.doc_line else case.line
        reason, line = case.expect.get(kind, (QUARANTINED[kind], line))
        hits = [
            (split, q)
            for split in manifests
            for q in quarantine(out / split)
            if q["record"]["where"] == case.where(line)
        ]
        assert [q["reason"] for _, q in hits] == [reason]
        ((split, hit),) = hits
        assert len(str(hit)) < 5000  # the record holds previews, not the 5 MiB line
        assert manifests[split]["quarantine_reasons"][reason] == plain[split][1].get(reason, 0) + 1
        assert sum(len(rows) for rows, _ in got.values()) == sum(len(rows) for rows, _ in plain.values()) - 1
        assert not any(len(tok) > 500 for rows, _ in got.values() for r in rows for tok in r["src"] + r["tgt"])
    elif kind == "empty_train":
        for path in case.train_files:
            path.write_bytes(b"")
        with pytest.raises(CorpusFormatError) as err:
            case.run(out)
        assert all(str(path) in str(err.value) for path in case.train_files), str(err.value)
        assert not out.exists() or not any(out.iterdir())  # nothing written
    elif kind == "truncated_gz":
        gz = target.with_name(target.name + ".gz")
        packed = gzip.compress(data)
        gz.write_bytes(packed[: len(packed) // 2])
        target.unlink()
        with pytest.raises(CorpusFormatError, match="truncated or corrupt gzip data") as err:
            case.run(out, gz)
        assert err.value.path == str(gz)
        assert not out.exists() or not any(out.iterdir())
    else:  # read correctly: the same rows as the plain file
        if kind == "valid_gz":
            changed = target.with_name(target.name + ".gz")
            changed.write_bytes(gzip.compress(data))
            target.unlink()
        else:
            changed = target
            changed.write_bytes(data.replace(b"\n", b"\r\n") if kind == "crlf" else b"\xef\xbb\xbf" + data)
        assert _outcome(out, case.run(out, changed)) == plain
