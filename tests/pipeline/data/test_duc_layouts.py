"""The DUC reader finds the documents and the reference summaries in NIST's releases as extracted
(``release_dir``), refuses clearly when they are not there, and prepare reads a corpus given by an
absolute path (outside the project). Fixtures: the repository's tiny DUC 2004-format files, copied
into the release layouts in a temp dir."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from pipeline.data.corpora import duc
from pipeline.data.prepare import prepare_job, write_extra_split, write_job
from pipeline.data.tasks import task_status
from pipeline.io.parallel import serial_map
from pipeline.io.shards import read_split
from tests.helpers import FIXTURES, shared_path

# 3 DUC 2004 documents (clusters d30001t, d30002t) and their 12 model files D3000x.P.10.T.<A-D>.<DOCNO>
SPACE = FIXTURES / "duc" / "space"
NIST_DOCS = "DUC2004_Summarization_Documents/duc2004_testdata/tasks1and2/duc2004_tasks1and2_docs/docs"
NIST_MODELS = "duc2004_results/ROUGE/eval/models/1"


def nist_release(root: Path) -> Path:
    """``root`` laid out as NIST's two DUC 2004 archives extract (the task-1 models archive
    extracted in ROUGE/, where it lies), with the multi-document models beside them in eval/models/2."""
    shutil.copytree(SPACE / "docs", root / NIST_DOCS)
    shutil.copytree(SPACE / "models", root / NIST_MODELS)
    (root / "duc2004_results/ROUGE/eval/models/2").mkdir(parents=True)
    (root / "duc2004_results/ROUGE/eval/models/2/D30001.M.100.T.A").write_text("a multi-document summary\n")
    return root


def test_the_nist_duc2004_release_as_extracted(tmp_path):
    release = nist_release(tmp_path / "duc2004")
    manifest = duc.write_splits(duc.Config(release_dir=str(release)), tmp_path / "out")["test"]
    assert (manifest["rows"], manifest["rows_quarantined"], manifest["stats"]["refs"]) == (3, 0, 12)
    assert manifest["params"]["docs_dir"] == str(release / NIST_DOCS)  # the folders read, recorded
    assert manifest["params"]["models_dir"] == str(release / NIST_MODELS)
    rows = read_split(tmp_path / "out" / "test").to_pylist()
    assert [r["id"] for r in rows] == [
        "d30001t/APW19981016.0240",
        "d30001t/NYT19981017.0110",
        "d30002t/XIE19981105.0024",
    ]
    # the same rows as from the two folders named explicitly
    explicit = duc.Config(docs_dir=str(SPACE / "docs"), models_dir=str(SPACE / "models"))
    duc.write_splits(explicit, tmp_path / "explicit")
    assert rows == read_split(tmp_path / "explicit" / "test").to_pylist()


def test_a_folder_of_docs_and_models_is_found_too(tmp_path):
    shutil.copytree(SPACE, tmp_path / "duc2004")
    manifest = duc.write_splits(duc.Config(release_dir=str(tmp_path / "duc2004")), tmp_path / "out")["test"]
    assert (manifest["rows"], manifest["params"]["models_dir"]) == (3, str(tmp_path / "duc2004" / "models"))


def test_neither_layout_is_refused_naming_what_was_looked_for(tmp_path):
    release = tmp_path / "duc2004"
    shutil.copytree(SPACE / "docs", release / NIST_DOCS)
    (release / "duc2004_results/ROUGE").mkdir(parents=True)
    (release / "duc2004_results/ROUGE/duc2004.task1.ROUGE.models.tar.gz").write_bytes(b"\x1f\x8b")
    with pytest.raises(FileNotFoundError) as err:
        duc.write_splits(duc.Config(release_dir=str(release)), tmp_path / "out")
    message = str(err.value)
    assert message.startswith(f"duc: no models_dir found under release_dir {release} (looked for {release}/models, ")
    assert f"{release}/duc2004_results/ROUGE/eval/models/1" in message
    assert message.endswith(
        "; archives lying there, not extracted: duc2004_results/ROUGE/duc2004.task1.ROUGE.models.tar.gz; "
        "extract NIST's archives there as released, or set models_dir"
    )
    assert not (tmp_path / "out").exists()  # nothing written
    with pytest.raises(FileNotFoundError, match=r"no docs_dir found under release_dir .*/empty \(looked for "):
        (tmp_path / "empty").mkdir()
        duc.write_splits(duc.Config(release_dir=str(tmp_path / "empty")), tmp_path / "out")
    with pytest.raises(FileNotFoundError, match=r"duc release_dir .*/absent is not a directory"):
        duc.write_splits(duc.Config(release_dir=str(tmp_path / "absent")), tmp_path / "out")


def test_two_candidate_layouts_or_no_setting_are_refused(tmp_path):
    release = nist_release(tmp_path / "duc2004")
    shutil.copytree(SPACE / "docs", release / "docs")
    with pytest.raises(ValueError) as err:
        duc.write_splits(duc.Config(release_dir=str(release)), tmp_path / "out")
    assert (
        str(err.value)
        == f"duc: {release} holds {release}/docs and {release}/{NIST_DOCS}; set docs_dir to the one to read"
    )
    # an explicit docs_dir settles it; models_dir is still found
    cfg = duc.Config(release_dir=str(release), docs_dir=str(release / "docs"))
    assert duc.write_splits(cfg, tmp_path / "out")["test"]["rows"] == 3
    with pytest.raises(ValueError, match=r"set docs_dir and models_dir, or release_dir"):
        duc.Config(docs_dir="docs")


@pytest.mark.shared_data
def test_shared_duc2003_found_by_its_release_layout(tmp_path):
    root = shared_path("duc2003_task1", "duc2003")  # docs.without.headlines + detagged.duc2003.abstracts/models
    docs, models = duc.locate(duc.Config(release_dir=str(root)))
    assert (docs, models) == (root / "docs.without.headlines", root / "detagged.duc2003.abstracts" / "models")


# --------------------------------------------------------------------------- #
# Raw inputs given by absolute paths (a corpus outside the repository)
# --------------------------------------------------------------------------- #


def _params(project: Path, params: dict) -> Path:
    project.mkdir(parents=True, exist_ok=True)
    path = project / "params.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


def test_an_absolute_task_raw_input_is_read_where_it_is(tmp_path):
    release = nist_release(tmp_path / "elsewhere" / "duc2004").resolve()
    path = _params(
        tmp_path / "project",
        {"tasks": {"duc2004": str(release)}, "prepare": {"duc2004": {"reader": "duc", "release_dir": "."}}},
    )
    job = prepare_job("duc2004", str(path))
    assert job.raw_root == release and job.cfg.release_dir == str(release / ".")
    manifests = write_job(job, serial_map)
    assert manifests["test"]["rows"] == 3
    assert read_split(tmp_path / "project" / "data" / "shards" / "duc2004" / "test").num_rows == 3
    assert task_status(yaml.safe_load(path.read_text()), "duc2004", path.parent) == "ready"


def test_an_absolute_extra_split_raw_and_setting(tmp_path):
    """Gigaword's extra split ``duc2004: {raw: /abs/path}``: read from there, whatever the task's raw input."""
    release = nist_release(tmp_path / "nist" / "duc2004").resolve()
    params = {
        "tasks": {"giga": "raw"},
        "prepare": {
            "duc2004": {"reader": "duc", "release_dir": "."},
            "giga": {"reader": "duc", "docs_dir": str(SPACE / "docs"), "models_dir": str(SPACE / "models")},
        },
    }
    path = _params(tmp_path / "project", params)
    (tmp_path / "project" / "raw").mkdir()
    extra = {"corpus": "duc2004", "raw": str(release), "split": "test", "optional": True}
    out = tmp_path / "project" / "data" / "shards" / "giga"
    out.mkdir(parents=True)
    manifest = write_extra_split(params, path.parent, path.parent / "raw", out, "duc2004", extra, serial_map)
    assert manifest["prepared_as"] == {"corpus": "duc2004", "split": "test", "raw": str(release)}
    assert read_split(out / "duc2004").num_rows == 3
    # the task's own absolute settings (docs_dir, models_dir above) are checked for presence too
    assert task_status(params, "giga", path.parent) == "ready"
    params["prepare"]["giga"]["models_dir"] = str(tmp_path / "no_models")
    assert task_status(params, "giga", path.parent) == f"data absent: {tmp_path / 'no_models'}"
