"""The documentation: generated result tables equal to the metrics files, a short README, no broken
relative links (files, and headings for #anchors into markdown files)."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "render_results.py"
README_MAX_BYTES = 8192  # what it is, set-up, everyday commands, the results table, a docs map
PAGES = [
    REPO / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
    REPO / "benchmarks" / "README.md",
    REPO / "data" / "README.md",
]

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.M)
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.I)


def _load_script():
    spec = importlib.util.spec_from_file_location("render_results", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def render(*args: str, root: Path) -> subprocess.CompletedProcess:
    """scripts/render_results.py's main in this process (on a temporary project ``root``)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = _load_script().main([*args, "--root", str(root)])
    return subprocess.CompletedProcess(args, rc, out.getvalue(), err.getvalue())


def prose(text: str) -> str:
    """The text outside fenced code blocks, inline code spans blanked."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else re.sub(r"`[^`]*`", lambda m: " " * len(m[0]), line))
    return "\n".join(out)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: link text kept, lowercase, punctuation dropped, spaces -> '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found, seen = set(), {}
    text = path.read_text(encoding="utf-8")
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        m = None if fenced else HEADING.match(line)
        if m:
            base = slug(m[2])
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    found.update(HTML_ANCHOR.findall(text))
    return found


def relative_links(path: Path) -> list[str]:
    text = prose(path.read_text(encoding="utf-8"))
    targets = LINK.findall(text) + REF_LINK.findall(text)
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t, re.I)]  # http:, mailto: ...


def test_generated_result_tables_match_the_metrics_files():
    """`python scripts/render_results.py --check` on the repository, as a user runs it."""
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_readme_is_short():
    size = len((REPO / "README.md").read_bytes())
    assert size <= README_MAX_BYTES, f"README.md has {size} bytes (at most {README_MAX_BYTES})"


def test_readme_keeps_the_two_setup_commands_and_links_every_docs_page():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "make repro" in readme and "make test" in readme
    for page in sorted((REPO / "docs").glob("*.md")):
        assert f"(docs/{page.name})" in readme, f"README.md does not link docs/{page.name}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_point_to_existing_files_and_headings(page):
    if not page.exists():
        pytest.skip(f"{page.relative_to(REPO)} absent")
    broken = []
    for target in relative_links(page):
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        if not dest.exists():
            broken.append(f"{target}: no file {dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with anchor #{anchor} in {dest.relative_to(REPO)}")
    assert not broken, f"{page.relative_to(REPO)}:\n  " + "\n  ".join(broken)


def test_slug_follows_github():
    assert (
        slug("Ingestion throughput (`benchmarks/bench_corpora.py`, a 2-core CPU)")
        == "ingestion-throughput-benchmarksbench_corporapy-a-2-core-cpu"
    )
    assert (
        slug("Pointer Softmax section 5.1: the rarest-word task") == "pointer-softmax-section-51-the-rarest-word-task"
    )


def _project(tmp_path: Path) -> Path:
    """A project with the repository's params and copy_rules metrics, and pages with blocks."""
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    shutil.copytree(
        REPO / "data" / "eval" / "runs" / "copy_rules",
        tmp_path / "data/eval/runs/copy_rules",
        ignore=shutil.ignore_patterns("predictions", "*.png"),
    )
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(
        "# x\n\nprose before\n\n<!-- results:copy_rules:test:top1 -->\n"
        "<!-- /results -->\n\nprose after\n\n```\n<!-- results:nope -->\n"
        "<!-- /results -->\n```\n",
        encoding="utf-8",
    )
    (tmp_path / "docs" / "results.md").write_text("# Results\n\nintro\n", encoding="utf-8")
    return tmp_path


