"""Adding a corpus through the steps of docs/extending.md, with a toy reader: one module is enough
for reader discovery, the prepare stage and raw-text input (serving, predict).

The toy module is written to a temporary directory added to ``pipeline.data.corpora.__path__``, so it
imports as ``pipeline.data.corpora.<name>`` exactly like a file in ``pipeline/data/corpora/``. Copy this test
for a new corpus: replace TOY_READER by your module and the raw input by a small fixture.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.data import corpora
from pipeline.data.corpora import raw_input, reader_module, reader_names
from pipeline.io.shards import read_split

# Step 1-4 of docs/extending.md: the reader module (Config, write_splits, source_tokenizer,
# DETOKENIZE_JOIN). The task: a word's characters -> the same characters reversed.
TOY_READER = '''"""Toy corpus: one word per line; the source is its characters, the target them reversed."""
from __future__ import annotations

import functools
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from pipeline.config.validation import dataclass_from_dict
from pipeline.data.corpora.common import Quarantined, write_corpus
from pipeline.io.parallel import chunked, serial_map
from pipeline.io.shards import make_schema

SCHEMA = make_schema()  # id, src, tgt, refs
DETOKENIZE_JOIN = ""  # output characters join without spaces


@dataclass(frozen=True)
class Config:
    words_file: str  # a path setting (*_file): resolved against the task's raw input
    valid_every: int = 3  # every n-th line goes to valid
    chunk_size: int = 2

    @classmethod
    def from_dict(cls, d: dict) -> "Config":
        return dataclass_from_dict(cls, d)


def chars(text: str) -> list[str]:
    return [c for c in text if not c.isspace()]


def parse_chunk(name: str, chunk: list[tuple[int, str]]) -> list[dict | Quarantined]:
    """CPU-bound work: a module-level function, so map_chunks can send it to a worker."""
    out = []
    for line, text in chunk:
        word = text.strip()
        if not word.isalpha():
            out.append(Quarantined("not_a_word", f"{name}:{line}", {"text": text[:300]}))
            continue
        src = chars(word)
        out.append({"id": f"{name}:{line}", "src": src, "tgt": src[::-1], "refs": [src[::-1]]})
    return out


def _split(cfg: Config, valid: bool, map_chunks: Callable):
    path = Path(cfg.words_file)
    lines = [(n, t) for n, t in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if (n % cfg.valid_every == 0) == valid]
    for items in map_chunks(functools.partial(parse_chunk, path.name), chunked(lines, cfg.chunk_size)):
        yield from items


def write_splits(cfg: Config, out_root: Path, map_chunks: Callable = serial_map) -> dict[str, dict]:
    splits = {"valid": _split(cfg, True, map_chunks), "train": _split(cfg, False, map_chunks)}
    return write_corpus(out_root, splits, SCHEMA, params=asdict(cfg))


def source_tokenizer(settings: dict, pretokenized: bool) -> Callable[[str], list[str]]:
    return str.split if pretokenized else chars
'''

# A module with Config and write_splits but no source_tokenizer: a reader without raw-text input.
PLAIN_READER = '''"""A reader that does not accept raw text."""
from dataclasses import dataclass


@dataclass(frozen=True)
class Config:
    pass


def write_splits(cfg, out_root, map_chunks=None):
    return {}
'''

WORDS = "copy\nnet\ncat\npointer\n12x\nsoftmax\ncopy\ncopy\nwean\n"
#        1    2   3   4       5   6       7    8    9   (every 3rd line -> valid)


@pytest.fixture
def toy_readers(tmp_path, monkeypatch):
    """``pipeline.data.corpora.toy_reverse`` and ``pipeline.data.corpora.toy_plain`` importable, as if their
    files were in pipeline/data/corpora/."""
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "toy_reverse.py").write_text(TOY_READER, encoding="utf-8")
    (plugins / "toy_plain.py").write_text(PLAIN_READER, encoding="utf-8")
    monkeypatch.setattr(corpora, "__path__", [*corpora.__path__, str(plugins)])
    importlib.invalidate_caches()
    yield
    for name in ("toy_reverse", "toy_plain"):
        sys.modules.pop(f"pipeline.data.corpora.{name}", None)
    sys.path_importer_cache.pop(str(plugins), None)


@pytest.fixture
def toy_project(tmp_path) -> Path:
    """Steps 5-6: the raw input and the params.yaml entries (prepare, tasks, task_settings)."""
    raw = tmp_path / "project" / "raw_toy"
    raw.mkdir(parents=True)
    (raw / "words.txt").write_text(WORDS, encoding="utf-8")
    params = {
        "tasks": {"toy": "raw_toy"},
        "prepare": {"toy": {"reader": "toy_reverse", "words_file": "words.txt", "valid_every": 3}},
        "task_settings": {"toy": {"raw": "raw_toy", "champion": "valid.top1"}},
    }
    path = tmp_path / "project" / "params.yaml"
    path.write_text(yaml.safe_dump(params), encoding="utf-8")
    return path


def test_reader_discovery_finds_the_new_module(toy_readers) -> None:
    names = reader_names()
    assert {"toy_reverse", "toy_plain", "gigaword", "copynet_rules"} <= set(names)
    assert not {"common", "ldc_sgml", "raw_input"} & set(names)  # helpers, not readers
    module = reader_module("toy_reverse")
    assert module.__name__ == "pipeline.data.corpora.toy_reverse"
    assert Path(module.__file__).parent.name == "plugins"
    with pytest.raises(ValueError, match=r"unknown reader 'ldc_sgml'"):
        reader_module("ldc_sgml")


def test_prepare_runs_the_new_reader(toy_readers, toy_project) -> None:
    """Step 7: what ``dvc repro prepare@toy`` runs (flows.prepare), without Prefect."""
    from pipeline.data.prepare import prepare_job, write_job
    from pipeline.data.tasks import task_status
    from pipeline.io.parallel import serial_map

    params = yaml.safe_load(toy_project.read_text())
    assert task_status(params, "toy", toy_project.parent) == "ready"  # `python -m pipeline.data.tasks list`

    job = prepare_job("toy", str(toy_project))
    assert job.module is reader_module("toy_reverse")
    assert job.cfg.words_file == str(toy_project.parent / "raw_toy" / "words.txt")  # resolved against raw
    assert job.out_root == toy_project.parent / "data" / "shards" / "toy"
    manifests = write_job(job, serial_map)

    assert list(manifests) == ["valid", "train"]
    # valid: lines 3, 6, 9; train: 1, 2, 4, 5 (not a word), 7 and 8 (duplicates of line 1)
    assert (manifests["valid"]["rows"], manifests["valid"]["rows_quarantined"]) == (3, 0)
    assert (manifests["train"]["rows"], manifests["train"]["rows_quarantined"]) == (3, 3)
    assert manifests["train"]["quarantine_reasons"] == {"not_a_word": 1, "duplicate_pair": 2}
    valid = read_split(job.out_root / "valid").to_pylist()
    assert [(r["id"], "".join(r["src"]), "".join(r["tgt"])) for r in valid] == [
        ("words.txt:3", "cat", "tac"),
        ("words.txt:6", "softmax", "xamtfos"),
        ("words.txt:9", "wean", "naew"),
    ]
    train = read_split(job.out_root / "train").to_pylist()
    assert [r["id"] for r in train] == ["words.txt:1", "words.txt:2", "words.txt:4"]
    assert train[0]["refs"] == [list("ypoc")]
    assert (job.out_root / "train" / "quarantine.jsonl").read_text().count("\n") == 3


def test_raw_text_uses_the_declared_tokenizer(toy_readers) -> None:
    settings = {"reader": "toy_reverse", "words_file": "words.txt"}
    assert raw_input.source_tokenizer(settings)(" cop y ") == ["c", "o", "p", "y"]
    assert raw_input.source_tokenizer(settings, pretokenized=True)("c o p y") == ["c", "o", "p", "y"]
    assert raw_input.detokenize(["y", "p", "o", "c"], settings) == "ypoc"  # DETOKENIZE_JOIN = ""
    assert "toy_reverse" in raw_input.supported_readers()


def test_a_reader_without_source_tokenizer_is_refused_by_name(toy_readers) -> None:
    with pytest.raises(ValueError, match=r"not supported for reader 'toy_plain'; supported: \[.*'toy_reverse'") as err:
        raw_input.source_tokenizer({"reader": "toy_plain"})
    assert "'toy_plain'" not in str(err.value).split("supported:")[1]
    assert "'gigaword'" in str(err.value)  # the list is found by looking at the modules
