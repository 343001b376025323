"""The package's folders are layers: infrastructure at the top level (config, layout, runs, statistics, the notebook
package), then data, models, audit, report, tools and panel_audit (the one-call audit of a DataFrame, which runs
them all); a module imports only from its own layer or the ones before it (README, "Layout"). The package's
``__init__`` is the front door: its lazy ``acgate.audit_panel`` reaches the last layer."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "lib" / "acgate"
LAYERS = ["", "data", "models", "audit", "report", "tools", "panel_audit"]  # "": the top level, the notebook package
FRONT_DOOR = "__init__.py"


def layer_of(module: str) -> str:
    """The layer of a dotted module below acgate ("models.train" -> "models", "runs" -> "")."""
    head = module.split(".")[0]
    return head if head in LAYERS else ""


def upward_imports(package: Path) -> list[str]:
    found = []
    for path in sorted(package.rglob("*.py")):
        importer = (LAYERS[-1] if path.relative_to(package) == Path(FRONT_DOOR)
                    else layer_of(".".join(path.relative_to(package).with_suffix("").parts)))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("acgate"):
                names = ([node.module[len("acgate."):]] if node.module != "acgate"
                         else [alias.name for alias in node.names])
                for name in names:
                    if LAYERS.index(layer_of(name)) > LAYERS.index(importer):
                        found.append(f"{path.relative_to(package)}:{node.lineno} imports acgate.{name}")
    return found


def test_no_module_imports_from_a_later_layer():
    assert upward_imports(PACKAGE) == []


def test_an_import_from_a_later_layer_is_found(tmp_path):
    """The check can fail: a data module that imports the audit is named."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "prep.py").write_text("from acgate.audit.verdicts import cell\nfrom acgate.runs import x\n")
    assert upward_imports(tmp_path) == ["data/prep.py:1 imports acgate.audit.verdicts"]


def import_cycles(package: Path) -> list[list[str]]:
    """Circles of modules that import each other, directly or round a loop, counting every import (at the top, in a
    function or for type checking only): each found once, as the modules round it."""
    modules = {".".join(p.relative_to(package).with_suffix("").parts).removesuffix(".__init__"): p
               for p in package.rglob("*.py") if p.name != FRONT_DOOR}
    edges = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("acgate."):
                target = node.module[len("acgate."):]
                candidates = [target] + [f"{target}.{alias.name}" for alias in node.names]
                edges[name] |= {c for c in candidates if c in modules and c != name}
    cycles, state = [], {}

    def visit(name: str, path: list[str]) -> None:
        state[name] = "open"
        for other in sorted(edges[name]):
            if state.get(other) == "open":
                cycles.append(path[path.index(other):])
            elif other not in state:
                visit(other, [*path, other])
        state[name] = "done"

    for name in sorted(modules):
        if name not in state:
            visit(name, [name])
    return cycles


def test_no_modules_import_each_other():
    assert import_cycles(PACKAGE) == []


def test_a_circle_of_imports_is_found(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "train.py").write_text("from acgate.models.memory import Plan\n")
    (tmp_path / "models" / "memory.py").write_text("def f():\n    from acgate.models.train import Batch\n")
    assert import_cycles(tmp_path) == [["models.memory", "models.train"]]