def test_render_fills_blocks_and_check_names_the_stale_file_and_block(tmp_path):
    root = _project(tmp_path)
    stale = render("--check", root=root)
    assert stale.returncode == 1
    assert "README.md: block results:copy_rules:test:top1" in stale.stderr
    assert "docs/results.md: block results:copy_rules is missing" in stale.stderr

    assert render(root=root).returncode == 0
    readme = (root / "README.md").read_text(encoding="utf-8")
    assert "prose before" in readme and "prose after" in readme
    assert "| CopyNet (ours) |" in readme and "| CopyNet (paper) | 97.3 |" in readme
    assert "<!-- results:nope -->\n<!-- /results -->" in readme  # a marker in a code block is an example
    results = (root / "docs" / "results.md").read_text(encoding="utf-8")
    assert results.startswith("# Results\n\nintro\n") and "<!-- results:copy_rules -->" in results
    assert "### copy_rules / test_unseen: exact-match accuracy, top10 (%)" in results
    assert render("--check", root=root).returncode == 0

    # a hand edit inside a block is drift; outside the markers it is left alone
    (root / "README.md").write_text(
        re.sub(r"\| CopyNet \(ours\) \| [\d.]+", "| CopyNet (ours) | 12.3", readme, count=1).replace(
            "prose after", "edited prose"
        ),
        encoding="utf-8",
    )
    drift = render("--check", root=root)
    assert drift.returncode == 1 and "README.md: block results:copy_rules:test:top1 differs" in drift.stderr
    assert render(root=root).returncode == 0
    fixed = (root / "README.md").read_text(encoding="utf-8")
    row = re.search(r"\| CopyNet \(ours\) \| [^\n]+", readme).group()
    assert row in fixed and "| CopyNet (ours) | 12.3" not in fixed and "edited prose" in fixed


def test_render_refuses_a_table_the_metrics_do_not_have(tmp_path):
    root = _project(tmp_path)
    (root / "README.md").write_text("<!-- results:copy_rules:valid:top1 -->\n<!-- /results -->\n", encoding="utf-8")
    bad = render("--check", root=root)
    assert bad.returncode == 2 and "README.md" in bad.stderr and "no valid:top1 table" in bad.stderr
    (root / "README.md").write_text("<!-- results:gigaword -->\n<!-- /results -->\n", encoding="utf-8")
    missing = render("--check", root=root)
    assert missing.returncode == 2 and "no metrics files under data/eval/runs/gigaword" in missing.stderr


def test_experiment_blocks_render_seed_and_curve_tables_and_one_runs_comparison(tmp_path):
    root = _project(tmp_path)
    seeds = root / "docs/experiments/t1"
    for seed, top1 in (("seed1", 90.0), ("seed2", 94.0)):
        (seeds / seed).mkdir(parents=True)
        (seeds / seed / "copynet.json").write_text(
            json.dumps({"test": {"n": 4, "top1": top1, "groups": {"x->x": {"n": 4, "top1": top1}}}})
        )
    (seeds / "experiment.yaml").write_text(
        "kind: seeds\nsplit: test\ncolumns: [x->x]\npaper_table: copynet_table1\n", encoding="utf-8"
    )
    curve = root / "docs/experiments/giga"
    for size, r1 in (("1000", 10.0), ("4000", 20.0)):
        (curve / size).mkdir(parents=True)
        for mech, value in (("copynet", r1), ("lead8", 21.5)):
            (curve / size / f"{mech}.json").write_text(
                json.dumps({"test": {"n": 3, "metric": "rouge_f", "rouge1": value, "rouge2": 1.0, "rougeL": 2.0}})
            )
    (curve / "experiment.yaml").write_text(
        "kind: sizes\ntask: gigaword\nsplit: test\ncolumns: [rouge1]\ntarget: 16000\n", encoding="utf-8"
    )
    blocks = "".join(
        f"<!-- results:{s} -->\n<!-- /results -->\n\n"
        for s in ("experiment/t1", "experiment/giga", "experiment/giga/4000", "copy_rules")
    )
    (root / "docs" / "results.md").write_text(f"# Results\n\n{blocks}", encoding="utf-8")
    assert render(root=root).returncode == 0
    page = (root / "docs" / "results.md").read_text(encoding="utf-8")
    assert "| CopyNet (ours, 2 seeds) | 92.0 ± 2.8 | 92.0 ± 2.8 |" in page  # sd of (90, 94) = sqrt(8)
    assert "| CopyNet (paper) | 93.7 | - |" in page  # Table 1's x->x column
    # 10 at 1,000 and 20 at 4,000 pairs: +5 per doubling, so 30 at 16,000 (the fit's target)
    assert "| CopyNet | rouge1 | 10.00 | 20.00 | +5.00 | 30.00 |" in page
    assert "| Lead-8 (first 8 source tokens) | rouge1 | 21.50 | 21.50 | +0.00 | 21.50 |" in page
    # one run's comparison page, as the compare stage writes it for the task, with the papers' rows
    assert "| Lead-8 (first 8 source tokens) (ours) | 21.50 |" in page
    assert "| Ours-GRU (C), 15K (paper) | 27.41 | 12.58 | 25.74 |" in page
    assert render("--check", root=root).returncode == 0
    (curve / "4000" / "copynet.json").write_text('{"test": {"n": 3, "metric": "rouge_f", "rouge1": 25.0}}')
    stale = render("--check", root=root)
    assert stale.returncode == 1 and "docs/results.md: block results:experiment/giga differs" in stale.stderr


