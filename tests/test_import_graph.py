"""The packages are layered and no module imports one that imports it back.

Layers (docs/ARCHITECTURE.md): core <- policies <- proxy_models <- search <- launch; a package
imports only packages of lower layers (lazy, function-level imports included). Inside a package,
the top-level imports of its modules form no cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ["core", "policies", "proxy_models", "search", "launch"]


def _modules() -> dict[str, Path]:
    out = {}
    for package in LAYERS:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out["autoaug." + ".".join(parts)] = path
    return out


def _is_type_checking_block(node: ast.AST) -> bool:
    test = getattr(node, "test", None) if isinstance(node, ast.If) else None
    return (
        isinstance(test, (ast.Name, ast.Attribute))
        and (getattr(test, "id", None) or getattr(test, "attr", None)) == "TYPE_CHECKING"
    )


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node but those under ``if TYPE_CHECKING:`` (imports for annotations, never run)."""
    out, todo = [], [tree]
    while todo:
        node = todo.pop()
        out.append(node)
        todo += [c for c in ast.iter_child_nodes(node) if not _is_type_checking_block(c)]
    return out


def _imports(path: Path, *, top_level_only: bool) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else _runtime_nodes(tree)
    found = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("autoaug."):
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("autoaug."))
    return found


def test_packages_import_only_lower_layers():
    wrong = []
    for module, path in _modules().items():
        layer = LAYERS.index(module.split(".")[1])
        for target in _imports(path, top_level_only=False):
            target_layer = LAYERS.index(target.split(".")[1])
            if target_layer > layer:
                wrong.append(f"{module} imports {target}")
    assert not wrong, "\n".join(wrong)


def test_no_import_cycle_between_modules():
    cycles = _cycles(top_level_only=True)
    assert not cycles, "\n".join(cycles)


def test_the_op_registry_imports_no_backend():
    imported = _imports(ROOT / "policies" / "ops.py", top_level_only=False)
    assert not {"autoaug.policies.dali_apply", "autoaug.policies.torch_apply"} & imported


def _cycles(top_level_only: bool) -> list[str]:
    modules = _modules()
    graph = {
        m: {t for t in _imports(p, top_level_only=top_level_only) if t in modules and t != m}
        for m, p in modules.items()
    }
    # A package's __init__ importing its own modules is how a package is assembled, not a cycle.
    for m in graph:
        graph[m] = {t for t in graph[m] if not m.startswith(t + ".")}
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(stack[stack.index(nxt) :] + [nxt]) if nxt in stack else f"{node} -> {nxt}")
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    return cycles


def test_no_import_cycle_even_through_function_level_imports():
    """A lazy (function-level) import only defers a dependency: two modules that need each other,
    at any level, are one concept cut in two."""
    cycles = _cycles(top_level_only=False)
    # Two exceptions, on purpose, of one kind: an object's convenience method delegates to a module
    # that works on such objects. Policy.to_torchvision() delegates to its backend, which
    # type-checks the value object it is given; ImageDataset.groups(spec) delegates the parsing
    # and numbering of group keys to proxy_models.groups, which raises the dataset's DatasetError.
    allowed = {
        frozenset({"autoaug.policies.policy", "autoaug.policies.torch_apply"}),
        frozenset({"autoaug.proxy_models.data", "autoaug.proxy_models.groups"}),
    }
    unexpected = [c for c in cycles if frozenset(c.split(" -> ")) not in allowed]  # any rotation of a cycle
    assert not unexpected, "\n".join(unexpected)
