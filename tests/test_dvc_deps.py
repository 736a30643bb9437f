"""Every DVC stage depends on all the code its flow runs, so `dvc repro` never serves stale results.

The rule: for each stage of dvc.yaml, the entry module of its ``cmd`` (``python -m flows.<name>``)
and every project module it reaches through imports, directly or through other project modules,
must be covered by one of the stage's ``deps`` (the file itself or a folder holding it). Imports
are read with ``ast`` from the sources: ``import x`` and ``from x import y`` anywhere in a file
(module level and inside functions, which run too), absolute or relative; importing ``a.b.c`` runs
``a/__init__.py`` and ``a/b/__init__.py`` as well, and ``from a.b import c`` imports the submodule
``a/b/c.py`` when there is one. Third-party modules are ignored: only files of the repository's
top-level packages count. A module that discovers its package's modules at run time
(``pkgutil.iter_modules``: ``models.registry``, ``pipeline.data.corpora``) imports its whole folder.
Data files a module reads next to itself are listed by hand in ``DATA_FILES``.
``${...}`` deps are the stages' data and are not checked here.
"""

from __future__ import annotations

import ast
import shlex
from functools import cache
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
PACKAGES = sorted(p.parent.name for p in REPO.glob("*/__init__.py") if p.parent.name != "tests")

# Non-Python files a module reads by path beside itself (Path(__file__)...): they are code too.
DATA_FILES = {
    "pipeline/reporting/paper_results.py": [
        "pipeline/reporting/paper_results.yaml"
    ],  # DATA_FILE = Path(__file__).with_name(...)
}


@cache
def parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def module_file(name: str) -> Path | None:
    """The repository file of a dotted module name (a package: its ``__init__.py``), or None."""
    if name.split(".")[0] not in PACKAGES:
        return None
    base = REPO.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def discovers_modules(tree: ast.Module) -> bool:
    """True when the file calls ``pkgutil.iter_modules``/``walk_packages``: plug-ins found at run time."""
    return any(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute | ast.Name)
        and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("iter_modules", "walk_packages")
        for node in ast.walk(tree)
    )


def dynamic_imports(tree: ast.Module) -> list[ast.Call]:
    """The file's ``importlib.import_module``/``__import__`` calls."""
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "__import__")
    ]


def named_modules(tree: ast.Module) -> list[str]:
    """String constants that name a module of the repository (``RUNTIMES = {"onnx": "pipeline.serving..."}``):
    what a file that imports by name can import."""
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and module_file(node.value) is not None
        and "." in node.value
    ]


def imports_own_package_by_name(call: ast.Call) -> bool:
    """``import_module(f"{__name__}.{...}")``: a package's ``__init__`` loading one of its own modules."""
    arg = call.args[0] if call.args else None
    return (
        isinstance(arg, ast.JoinedStr)
        and isinstance(arg.values[0], ast.FormattedValue)
        and getattr(arg.values[0].value, "id", None) == "__name__"
    )


@cache
def direct_imports(path: Path) -> frozenset[Path]:
    """Project files that running ``path`` imports itself (not transitively)."""
    tree = parse(path)
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: `from . import x`, `from ..a import b`
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            names.append(module)
            names += [f"{module}.{alias.name}" for alias in node.names]  # kept only if a submodule
    found = set()
    for name in names:
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # a.b.c imports a, a.b and a.b.c
            file = module_file(".".join(parts[:i]))
            if file is not None:
                found.add(file)
    calls = dynamic_imports(tree)
    if discovers_modules(tree) or any(imports_own_package_by_name(c) for c in calls):
        # plug-ins found at run time, or loaded by name from the package: every module of the file's own package
        found.update(p for p in path.parent.rglob("*.py") if "__pycache__" not in p.parts)
    if calls:  # imported by name: the module names the file spells out
        found.update(module_file(name) for name in named_modules(tree))
    found.discard(path)
    return frozenset(found)


def closure(entry: str) -> set[str]:
    """Repository-relative paths of every project file ``python -m <entry>`` runs or reads."""
    start = module_file(entry)
    assert start is not None, f"{entry} is not a module of the repository"
    parents = [module_file(".".join(entry.split(".")[:i])) for i in range(1, len(entry.split(".")))]
    todo = [start, *(p for p in parents if p is not None)]
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path not in seen:
            seen.add(path)
            todo += direct_imports(path)
    files = {p.relative_to(REPO).as_posix() for p in seen}
    return files | {data for f in files for data in DATA_FILES.get(f, [])}