def test_copy_analysis_renders_where_the_metrics_files_have_it(tmp_path):
    root = _project(tmp_path)
    for older in (root / "data/eval/runs/copy_rules").glob("*/metrics.json"):  # as written before the analysis
        splits = json.loads(older.read_text(encoding="utf-8"))
        older.write_text(json.dumps({s: {k: v for k, v in m.items() if k != "copy"} for s, m in splits.items()}))
    before = render(root=root)
    assert before.returncode == 0
    results = (root / "docs" / "results.md").read_text(encoding="utf-8")
    assert "copy analysis" not in results  # metrics files without it: no table, no crash
    path = root / "data/eval/runs/copy_rules/copynet/metrics.json"
    metrics = json.loads(path.read_text(encoding="utf-8"))
    outputs = {
        "copied": 80.0,
        "novel_1gram": 20.0,
        "novel_2gram": 30.0,
        "novel_3gram": 40.0,
        "novel_4gram": 50.0,
        "repeated_3gram": 1.0,
        "length": 6.5,
        "oov_recall": 75.0,
        "length_ratio": 1.0,
    }
    refs = {**outputs, "count": metrics["test"]["n"], "oov": 10.0, "oov_tokens": 12}
    del refs["oov_recall"], refs["length_ratio"]
    metrics["test"]["copy"] = {"outputs": outputs, "references": refs}
    path.write_text(json.dumps(metrics), encoding="utf-8")
    (root / "README.md").write_text("<!-- results:copy_rules:test:copy -->\n<!-- /results -->\n", encoding="utf-8")
    assert render(root=root).returncode == 0
    table = (root / "README.md").read_text(encoding="utf-8")
    assert "| CopyNet (ours) | 80.0 | 20.0 | 30.0 | 40.0 | 50.0 | 1.0 | 75.0 | 6.50 |" in table
    assert "| References | 80.0 | 20.0 | 30.0 | 40.0 | 50.0 | 1.0 | - | 6.50 |" in table
    assert "RNNSearch" not in table  # its metrics file has no copy analysis: no row
    full = (root / "docs" / "results.md").read_text(encoding="utf-8")
    assert f"### copy_rules / test ({metrics['test']['n']} examples): copy analysis" in full
    (root / "README.md").write_text("<!-- results:copy_rules:test_unseen:copy -->\n<!-- /results -->\n")
    missing = render("--check", root=root)
    assert missing.returncode == 2 and "no test_unseen:copy table" in missing.stderr


# A date, a commit hash or an issue number says when or why something was written, which the user does
# not need: the docs and the code cite papers, settings and tests. Measurement records keep theirs:
# docs/experiments/ and the benchmark report (benchmarks/README.md).
ISSUE = r"\b[Ii]ssues? #?\d+\b|\b[Tt]he issue's\b|[_-]issue\d+"  # an issue cited by number, or as the issue (its target, its measurement)
PROVENANCE = re.compile(
    r"\b20\d\d-[01]\d-[0-3]\d\b|\bcommit [0-9a-f]{7,40}\b|"
    + ISSUE
    + r"|\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,12}\b"
)


def provenance_found(files: list[Path], pattern: re.Pattern) -> list[str]:
    return [
        f"{f.relative_to(REPO)}:{i}: {m.group(0)}"
        for f in files
        for i, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1)
        for m in pattern.finditer(line)
    ]


def test_no_dates_commit_hashes_or_issue_numbers_in_user_docs_or_code():
    files = [REPO / "README.md", REPO / "data" / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    files += [
        p
        for d in ("pipeline", "flows", "models", "scripts", "benchmarks")
        for ext in ("*.py", "*.sh")
        for p in sorted((REPO / d).rglob(ext))
    ]
    files += [REPO / name for name in ("params.yaml", "dvc.yaml", "Makefile", "pyproject.toml")]
    found = provenance_found(files, PROVENANCE)
    # the tests: issue numbers only (their fixtures hold real dates and hex names); experiment files' names
    found += provenance_found(sorted((REPO / "tests").rglob("*.py")), re.compile(ISSUE))
    found += [str(p.relative_to(REPO)) for p in (REPO / "docs" / "experiments").rglob("*") if re.search(ISSUE, p.name)]
    assert not found, "\n".join(found[:20])
