"""The engine is a lower layer: the replay engine (`mrtr.server._engine`) and the modules it
stands on (sealing, redemption, the `once` codec and journal, input bounds) import nothing
from the registry, the dispatchers, the transports or the auth extension, counting imports
under `TYPE_CHECKING` and inside functions. What they need from above they name as a
`Protocol` of their own.
"""

from __future__ import annotations

import ast
from pathlib import Path

import mrtr

SRC = Path(mrtr.__file__).parent
ENGINE_MODULES = [
    *sorted((SRC / "server" / "_engine").glob("*.py")),
    *(
        SRC / "server" / f"{name}.py"
        for name in ("input_bounds", "request_state", "redemption", "once_codec", "once_journal")
    ),
]
#: What the engine may import: the wire, its own package, the modules beside it that hold no
#: server logic, and configuration.
ALLOWED = (
    "mrtr.protocol",
    "mrtr.inputs",
    "mrtr.deadline",
    "mrtr.stepping",
    "mrtr.settings",
    "mrtr.server._engine",
    "mrtr.server.input_bounds",
    "mrtr.server.request_state",
    "mrtr.server.redemption",
    "mrtr.server.once_codec",
    "mrtr.server.once_journal",
    "mrtr.server.store",
    "mrtr.server.worker_threads",
    "mrtr.server.tool_error",
    "mrtr.server.options",
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every module `path` imports from mrtr, wherever the import statement is."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            found.add(target)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {t for t in found if t == "mrtr" or t.startswith("mrtr.")}


def _allowed(target: str) -> bool:
    return any(target == prefix or target.startswith(prefix + ".") for prefix in ALLOWED)


def test_the_engine_imports_only_downwards() -> None:
    seen: dict[str, set[str]] = {_module_name(p): _imports(p) for p in ENGINE_MODULES}
    assert "mrtr.server._engine.replay" in seen and "mrtr.server._engine.rounds" in seen
    # The scan sees imports under TYPE_CHECKING too (a vacuous pass would prove nothing).
    assert "mrtr.server.options" in seen["mrtr.server._engine.rounds"]
    upward = {
        module: sorted(t for t in targets if not _allowed(t))
        for module, targets in seen.items()
        if any(not _allowed(t) for t in targets)
    }
    assert upward == {}
