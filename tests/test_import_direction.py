"""The layering of docs/design.md, read with ``ast`` from the source files (function-level imports
included): a package imports only packages of lower layers; MLflow only in ``pipeline.tracking`` and
``pipeline.serving``'s MLflow modules (and the flows), Prefect only in ``flows``; the data, config,
io, metrics and tracking packages load without torch; no project module is imported inside a
function; benchmarks and scripts import the installed packages, never the tests."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

# Layer of each package: a module may import its own package and packages of lower layers only.
LAYERS = {
    "models": 0,
    "pipeline.config": 1,
    "pipeline.io": 2,
    "pipeline.runtime": 2,
    "pipeline.metrics": 2,
    "pipeline.vocab": 3,
    "pipeline.tracking": 3,
    "pipeline.data": 4,
    "pipeline.training": 5,
    "pipeline.decoding": 5,
    "pipeline.serving": 6,
    "pipeline.reporting": 6,
    "pipeline.stages": 7,
    "pipeline.retrain": 7,
    "flows": 8,
}
# Within a package, one more rule: the readers use the text steps, not the reverse.
INNER = [("pipeline/data/text", ("pipeline.data.corpora",), "corpus readers use the text steps, not the reverse")]
MLFLOW_HOME = (
    "pipeline/tracking/",
    "pipeline/serving/pyfunc.py",
    "pipeline/serving/model_code.py",  # the logged model's code (MLflow models from code)
    "pipeline/serving/onnx_pyfunc.py",  # the same for an exported model, without torch
    "pipeline/serving/pyfunc_common.py",  # what both share
    "pipeline/serving/onnx_model_code.py",
    "pipeline/serving/predict.py",
    "flows/",
)
TORCH_FREE = ("pipeline.config", "pipeline.io", "pipeline.data", "pipeline.metrics", "pipeline.tracking")


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, imported module) of every import statement in the file, however deeply nested."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def package_of(module: str) -> str | None:
    """The layered package a module belongs to (``pipeline.training.loop`` -> ``pipeline.training``)."""
    for depth in (2, 1):
        name = ".".join(module.split(".")[:depth])
        if name in LAYERS:
            return name
    return None


def python_files(*tops: str) -> list[Path]:
    return sorted(p for top in tops for p in (REPO / top).rglob("*.py") if "__pycache__" not in p.parts)


def module_of(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_violations(paths: list[Path]) -> list[str]:
    bad = []
    for path in paths:
        own = package_of(module_of(path))
        if own is None:  # pipeline/__init__.py: the math pins only
            continue
        for line, module in imports(path):
            other = package_of(module)
            if other is not None and other != own and LAYERS[other] >= LAYERS[own]:
                bad.append(f"{path.relative_to(REPO)}:{line} imports {module} ({own} is not above {other})")
    return bad


def test_every_package_has_a_layer():
    packages = {module_of(p) for p in REPO.glob("pipeline/*/__init__.py")} | {"models", "flows"}
    assert packages == set(LAYERS)


def test_dependencies_point_down_the_layers():
    assert layer_violations(python_files("models", "pipeline", "flows")) == []
    inner = [
        f"{path.relative_to(REPO)}:{line} imports {module} ({why})"
        for folder, forbidden, why in INNER
        for path in python_files(folder)
        for line, module in imports(path)
        if any(module == f or module.startswith(f + ".") for f in forbidden)
    ]
    assert inner == []


def test_pipeline_init_only_pins():
    """pipeline's __init__ pins the math libraries and sets one environment default (os), nothing else."""
    assert [m for _, m in imports(REPO / "pipeline" / "__init__.py")] == ["os", "pipeline.runtime.math_pins"]


@pytest.mark.parametrize("library,home", [("mlflow", MLFLOW_HOME), ("prefect", ("flows/",))])
def test_mlflow_and_prefect_stay_home(library, home):
    bad = [
        f"{path.relative_to(REPO)}:{line}"
        for path in python_files("models", "pipeline", "flows")
        for line, module in imports(path)
        if (module == library or module.startswith(library + "."))
        and not path.relative_to(REPO).as_posix().startswith(home)
    ]
    assert bad == [], f"{library} belongs in {home}"


