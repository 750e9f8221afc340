"""The layering of DESIGN.md held by a test: `wire <- translate <- {backends, server, store} <-
app, cli`, and the server and router reach backends only through backends/base.py."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "codexgate"

# package -> codexgate packages it must not import
FORBIDDEN = {
    "wire": ("translate", "backends", "server", "store", "app", "cli"),
    "translate": ("backends", "server", "store", "app", "cli"),
    "backends": ("server", "store", "app", "cli", "commands"),
    "config": ("backends", "server", "store", "app", "cli", "commands", "observability", "routing"),
    "server": ("backends.chat", "backends.transport", "app", "cli"),
}


def imports_of(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("codexgate."):
            names.add(node.module.removeprefix("codexgate."))
        elif isinstance(node, ast.Import):
            names.update(
                a.name.removeprefix("codexgate.") for a in node.names if a.name.startswith("codexgate.")
            )
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_a_layer_imports_nothing_above_it(package: str) -> None:
    files = sorted((SRC / package).rglob("*.py"))
    assert files
    wrong = [
        f"{path.relative_to(SRC)} imports {name}"
        for path in files
        for name in imports_of(path)
        if any(name == banned or name.startswith(banned + ".") for banned in FORBIDDEN[package])
    ]
    assert not wrong


def test_routing_knows_no_concrete_backend() -> None:
    assert not {name for name in imports_of(SRC / "routing/router.py") if name.startswith("backends")}


def test_the_embedded_models_process_imports_nothing_of_the_gateway() -> None:
    """backends/embedded/child.py runs as its own process: it starts in about a second because
    it loads only the runtime."""
    assert imports_of(SRC / "backends" / "embedded" / "child.py") == set()
    package = ast.parse((SRC / "backends" / "embedded" / "__init__.py").read_text())
    assert len(package.body) == 1 and isinstance(package.body[0], ast.Expr)  # its docstring alone


def test_serving_loads_no_library_that_only_some_requests_need() -> None:
    """lark with regex (grammar checks), jsonschema (argument checks), rich (doctor's display)
    and pypdf (PDF input files, some 14 MB more) are imported on first use: some 25 MB a gateway
    otherwise holds from its start (bench/under_load.py: memory)."""
    import subprocess
    import sys

    code = (
        "import sys, codexgate.cli, codexgate.app, codexgate.server.serve\n"
        "print(','.join(m for m in ('lark', 'regex', 'jsonschema', 'referencing', 'rich', 'pypdf')"
        " if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == ""
