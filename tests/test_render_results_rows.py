"""`render-results` shows the rows and tasks the compare stage would: params.yaml's tasks, and for each
its ``mechanisms`` (variants listed there included) and ``compare.lead`` baselines. A metrics folder
left on disk by a task or a row no longer configured is ignored: no block appended for it, no row in a
table, and ``--check`` says nothing about it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from tests.test_careless_scripts import call, one_line, render_project, tree

MATCHES = "copyseq render-results: every generated table matches the metrics files\n"
RUNS = "data/eval/runs"


@pytest.fixture(scope="module")
def render_results():
    from tests.helpers import load_script

    return load_script("render_results")


def rendered_project(render_results, root: Path) -> Path:
    """render_project's project, with a README table block too, rendered once."""
    return render_once(render_results, render_project(root))


def render_once(render_results, root: Path) -> Path:
    """``root`` with a README table block, rendered: the two pages rewritten and nothing else said."""
    (root / "README.md").write_text("# x\n\n<!-- results:copy_rules:test:top1 -->\n<!-- /results -->\n")
    assert call(render_results.main, ["--root", str(root)]) == (
        0,
        "copyseq render-results: rewrote README.md\ncopyseq render-results: rewrote docs/results.md\n",
        "",
    )
    return root


def copy_row(root: Path, task: str, row: str, into_task: str | None = None, into_row: str | None = None) -> None:
    src = root / RUNS / task / row
    dst = root / RUNS / (into_task or task) / (into_row or row)
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src, dst)


def edit_params(root: Path, edit) -> None:
    path = root / "params.yaml"
    params = yaml.safe_load(path.read_text(encoding="utf-8"))
    edit(params)
    path.write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")


def assert_ignored(render_results, root: Path) -> None:
    """``--check`` says every table matches and nothing else; a render rewrites nothing."""
    before = tree(root)
    assert call(render_results.main, ["--check", "--root", str(root)]) == (0, MATCHES, "")
    assert call(render_results.main, ["--root", str(root)]) == (0, "", "")
    assert tree(root) == before


# metrics folders params.yaml does not configure: (task, row, a copy of which copy_rules row, text it would add)
STALE = {
    "task": [("qa", "copynet", "copynet", "results:qa"), ("qa", "wean", "wean", "## qa")],  # a task removed from tasks
    "row": [  # a variant not listed in mechanisms, a mechanism not listed
        ("copy_rules", "copynet_transformer", "copynet", "CopyNet (Transformer decoder)"),
        ("copy_rules", "luong", "encdec", "Seq2seq (Luong)"),
    ],
}


def add_stale(root: Path, kind: str) -> list[str]:
    for task, row, like, _ in STALE[kind]:
        copy_row(root, "copy_rules", like, into_task=task, into_row=row)
    return [label for *_, label in STALE[kind]]


@pytest.mark.parametrize("kind", list(STALE))
def test_a_stale_metrics_folder_is_ignored_by_check_and_render(render_results, tmp_path, kind):
    root = rendered_project(render_results, tmp_path)
    pages = {p: (root / p).read_text() for p in ("README.md", "docs/results.md")}
    labels = add_stale(root, kind)
    assert_ignored(render_results, root)
    assert {p: (root / p).read_text() for p in pages} == pages
    assert not [label for label in labels if label in "".join(pages.values())]


@pytest.mark.parametrize("kind", list(STALE))
def test_a_stale_metrics_folder_is_ignored_on_a_first_render(render_results, tmp_path, kind):
    """The pages of a project with the stale folders from the start are those of one without them."""
    (tmp_path / "clean").mkdir()
    (tmp_path / "stale").mkdir()
    clean = rendered_project(render_results, tmp_path / "clean")
    stale = render_project(tmp_path / "stale")
    add_stale(stale, kind)
    render_once(render_results, stale)
    for page in ("README.md", "docs/results.md"):
        assert (stale / page).read_text() == (clean / page).read_text()
    assert_ignored(render_results, stale)


def test_a_row_removed_from_mechanisms_leaves_the_tables(render_results, tmp_path):
    root = rendered_project(render_results, tmp_path)
    assert "| WEAN (ours) |" in (root / "README.md").read_text()
    edit_params(root, lambda p: p["mechanisms"].remove("wean"))
    rc, out, err = call(render_results.main, ["--check", "--root", str(root)])
    assert (rc, out) == (1, "")
    assert [line for line in err.splitlines() if not line.startswith("    ")] == [
        "README.md: block results:copy_rules:test:top1 differs from the metrics files",
        "docs/results.md: block results:copy_rules differs from the metrics files",
        "copyseq render-results: tables are out of date; run `copyseq render-results`",
    ]
    assert call(render_results.main, ["--root", str(root)])[0] == 0
    assert "WEAN" not in (root / "README.md").read_text() + (root / "docs/results.md").read_text()
    assert call(render_results.main, ["--check", "--root", str(root)]) == (0, MATCHES, "")


def test_configured_variants_and_lead_rows_are_shown(render_results, tmp_path):
    """A variant listed in mechanisms and a lead-N row of compare.lead are rows, as the stage's."""
    root = rendered_project(render_results, tmp_path)
    copy_row(root, "copy_rules", "copynet", into_row="copynet_transformer")
    copy_row(root, "copy_rules", "encdec", into_row="lead2")

    def configure(params: dict) -> None:
        params["mechanisms"].append("copynet_transformer")
        settings = params["task_settings"]["copy_rules"] or {}
        settings["compare"] = {**(settings.get("compare") or {}), "lead": [2]}
        params["task_settings"]["copy_rules"] = settings

    edit_params(root, configure)
    assert call(render_results.main, ["--root", str(root)])[0] == 0
    readme = (root / "README.md").read_text()
    rows = [line.split(" |")[0] for line in readme.splitlines() if line.startswith("| ") and "(ours)" in line]
    assert rows == [
        "| Enc-Dec (ours)",
        "| RNNSearch (ours)",
        "| CopyNet (ours)",
        "| Pointer Softmax (ours)",
        "| WEAN (ours)",
        "| Read-Again + copy (ours)",
        "| Pointer-generator + coverage (ours)",
        "| CopyNet (Transformer decoder) (ours)",
        "| Lead-2 (first 2 source tokens) (ours)",
    ], readme
    assert call(render_results.main, ["--check", "--root", str(root)]) == (0, MATCHES, "")


def test_a_block_naming_a_task_not_in_params_is_refused(render_results, tmp_path):
    root = rendered_project(render_results, tmp_path)
    copy_row(root, "copy_rules", "copynet", into_task="qa")
    (root / "docs/qa.md").write_text("<!-- results:qa -->\n<!-- /results -->\n")
    before = tree(root)
    rc, out, err = call(render_results.main, ["--check", "--root", str(root)])
    assert (rc, out) == (2, "")
    assert one_line(err) == (
        "copyseq render-results: error: docs/qa.md: block results:qa: no metrics files under "
        "data/eval/runs/qa/<mechanism>/metrics.json are read: qa is not one of params.yaml's tasks (copy_rules)"
    )
    assert tree(root) == before