def test_no_project_module_is_imported_inside_a_function():
    """Imports of project modules sit at the top of the file: what a module needs is visible there,
    and no import circle hides behind a function. (Optional, heavy third-party libraries may be
    imported where they are used, with a comment saying why.)"""
    bad = []
    for path in python_files("models", "pipeline", "flows"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for line, module in imports_in(node):
                    if module.split(".")[0] in ("pipeline", "models", "flows", "benchmarks"):
                        bad.append(f"{path.relative_to(REPO)}:{line} imports {module}")
    assert sorted(set(bad)) == []


def imports_in(node: ast.AST) -> list[tuple[int, str]]:
    found = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Import):
            found += [(sub.lineno, a.name) for a in sub.names]
        elif isinstance(sub, ast.ImportFrom) and sub.level == 0 and sub.module:
            found.append((sub.lineno, sub.module))
    return found


def test_no_import_error_guards_around_project_modules():
    """A module of the project cannot be missing: no ``try: import ... except ImportError`` around one."""
    bad = []
    for path in python_files("models", "pipeline", "flows"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Try) and any(
                isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError")
                for h in node.handlers
            ):
                own = [m for stmt in node.body for _, m in imports_in(stmt)]
                if any(m.split(".")[0] in ("pipeline", "models", "flows") for m in own):
                    bad.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert bad == []


def string_constants(path: Path) -> list[tuple[int, str]]:
    return [
        (node.lineno, node.value)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]


def test_plug_ins_are_named_only_where_they_live():
    """No code outside ``pipeline/data`` names a reader, none outside ``models`` names a mechanism: the
    rest of the project asks a plug-in's declaration (its options, its output layer, its module's
    ``source_tokenizer``/``raw_text_refusal``), so adding or changing one edits one module."""
    from models.registry import DECLARED
    from pipeline.data.corpora import reader_names

    readers, mechanisms = set(reader_names()), set(DECLARED)
    bad = []
    for path in python_files("pipeline", "flows"):
        rel = path.relative_to(REPO).as_posix()
        for line, value in string_constants(path):
            if value in mechanisms or (value in readers and not rel.startswith("pipeline/data/")):
                bad.append(f"{rel}:{line} names {value!r}")
    assert bad == []


def test_benchmarks_and_scripts_use_the_installed_packages():
    """No ``sys.path`` edits, no imports of the test suite: they run against the installed packages
    (``benchmarks`` is one of them: the scripts import each other as ``benchmarks.<name>``)."""
    bad = []
    for path in python_files("benchmarks", "scripts"):
        text = path.read_text(encoding="utf-8")
        if "sys.path.insert" in text or "sys.path.append" in text:
            bad.append(f"{path.relative_to(REPO)}: edits sys.path")
        bad += [
            f"{path.relative_to(REPO)}:{line} imports {m}" for line, m in imports(path) if m.split(".")[0] == "tests"
        ]
    assert bad == []


def test_the_lower_packages_load_without_torch():
    """``import pipeline.data.corpora.dress`` (or any module of the config, io, data, metrics and
    tracking packages) does not load torch or the mechanisms."""
    modules = [module_of(p) for top in TORCH_FREE for p in python_files(top.replace(".", "/"))]
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in modules)
        + (
            "loaded = sorted(m for m in sys.modules if m in ('torch', 'models.registry', 'models.seq2seq'))\nprint(loaded)\n"
        )
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_check_catches_a_violation(tmp_path):
    """The rule is not vacuous: a file importing against the direction is reported."""
    bad = tmp_path / "models"
    bad.mkdir()
    (bad / "x.py").write_text("def f():\n    from pipeline.vocab.vocabulary import PAD\n    return PAD\n")
    found = [(line, m) for line, m in imports(bad / "x.py")]
    assert found == [(2, "pipeline.vocab.vocabulary")]
    assert package_of("pipeline.vocab.vocabulary") == "pipeline.vocab" and LAYERS["pipeline.vocab"] > LAYERS["models"]
