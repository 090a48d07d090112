"""The import graph of `src/mrtr`: no cycle, and each layer imports only itself and below.

The graph is read from the source with `ast` (nothing is imported). Every import counts: at
module level, inside functions (a deferred import is still a dependency) and under
`if TYPE_CHECKING:` (a type from above is still an upward dependency; a lower layer that
needs one defines a `Protocol` of its own, as `mrtr.server.endpoint` does for transports).
`from package import name` depends on the package (its `__init__`) and, when `name` is a
submodule, on that module too.

`docs/concepts/architecture.md` describes the layers; `LAYERS` below is what is enforced.
Two allowlists hold what the code does not keep yet. They may only shrink: a test fails when
an entry is no longer true, so remove it in the change that fixes it.
"""

from __future__ import annotations

import ast
import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"

#: The layers, lowest first. An entry names one module, or with `.*` a package and every module
#: under it; a module belongs to the layer of the most specific entry naming it, and a module
#: no entry names fails the test (place it). A module may import modules of its own layer and
#: of the layers before it, never one after it.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("wire", ("mrtr.protocol.*",)),
    (
        "helpers",
        (
            "mrtr.version",
            "mrtr.deadline",
            "mrtr.stepping",
            "mrtr.inputs",
            "mrtr.server.worker_threads",
            "mrtr.server.media",
            "mrtr.server.content",
            "mrtr.server.uri_template",
            "mrtr.server.docstrings",
            "mrtr.client.auth.*",
        ),
    ),
    (
        "engine and state",
        (
            # The sans-I/O engine.
            "mrtr.server._engine.*",
            "mrtr.server.request_state",
            "mrtr.server.input_bounds",
            "mrtr.server.once_codec",
            "mrtr.server.once_journal",
            "mrtr.server.redemption",
            "mrtr.server.tool_error",
            "mrtr.server.options",
            # State: the stores and their budgets, sessions, shared change notifications,
            # task records.
            "mrtr.server.store",
            "mrtr.server.redis_store",
            "mrtr.server.budgets",
            "mrtr.server.session",
            "mrtr.server.subscriptions",
            # Which requests their client cancelled (the connection marks, the proxy asks).
            "mrtr.server.cancellation",
            "mrtr.server.tasks.record",
            "mrtr.server.tasks.storage",
            "mrtr.server.tasks.settings",
            # Access tokens, their verifiers, DPoP proofs (whose nonces are kept in the store).
            "mrtr.server.auth.*",
        ),
    ),
    # What transports may use of a server (`ServerEndpoint`), and the errors it raises to
    # them: just above what its signatures name, so its users and its implementer, `Server`,
    # both import it downwards.
    ("contracts", ("mrtr.server.endpoint",)),
    (
        "registry",
        (
            "mrtr.server.registry",
            "mrtr.server.primitives",
            "mrtr.server.signature",
            "mrtr.server.injection",
        ),
    ),
    (
        "invocation",
        (
            "mrtr.server.invocation",
            "mrtr.server.inbound",
            "mrtr.server.context",
            "mrtr.server.middleware",
            "mrtr.server.lifespan",
            "mrtr.server.mount",
            "mrtr.server.tasks.*",
            "mrtr.middleware.*",
        ),
    ),
    ("eras", ("mrtr.server.modern", "mrtr.server.legacy", "mrtr.server.live")),
    ("entry", ("mrtr.server.entry", "mrtr.server.connection")),
    # Both sides' transports; the server's see it only as a `ServerEndpoint`.
    ("transports", ("mrtr.transport.*", "mrtr.server.auth.guard")),
    # `Server` starts its transports (`run`, `asgi_app`), so it sits above them; so do the
    # settings read from the environment (they name HTTP limits) and the `Client`.
    (
        "facade",
        (
            "mrtr.server.server",
            "mrtr.server.serving",
            "mrtr.server",
            "mrtr.settings",
            "mrtr.client.*",
            # A backend server seen through `Client`, served by a `Server`.
            "mrtr.proxy.*",
        ),
    ),
    ("cli", ("mrtr.cli.*", "mrtr", "mrtr.__main__")),
]

#: Modules in an import cycle today (cycles counted with `TYPE_CHECKING` imports), one
#: strongly connected component a group: none may grow, and a new one fails the test.
KNOWN_CYCLES: list[frozenset[str]] = []

#: Imports that break the layer contract today: (importer, imported).
KNOWN_BREAKS: frozenset[tuple[str, str]] = frozenset()


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted((SRC / "mrtr").rglob("*.py"))}