def stages() -> dict[str, dict]:
    """dvc.yaml's stages, ``foreach``/``do`` unwrapped (``matrix`` keeps cmd and deps at the top)."""
    spec = yaml.safe_load((REPO / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    return {name: stage.get("do", stage) for name, stage in spec.items()}


def entry_module(cmd: str) -> str:
    args = shlex.split(cmd)
    assert "-m" in args, f"not a `python -m <module>` command: {cmd}"
    return args[args.index("-m") + 1]


def uncovered(stage: dict) -> list[str]:
    """Files of the stage's import closure that none of its code deps covers (sorted)."""
    deps = [str(d).rstrip("/") for d in stage.get("deps", []) if "${" not in str(d)]
    return sorted(
        f for f in closure(entry_module(stage["cmd"])) if not any(f == d or f.startswith(d + "/") for d in deps)
    )


def report(name: str, missing: list[str]) -> str:
    return f"stage {name!r}: deps in dvc.yaml miss {len(missing)} file(s) its flow imports: " + ", ".join(missing)


@pytest.mark.parametrize("name", list(stages()))
def test_stage_deps_cover_the_import_closure(name):
    missing = uncovered(stages()[name])
    assert not missing, report(name, missing)


def test_every_dynamic_import_is_followed():
    """``importlib.import_module``/``__import__`` is followed where a module discovers its package's
    modules (``iter_modules``), where a package's ``__init__`` loads its own modules by name
    (``f"{__name__}..."``), and where the file spells out the module names it imports (string
    constants naming project modules); anywhere else the closure would miss what it imports, so the
    line is named (teach ``direct_imports`` about it)."""
    unfollowed = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            tree = parse(path)
            if discovers_modules(tree) or named_modules(tree):
                continue
            unfollowed += [
                f"{path.relative_to(REPO).as_posix()}:{node.lineno}"
                for node in dynamic_imports(tree)
                if not imports_own_package_by_name(node)
            ]
    assert not unfollowed, f"dynamic imports this test does not follow: {unfollowed}"


def test_the_check_names_the_stage_and_the_missing_file():
    """Not vacuous: the closure reaches lazy and discovered modules, and a missing dep is reported."""
    train = closure("flows.train")
    assert {
        "flows/__init__.py",
        "pipeline/__init__.py",
        "pipeline/training/job.py",
        "pipeline/stages/train.py",
    } <= train
    assert {p.relative_to(REPO).as_posix() for p in (REPO / "models").glob("*.py")} <= train  # discovered
    assert "pipeline/data/text/subword.py" in closure("flows.prepare")  # imported inside a function
    assert "pipeline/serving/onnx_pyfunc.py" in closure("pipeline.serving.predict")  # a module named in a string
    assert "models/hf/modeling.py" in closure("models.hf")  # a package loading its modules by name
    evaluate = dict(stages()["evaluate"])
    target = "pipeline/metrics/rouge_stem.py"
    evaluate["deps"] = [d for d in evaluate["deps"] if not (target == d or target.startswith(d.rstrip("/") + "/"))]
    missing = uncovered(evaluate)
    assert target in missing
    message = report("evaluate", missing)
    assert "'evaluate'" in message and target in message


def test_a_logged_model_ships_the_code_it_imports():
    """The code paths of a logged model (pipeline.serving.pyfunc.SERVED_PACKAGES) cover everything the
    pyfunc imports, and leave out the roles it does not: metrics, reporting, tracking, stages, retraining."""
    from pipeline.serving.pyfunc import SERVED_PACKAGES

    shipped = [p.rstrip("/") for p in SERVED_PACKAGES]
    missing = sorted(
        f for f in closure("pipeline.serving.pyfunc") if not any(f == p or f.startswith(p + "/") for p in shipped)
    )
    assert missing == []
    unused = ("pipeline/metrics", "pipeline/reporting", "pipeline/tracking", "pipeline/stages", "pipeline/retrain")
    assert not [p for p in shipped if p.startswith(unused)]
