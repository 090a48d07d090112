"""The reference pages cover the code: every public name, option field, variable, error code
and command, so that a new one without documentation fails here rather than going unseen."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import griffe
import pytest

import mrtr
from mrtr import errors
from mrtr.cli import _build
from mrtr.settings import VARIABLES

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference"
OPTION_CLASSES = [
    "mrtr.server.options:ServerOptions",
    "mrtr.server.options:InputRequiredConfig",
    "mrtr.server.budgets:Budgets",
    "mrtr.client.options:ClientOptions",
    "mrtr.client.options:InputRequiredConfig",
    "mrtr.client.options:TaskOptions",
]


def _hook() -> ModuleType:
    """The build hook that renders the generated reference pieces (docs/hooks/reference.py)."""
    path = ROOT / "docs" / "hooks" / "reference.py"
    spec = importlib.util.spec_from_file_location("docs_reference_hook", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


HOOK = _hook()


def _package(extensions: griffe.Extensions | None = None) -> griffe.Object:
    # The same loader mkdocstrings renders the API page with: what it sees is what readers see.
    package = griffe.load(
        "mrtr",
        search_paths=[str(ROOT / "src")],
        resolve_aliases=True,
        extensions=extensions if extensions is not None else _attribute_docs(),
    )
    assert isinstance(package, griffe.Module)
    return package


def _attribute_docs() -> griffe.Extensions:
    """The griffe extension mkdocs.yml gives mkdocstrings (docs/hooks/attribute_docs.py)."""
    config = (ROOT / "mkdocs.yml").read_text()
    (path,) = re.findall(r"^\s+- (docs/hooks/attribute_docs\.py:\w+)$", config, re.M)
    file, _, name = path.partition(":")
    return griffe.load_extensions({f"{ROOT / file}:{name}": {}})


PACKAGE = _package()


def _target(name: str) -> griffe.Object:
    member = PACKAGE.members[name]
    return member.final_target if isinstance(member, griffe.Alias) else member


@pytest.mark.parametrize("name", mrtr.__all__)
def test_public_name_has_a_docstring(name: str) -> None:
    target = _target(name)
    assert target.docstring is not None and target.docstring.value.strip(), (
        f"mrtr.{name} ({target.path}) has no docstring: the API reference shows it as a gap"
    )


def test_every_public_name_has_a_reference_entry() -> None:
    entries = set(re.findall(r"^::: ([\w.]+)$", (REFERENCE / "api.md").read_text(), re.M))
    missing = [
        name
        for name in mrtr.__all__
        if f"mrtr.{name}" not in entries and _target(name).path not in entries
    ]
    assert not missing, f"docs/reference/api.md has no `::: mrtr.NAME` entry for {missing}"


def test_reference_entries_name_real_objects() -> None:
    """An entry for a name that left the code would break the build; say which here."""
    for entry in re.findall(r"^::: ([\w.]+)$", (REFERENCE / "api.md").read_text(), re.M):
        parts = entry.split(".")[1:]
        node: griffe.Object | griffe.Alias = PACKAGE
        for part in parts:
            node = node.members[part]
        assert node is not None, entry


def _undocumented_attributes(package: griffe.Object) -> list[str]:
    """The attributes the API page shows (members of its `::: ` entries, `_` names filtered
    out as mkdocs.yml does) that have no documentation: each would be an empty box."""
    empty: list[str] = []
    for entry in re.findall(r"^::: ([\w.]+)$", (REFERENCE / "api.md").read_text(), re.M):
        node: griffe.Object | griffe.Alias = package
        for part in entry.split(".")[1:]:
            node = node.members[part]
        shown = node.final_target if isinstance(node, griffe.Alias) else node
        for name, member in shown.members.items():
            if name.startswith("_") or member.is_alias or not member.is_attribute:
                continue
            if member.docstring is None or not member.docstring.value.strip():
                empty.append(f"{entry}.{name}")
    return empty


def test_no_attribute_in_the_api_reference_is_an_empty_box() -> None:
    empty = _undocumented_attributes(PACKAGE)
    assert not empty, (
        f"{len(empty)} attributes have no documentation: give each a `#:` comment above its "
        f"assignment, or a `name`: description in its class docstring: {empty}"
    )


def test_the_attribute_check_can_fail() -> None:
    bare = _package(extensions=griffe.load_extensions())  # without attribute_docs.py
    assert "mrtr.ServerOptions.page_size" in _undocumented_attributes(bare)


@pytest.mark.parametrize("target", OPTION_CLASSES)
def test_every_option_field_is_described(target: str) -> None:
    cls = HOOK.load(target)
    table = HOOK.fields_table(cls)
    assert HOOK.MISSING not in table, f"{target}: a field its docstring does not describe:\n{table}"
    assert f"<!-- mrtr:fields {target} -->" in (REFERENCE / "options.md").read_text()


def test_the_field_check_can_fail() -> None:
    from dataclasses import dataclass

    @dataclass
    class Half:
        """`a`: described."""

        a: int = 1
        b: int = 2

    assert HOOK.field_descriptions(Half) == {"a": "described."}
    assert HOOK.MISSING in HOOK.fields_table(Half)


def test_every_environment_variable_is_documented() -> None:
    page = (REFERENCE / "environment.md").read_text()
    missing = [variable.name for variable in VARIABLES if f"`{variable.name}`" not in page]
    assert not missing, f"docs/reference/environment.md lacks {missing}"


def test_every_error_code_is_documented() -> None:
    page = (REFERENCE / "errors.md").read_text()
    codes = [
        name
        for name in dir(errors)
        if name.isupper() and isinstance(getattr(errors, name), int) and name != "JSONRPC_RESERVED"
    ]
    assert len(codes) >= 15
    missing = [name for name in codes if f"`{name}`" not in page]
    assert not missing, f"docs/reference/errors.md lacks {missing}"


def test_every_command_has_its_help_on_the_cli_page() -> None:
    page = (REFERENCE / "cli.md").read_text()
    _, commands = _build()
    missing = [name for name in commands if f"<!-- mrtr:help {name} -->" not in page]
    assert not missing, f"docs/reference/cli.md lacks the help of {missing}"
    assert "usage: mrtr serve" in HOOK.command_help("serve")
