"""The packages are layered and no module imports one that imports it back.

Layers (docs/ARCHITECTURE.md): core <- policies <- proxy_models <- search <- launch; a package
imports only packages of lower layers (lazy, function-level imports included). Inside a package,
the top-level imports of its modules form no cycle. ``search`` is itself layered in rooms
(:data:`SEARCH_ROOMS`), and its methods are folders no shared module imports.
"""

from __future__ import annotations

import ast
from pathlib import Path

import tomllib

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
    assert not wrong, "\n".join(sorted(set(wrong)))


#: The rooms of ``search/``, lowest first: a module imports modules of its own room and of lower
#: rooms only (lazy imports included; imports for annotations only, under ``TYPE_CHECKING``, do not
#: count). The vocabulary and the story are modules of ``search/`` itself; the other rooms are
#: its subpackages.
SEARCH_ROOMS = [
    ("vocabulary", ("score", "space", "budget", "run_dir")),
    ("decide", ("decide",)),
    ("tune", ("tune",)),
    ("methods", ("methods",)),
    ("story", ("driver", "config", "records", "report", "")),
]


def _search_room(module: str) -> int:
    """The index in :data:`SEARCH_ROOMS` of ``autoaug.search[.X...]``."""
    rest = module.split(".")[2:]
    first = rest[0] if rest else ""
    for index, (_, members) in enumerate(SEARCH_ROOMS):
        if first in members:
            return index
    raise AssertionError(f"{module} is in no room of SEARCH_ROOMS: put it in one")


def _module_of(target: str, modules: dict[str, Path]) -> str:
    """The module an import names (``from M import name`` records ``M.name`` too)."""
    while target not in modules and "." in target:
        target = target.rsplit(".", 1)[0]
    return target


def _search_imports() -> list[tuple[str, str]]:
    modules = _modules()
    return [
        (module, _module_of(target, modules))
        for module, path in modules.items()
        if module.startswith("autoaug.search")
        for target in _imports(path, top_level_only=False)
        if target.startswith("autoaug.search")
    ]


def test_search_rooms_import_only_their_own_and_lower_rooms():
    wrong = []
    for module, target in _search_imports():
        if _search_room(target) > _search_room(module):
            wrong.append(
                f"{module} ({SEARCH_ROOMS[_search_room(module)][0]}) imports {target} "
                f"({SEARCH_ROOMS[_search_room(target)][0]})"
            )
    assert not wrong, "\n".join(sorted(set(wrong)))


def _method_folder(module: str) -> str | None:
    """``train`` for ``autoaug.search.methods.train[.X]``; None outside a method's folder."""
    parts = module.split(".")
    if parts[:3] != ["autoaug", "search", "methods"] or len(parts) < 4:
        return None
    return parts[3] if (ROOT / "search" / "methods" / parts[3]).is_dir() else None


def test_no_module_outside_a_method_folder_imports_it():
    """Each method is one folder: no other method and no shared module imports it (lazy imports
    included); the registry loads it through its entry point (pyproject.toml)."""
    wrong = [
        f"{module} imports {target}"
        for module, target in _search_imports()
        if _method_folder(target) is not None and _method_folder(module) != _method_folder(target)
    ]
    wrong += [
        f"{module} imports {target}"
        for package in ("launch", "core", "policies", "proxy_models")
        for module, path in _modules().items()
        if module.split(".")[1] == package
        for target in _imports(path, top_level_only=False)
        if _method_folder(target) is not None
    ]
    assert not wrong, "\n".join(sorted(set(wrong)))


def test_every_method_folder_is_registered_as_a_built_in():
    """A folder under ``search/methods/`` is a method: a package whose ``method`` module's
    ``METHOD`` an entry of the ``autoaug.methods`` group in pyproject.toml names, under the
    folder's name; the installed metadata has the same entries (an editable install is current)."""
    from importlib.metadata import entry_points

    folders = {p.name for p in (ROOT / "search" / "methods").iterdir() if (p / "__init__.py").is_file()}
    entries = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["autoaug.methods"]
    assert folders and entries == {f: f"autoaug.search.methods.{f}.method:METHOD" for f in folders}
    assert all((ROOT / "search" / "methods" / f / "method.py").is_file() for f in folders)
    installed = {e.name: e.value for e in entry_points(group="autoaug.methods") if e.dist and e.dist.name == "autoaug"}
    assert installed == entries, "the installed entry points are stale: pip install --no-deps -e ."


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