def _imported(node: ast.AST, module: str, is_package: bool, known: set[str]) -> Iterator[str]:
    """The modules of `known` that one import statement depends on."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name in known:
                yield alias.name
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            package = module.split(".") if is_package else module.split(".")[:-1]
            base = package[: len(package) - node.level + 1]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        if target in known:
            yield target
        for alias in node.names:
            if f"{target}.{alias.name}" in known:
                yield f"{target}.{alias.name}"


def import_graph() -> dict[str, set[str]]:
    """Each module of `mrtr` and the `mrtr` modules it imports (every import, see above)."""
    modules = _modules()
    known = set(modules)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        is_package = path.name == "__init__.py"
        graph[name] = {
            target
            for node in ast.walk(tree)
            for target in _imported(node, name, is_package, known)
            if target != name
        }
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def layer_of(module: str) -> int:
    """The index in `LAYERS` of the layer `module` belongs to (its most specific entry)."""
    best = -1
    best_length = -1
    for number, (_, entries) in enumerate(LAYERS):
        for entry in entries:
            name = entry.removesuffix(".*")
            if entry.endswith(".*"):
                matches = module == name or module.startswith(name + ".")
            else:
                matches = module == name
            if matches and len(name) > best_length:
                best, best_length = number, len(name)
    if best < 0:
        raise LookupError(f"{module} is in no layer: add it to LAYERS")
    return best


def layer_breaks(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """The imports of a module from a higher layer."""
    return {
        (module, target)
        for module, targets in graph.items()
        for target in targets
        if layer_of(target) > layer_of(module)
    }


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def test_the_scanner_sees_the_kinds_of_import() -> None:
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "import mrtr.protocol.jsonrpc as rpc\n"
        "from . import headers\n"
        "from ..server.options import ServerOptions\n"
        "if TYPE_CHECKING:\n"
        "    from ..server.endpoint import ServerEndpoint\n"
        "def later():\n"
        "    from ..deadline import Deadline\n"
    )
    known = set(_modules())
    seen = {
        target
        for node in ast.walk(tree)
        for target in _imported(node, "mrtr.transport.http_app", False, known)
    }
    assert seen == {
        "mrtr.protocol.jsonrpc",
        "mrtr.transport",
        "mrtr.transport.headers",
        "mrtr.server.options",
        "mrtr.server.endpoint",
        "mrtr.deadline",
    }


def test_cycles_are_found() -> None:
    found = cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}})
    assert found == [frozenset({"a", "b", "c"})]


def test_every_module_is_in_a_layer(graph: dict[str, set[str]]) -> None:
    placed = []
    for module in graph:
        with contextlib.suppress(LookupError):
            layer_of(module)
            placed.append(module)
    assert sorted(graph) == sorted(placed), "add these to LAYERS: " + ", ".join(
        sorted(set(graph) - set(placed))
    )


def test_a_package_entry_covers_its_modules_and_an_exact_one_only_itself() -> None:
    assert LAYERS[layer_of("mrtr.transport.http_app")][0] == "transports"
    assert LAYERS[layer_of("mrtr.server.auth.guard")][0] == "transports"
    assert LAYERS[layer_of("mrtr.server.auth.token")][0] == "engine and state"
    with pytest.raises(LookupError):
        layer_of("mrtr.server.new_module")


def test_no_new_import_cycle(graph: dict[str, set[str]]) -> None:
    known = set().union(*KNOWN_CYCLES)
    found = cycles(graph)
    new = [sorted(component - known) for component in found if component - known]
    assert not new, f"modules newly in an import cycle: {new}"
    merged = [
        sorted(component)
        for component in found
        if not any(component <= group for group in KNOWN_CYCLES)
    ]
    assert not merged, f"known cycles joined into one: {merged}"


def test_known_cycles_still_exist(graph: dict[str, set[str]]) -> None:
    in_cycles = set().union(*cycles(graph))
    gone = sorted(set().union(*KNOWN_CYCLES) - in_cycles)
    assert not gone, f"no longer in a cycle, remove from KNOWN_CYCLES: {gone}"


def test_layers_import_only_downwards(graph: dict[str, set[str]]) -> None:
    new = sorted(layer_breaks(graph) - KNOWN_BREAKS)
    described = [
        f"{a} ({LAYERS[layer_of(a)][0]}) imports {b} ({LAYERS[layer_of(b)][0]})" for a, b in new
    ]
    assert not new, "imports from a higher layer:\n" + "\n".join(described)


def test_known_breaks_still_exist(graph: dict[str, set[str]]) -> None:
    gone = sorted(KNOWN_BREAKS - layer_breaks(graph))
    assert not gone, f"no longer an upward import, remove from KNOWN_BREAKS: {gone}"


def test_transports_see_the_server_only_as_an_endpoint(graph: dict[str, set[str]]) -> None:
    # Already implied by the layers; kept apart as the contract transports are written to.
    edges = {layer_of("mrtr.transport"), layer_of("mrtr.server.connection")}
    reaching = sorted(
        module
        for module, targets in graph.items()
        if layer_of(module) in edges and "mrtr.server.server" in targets
    )
    assert reaching == []
    assert "mrtr.server.auth.guard" in graph and layer_of("mrtr.server.auth.guard") in edges
