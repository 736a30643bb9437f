"""Dependencies point one way: flows -> pipeline -> models, and inside pipeline corpora -> text;
MLflow is imported only by pipeline.tracking (and the flows that orchestrate it). Read with ``ast``
from the source files, function-level (lazy) imports included."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

# (package whose files are checked, module prefixes they must not import, why)
RULES = [
    ("models", ("pipeline", "flows"), "models are below pipeline and flows"),
    ("pipeline", ("flows",), "pipeline is below flows"),
    ("pipeline/data/text", ("pipeline.data.corpora",), "corpus readers use the text steps, not the reverse"),
]
MLFLOW_HOME = ("pipeline/tracking", "flows")  # where `import mlflow` may appear


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, imported module) of every import statement in the file, however deeply nested."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def violations(package: str, forbidden: tuple[str, ...]) -> list[str]:
    bad = []
    for path in sorted((REPO / package).rglob("*.py")):
        for line, module in imports(path):
            if any(module == f or module.startswith(f + ".") for f in forbidden):
                bad.append(f"{path.relative_to(REPO)}:{line} imports {module}")
    return bad


def test_dependencies_point_one_way():
    problems = [f"{v} ({why})" for package, forbidden, why in RULES for v in violations(package, forbidden)]
    assert problems == []


def test_mlflow_only_in_the_tracking_package():
    bad = [v for v in violations("pipeline", ("mlflow",)) if not v.startswith("pipeline/tracking/")]
    bad += violations("models", ("mlflow",))
    assert bad == [], f"MLflow belongs in {MLFLOW_HOME}"


def test_the_check_catches_a_violation(tmp_path):
    """The rule is not vacuous: a file importing against the direction is reported."""
    bad = tmp_path / "models"
    bad.mkdir()
    (bad / "x.py").write_text("def f():\n    from pipeline.vocab.vocabulary import PAD\n    return PAD\n")
    found = [(line, m) for line, m in imports(bad / "x.py")]
    assert found == [(2, "pipeline.vocab.vocabulary")]
