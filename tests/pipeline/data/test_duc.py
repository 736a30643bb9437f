"""DUC 2003 / 2004 task 1 reader: documents + 4 reference summaries -> one test split."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from pipeline.data.corpora import duc
from pipeline.data.corpora.common import CorpusFormatError
from pipeline.io.shards import read_split
from tests.helpers import FIXTURES as FIXTURES_ROOT
from tests.helpers import quarantine, shared_path

FIXTURES = FIXTURES_ROOT / "duc"


def config(root: Path = FIXTURES, **overrides) -> duc.Config:
    return duc.Config.from_dict({"docs_dir": str(root / "docs"), "models_dir": str(root / "models"), **overrides})


def test_fixture_rows_refs_and_stats(tmp_path):
    manifest = duc.write_splits(config(), tmp_path)["test"]
    assert (manifest["rows"], manifest["rows_in"]) == (2, 3)
    assert manifest["quarantine_reasons"] == {"no_references": 1}
    assert manifest["stats"] == {
        "dateline_stripped": 2,  # BOSTON (AP) -- ; GENEVA, Switzerland (AP) _
        "docs_with_fewer_refs": 1,  # the NYT document has 2 (plus one empty file)
        "empty_references": 1,
        "model_files_other": 1,  # D100.M.100.A.G, a multi-document summary
        "models_without_doc": 1,  # D101...APW19990101.0001
        "ref_tokens": 42,  # 8 + 9 + 6 + 4 (APW) + 8 + 7 (NYT)
        "refs": 6,
        "src_tokens": 57,  # 32 (APW) + 25 (NYT)
    }
    apw, nyt = read_split(tmp_path / "test").to_pylist()
    assert apw["id"] == "d100a/APW19990519.0113"
    assert apw["src"] == [
        "farmers",
        "whose",
        "orchards",
        "could",
        "n't",
        "survive",
        "the",
        "frosts",
        "in",
        "their",
        "valley",
        "won",
        "some",
        "help",
        "after",
        "engineers",
        "ran",
        "a",
        "warm",
        "air",
        "fan",
        "across",
        "a",
        "stretch",
        "of",
        "their",
        "land",
        ",",
        "a",
        "report",
        "said",
        ".",
    ]
    # references in file-name (assessor G, H, I, J) order, tokenised like Gigaword headlines
    assert apw["refs_raw"] == [
        "Warm air fans may shield orchards from frost.",
        "Fans save 8 of 11 orchards from valley frost",
        "Engineers protect orchards with warm air.",
        "Frost, orchards, fans, farmers",
    ]
    assert apw["refs"] == [
        ["warm", "air", "fans", "may", "shield", "orchards", "from", "frost"],
        ["fans", "save", "#", "of", "##", "orchards", "from", "valley", "frost"],
        ["engineers", "protect", "orchards", "with", "warm", "air"],
        ["frost", "orchards", "fans", "farmers"],
    ]
    assert apw["tgt"] == apw["refs"][0]
    assert nyt["src"][:5] == ["soil", "quality", "remains", "the", "main"]  # &Cx1f; codes in <HEADER> ignored
    assert nyt["refs_raw"] == [
        "Soil, rainfall, and frost timing shape grape harvests.",
        "Chilean growers: soil quality matters most",
    ]
    assert nyt["refs"][1] == [
        "chilean",
        "growers",
        ":",
        "soil",
        "quality",
        "matters",
        "most",
    ]  # ':' is no pull.py punctuation
    (missing,) = quarantine(tmp_path / "test")
    assert missing["record"]["where"].endswith("d30016t/APW19981122.0382:2")
    assert missing["record"]["record"]["lead"].startswith("alpair `` acted by the book ''")


def test_any_model_size_and_short_lead_option(tmp_path):
    manifest = duc.write_splits(config(model_size=None, short_lead_chars=200), tmp_path)["test"]
    assert manifest["stats"]["model_files_other"] == 1  # M.100 is no per-document (P) model
    apw, nyt = read_split(tmp_path / "test").to_pylist()
    # make_DUC.py: a short lead is joined with the next sentence, its period turned into a comma
    assert apw["src"][-12:] == ["a", "report", "said", ",", "the", "fans", "saved", "#", "of", "##", "orchards", "."]
    assert nyt["src"][-3:] == ["growers", "report", "."]  # no second sentence to join


def test_bad_cluster_directory(tmp_path):
    shutil.copytree(FIXTURES, tmp_path / "duc")
    (tmp_path / "duc" / "docs" / "notes").mkdir()
    with pytest.raises(CorpusFormatError, match=r"notes: not a DUC cluster directory"):
        duc.write_splits(config(tmp_path / "duc"), tmp_path / "out")
    with pytest.raises(FileNotFoundError, match="models_dir"):
        duc.write_splits(config(tmp_path / "duc", models_dir=str(tmp_path / "none")), tmp_path / "out")


def test_invalid_utf8_reference_and_unclosed_tag(tmp_path):
    root = tmp_path / "duc"
    shutil.copytree(FIXTURES, root)
    ref = root / "models" / "D100.P.10.A.H.NYT19990224.0396.html"
    ref.write_bytes(b"Chilean growers: caf\xe9 soil")
    manifest = duc.write_splits(config(root), tmp_path / "out")["test"]
    assert manifest["quarantine_reasons"] == {"invalid_utf8": 1, "no_references": 1}
    bad = [q for q in quarantine(tmp_path / "out" / "test") if q["reason"] == "invalid_utf8"][0]
    assert bad["record"]["where"] == str(ref)

    doc = root / "docs" / "d100a" / "NYT19990224.0396"
    doc.write_text(doc.read_text().replace("</P>\n</TEXT>", "</TEXT>"))
    with pytest.raises(CorpusFormatError, match=r"NYT19990224.0396:13: unclosed <P> \(reached </TEXT> at line 17\)"):
        duc.write_splits(config(root), tmp_path / "out")


def test_absurdly_long_lead_is_quarantined(tmp_path):
    manifest = duc.write_splits(config(max_tokens=30), tmp_path)["test"]
    assert manifest["quarantine_reasons"] == {"no_references": 1, "src_too_long": 1}  # the 32-token lead


ROUGE_FX = FIXTURES_ROOT / "rouge"


def test_references_kept_as_written_for_the_75_byte_rouge(tmp_path):
    """NIST model files begin with a space that ROUGE-1.5.5 -b 75 counts: refs_raw keeps it (and
    inner double spaces, a leading tab), so the metric equals the official script. Collapsing the
    whitespace (the old reader) gave a higher recall, as it did on DUC 2004."""
    import json

    from pipeline.metrics.registry import rouge_recall_75

    manifest = duc.write_splits(config(FIXTURES / "space"), tmp_path)["test"]
    assert (manifest["rows"], manifest["rows_quarantined"], manifest["stats"]["refs"]) == (3, 0, 12)
    rows = read_split(tmp_path / "test").to_pylist()
    fx = json.loads((ROUGE_FX / "duc_space.json").read_text(encoding="utf-8"))
    assert [r["refs_raw"] for r in rows] == fx["refs"]  # byte for byte, only the newline gone
    assert rows[0]["refs_raw"][0] == (
        " Hun Sen turns down call for talks outside Cambodia, snubbing the opposition leaders"
    )
    assert rows[1]["refs_raw"][3].startswith("\tSihanouk") and "rivals  at  Siem" in rows[1]["refs_raw"][1]
    assert rows[0]["refs"][3] == ["hun", "sen", "refuses", "talks", "abroad", "with", "opposition"]  # tokens as before
    hyps = [" ".join(r["src"]) for r in rows]  # the lead baseline
    assert hyps == fx["hyps"]

    # ROUGE-1.5.5.pl -c 95 -2 -1 -U -r 1000 -n 4 -w 1.2 -a -b 75 -m (expected/duc_space.b75.json):
    # the mean of its per-summary recalls, in percent
    official = json.loads((ROUGE_FX / "expected" / "duc_space.b75.json").read_text())["per_summary"]
    got = rouge_recall_75(hyps, [r["refs"] for r in rows], None, [r["refs_raw"] for r in rows])
    for ours, theirs, value in (
        ("rouge1", "ROUGE-1", 28.88433),
        ("rouge2", "ROUGE-2", 8.56733),
        ("rougeL", "ROUGE-L", 24.40733),
    ):
        mean = 100 * sum(r[0] for r in official[theirs]) / 3
        assert got[ours] == pytest.approx(mean, abs=1e-9) and round(got[ours], 5) == value
    collapsed = [[" ".join(t.split()) for t in r["refs_raw"]] for r in rows]
    old = rouge_recall_75(hyps, None, None, collapsed)
    diffs = [round(old[k] - got[k], 5) for k in ("rouge1", "rouge2", "rougeL")]
    assert diffs == [2.18633, 1.564, 1.429]  # the old reader's error on this fixture (DUC 2004: +3.7/+2.0/+1.4)


def test_reference_as_written():
    assert duc.reference_as_written(b"\xef\xbb\xbf Two  spaces \r\nsecond line\r\n\n") == " Two  spaces \nsecond line"
    assert duc.reference_as_written(b" one line") == " one line"


@pytest.mark.shared_data
def test_shared_duc2003(tmp_path):
    root = shared_path("duc2003_task1", "duc2003")
    cfg = duc.Config(
        docs_dir=str(root / "docs.without.headlines"), models_dir=str(root / "detagged.duc2003.abstracts" / "models")
    )
    manifest = duc.write_splits(cfg, tmp_path)["test"]
    # PROVENANCE: 587 document files, 2,348 model files, 4 per (cluster, document)
    assert (manifest["rows"], manifest["rows_quarantined"]) == (587, 0)
    stats = manifest["stats"]
    assert (stats["refs"], stats["docs_with_fewer_refs"], stats["models_without_doc"]) == (2348, 0, 0)
    assert stats["empty_references"] == 0 and stats["model_files_other"] == 0
    assert stats["dateline_stripped"] > 350  # most AP/NYT/XIE leads open with a dateline
    table = read_split(tmp_path / "test").to_pylist()
    assert all(len(r["refs"]) == len(r["refs_raw"]) == 4 for r in table)
    first = table[0]
    assert first["id"] == "d100a/APW19990519.0113"
    assert first["src"][:4] == ["schizophrenia", "patients", "whose", "medication"]  # dateline gone
    # the raw reference, kept byte for byte (a hash: the test does not quote the corpus)
    assert first["refs_raw"][0][:9] == "Magnetic" + " " and first["refs_raw"][0].endswith(" voices.")
    assert hashlib.sha256(first["refs_raw"][0].encode()).hexdigest()[:16] == "dc9459ee95f55f7c"
    assert not any(t != t.lower() or any(c.isdigit() for c in t) for r in table for t in r["src"])
    # the 9 documents of two clusters are two rows each, with their own cluster's references
    ids = [r["id"].split("/")[1] for r in table]
    assert len(ids) - len(set(ids)) == 9
