"""The package's shape (issue 12): a folder per pipeline stage, imports that only go down.

Reads every module's imports (module level and inside functions) with `ast`, so nothing is
imported and no TVM is needed.
"""

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "tlm"

# Pipeline order; a module may import its own stage and the stages before it.
STAGES = ("errors", "graph", "space", "measure", "model", "search", "compiler", "eval", "cli", "__init__")


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        parts = path.relative_to(PKG.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _stage(module: str) -> str:
    parts = module.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def _imports(module: str, path: Path) -> set[str]:
    """tlm modules that `module` imports (a `from pkg import name` of a submodule counts it)."""
    out = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("tlm")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            if not base.startswith("tlm"):
                continue
            subs = {f"{base}.{a.name}" for a in node.names} & set(MODULES)
            out |= subs or {base}
    return out - {module}


GRAPH = {m: _imports(m, p) for m, p in MODULES.items()}


def test_every_module_is_in_a_stage():
    assert {_stage(m) for m in MODULES} <= set(STAGES)
    top = sorted(p.name for p in PKG.iterdir() if p.suffix == ".py")
    assert top == ["__init__.py", "cli.py", "errors.py"], "a module at the top that belongs in a stage"


def test_every_import_names_a_module():
    unknown = {(m, i) for m, deps in GRAPH.items() for i in deps if i not in MODULES}
    assert not unknown


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_only_go_down_the_stages(module):
    mine = STAGES.index(_stage(module))
    up = sorted(i for i in GRAPH[module] if STAGES.index(_stage(i)) > mine)
    assert not up, f"{module} imports a later stage: {up}"


def test_no_import_circles():
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for dep in sorted(GRAPH.get(m, ())):
            if state.get(dep) == 1:
                raise AssertionError("import circle: " + " -> ".join(path[path.index(dep):] + [dep]))
            if dep not in state:
                visit(dep)
        path.pop()
        state[m] = 2

    for m in sorted(MODULES):
        if m not in state:
            visit(m)


def test_no_private_names_across_modules():
    bad = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tlm"):
                bad += [f"{module}: {node.module}.{a.name}" for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")]
    assert not bad


def test_every_module_says_what_it_is():
    missing = [m for m, p in MODULES.items() if not ast.get_docstring(ast.parse(p.read_text()))]
    assert not missing, f"modules without a docstring: {missing}"


def test_modules_stay_small():
    big = {m: n for m, p in MODULES.items() if (n := len(p.read_text().splitlines())) > 420}
    assert not big, f"modules past ~400 lines: {big}"


def test_tests_mirror_the_stages():
    """tests/<stage>/test_<module>[_<topic>].py: every test file in a stage folder is named after one
    of its modules (a topic suffix splits a module's tests)."""
    tests = Path(__file__).resolve().parent
    stray = []
    for path in sorted(tests.glob("*/test_*.py")):
        stage, name = path.parent.name, path.stem[len("test_"):]
        parts = name.split("_")
        if not any(f"tlm.{stage}.{'_'.join(parts[:i])}" in MODULES for i in range(1, len(parts) + 1)):
            stray.append(str(path.relative_to(tests)))
    assert not stray, f"test files that name no module of their stage: {stray}"
    assert {p.name for p in tests.iterdir() if p.is_dir() and list(p.glob("test_*.py"))} <= set(STAGES)
