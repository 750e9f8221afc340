"""The layout of docs/architecture.md held by a test: what each package may import.

Arrows point one way: `wire <- translate <- config <- backends <- routing <- server <-
observability <- app <- commands <- cli`, with `store` beside the backends. The server, the
router and observability reach backends only through their seam (backends/base.py and the
request scope, backends/scope.py); a backend kind's package reaches no other kind's (but the
embedded model, which is a chat backend on a child process); a command reaches no other
command (what Codex needs of a model, which two of them say, is commands/codex_needs.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "codexgate"

_CORE = ("errors", "redact", "timeouts", "wire", "translate")  # everything may use these
_BACKEND_SEAM = ("backends.base", "backends.scope")
_BACKEND_SHARED = (*_BACKEND_SEAM, "backends.kinds", "backends.log", "backends.model_list",
                   "backends.server_info", "backends.http", "config", *_CORE)  # fmt: skip
# unit (a package, a backend kind's package, a command's package) -> what its modules may import
ALLOWED: dict[str, tuple[str, ...]] = {
    "wire": ("errors", "wire"),
    "translate": ("errors", "redact", "wire", "translate"),
    "config": ("config", "errors", "translate"),
    "store": ("store", "errors", "redact", "wire"),
    "backends": (*_BACKEND_SHARED, "backends.discovery"),  # the seam and the modules every kind shares
    "backends.http": _BACKEND_SHARED,
    "backends.chat": (*_BACKEND_SHARED, "backends.chat"),
    "backends.responses": (*_BACKEND_SHARED, "backends.responses"),
    "backends.anthropic": (*_BACKEND_SHARED, "backends.anthropic"),
    "backends.codex": (*_BACKEND_SHARED, "backends.codex"),
    "backends.embedded": (*_BACKEND_SHARED, "backends.embedded", "backends.chat"),
    "routing": ("routing", "config", *_BACKEND_SEAM, *_CORE),
    "server": ("server", "routing", "store", "config", *_BACKEND_SEAM, *_CORE),
    "observability": ("observability", "server", "routing", "store", "config", *_BACKEND_SEAM, *_CORE),
    "app": ("app", "observability", "server", "routing", "store", "backends", "config", *_CORE),
    "commands.doctor": ("commands.doctor", "commands.codex_needs", "app", "backends", "config", *_CORE),
    "commands.codex_setup": (
        "commands.codex_setup",
        "commands.codex_needs",
        "app",
        "backends",
        "config",
        "server",
        *_CORE,
    ),  # fmt: skip
    "commands.claude_setup": ("commands.claude_setup", "backends", "config", "server", *_CORE),
    "commands.replay": ("commands.replay", "app", "observability", "server", "backends", "config", *_CORE),
    "commands.usage": ("commands.usage", "app", "store", "config", *_CORE),
    "commands": ("commands.codex_needs",),
}


def unit_of(path: Path) -> str:
    """The unit a module belongs to: its package, or for backends/ and commands/ the kind's or
    the command's own package."""
    parts = path.relative_to(SRC).with_suffix("").parts
    if parts[0] in ("backends", "commands") and len(parts) > 2:
        return f"{parts[0]}.{parts[1]}"
    return parts[0]


def imports_of(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("codexgate."):
            names.add(node.module.removeprefix("codexgate."))
            if node.module == "codexgate.backends":  # from codexgate.backends import scope
                names.update(f"backends.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(
                a.name.removeprefix("codexgate.") for a in node.names if a.name.startswith("codexgate.")
            )
    return names - {"backends"}


def _within(name: str, allowed: tuple[str, ...]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in allowed)


MODULES = sorted(path for path in SRC.rglob("*.py") if path.parent != SRC or path.stem == "app")


@pytest.mark.parametrize("unit", sorted(ALLOWED))
def test_a_unit_imports_only_what_it_may(unit: str) -> None:
    files = [path for path in MODULES if unit_of(path) == unit]
    assert files, f"no module of {unit}"
    wrong = [
        f"{path.relative_to(SRC)} imports {name}"
        for path in files
        for name in sorted(imports_of(path))
        if not _within(name, ALLOWED[unit])
    ]
    assert not wrong


def test_every_module_belongs_to_a_unit_with_rules() -> None:
    top_level = {path.stem for path in SRC.glob("*.py")} - {"__init__"}
    # the assembly, the entry, the errors, secrets, the per-request timeouts
    assert top_level == {"app", "cli", "errors", "redact", "timeouts"}
    assert not [path for path in MODULES if unit_of(path) not in ALLOWED]


def test_the_modules_every_layer_uses_import_nothing_of_the_gateway() -> None:
    """errors.py, redact.py and timeouts.py sit below every layer (docs/architecture.md)."""
    assert {name: imports_of(SRC / f"{name}.py") for name in ("errors", "redact", "timeouts")} == {
        "errors": set(), "redact": set(), "timeouts": set(),
    }  # fmt: skip


def test_routing_knows_no_concrete_backend() -> None:
    names = {name for path in (SRC / "routing").rglob("*.py") for name in imports_of(path)}
    assert {name for name in names if name.startswith("backends")} <= set(_BACKEND_SEAM)


def test_the_embedded_models_process_imports_nothing_of_the_gateway() -> None:
    """backends/embedded/child.py runs as its own process: it starts in about a second because
    it loads only the runtime."""
    assert imports_of(SRC / "backends" / "embedded" / "child.py") == set()
    package = ast.parse((SRC / "backends" / "embedded" / "__init__.py").read_text())
    assert len(package.body) == 1 and isinstance(package.body[0], ast.Expr)  # its docstring alone


def test_serving_loads_no_library_that_only_some_requests_need() -> None:
    """lark with regex (grammar checks), jsonschema (argument checks), rich (doctor's display)
    and pypdfium2 (PDF input files, some 15 MB more) are imported on first use: some 25 MB a gateway
    otherwise holds from its start (bench/under_load.py: memory)."""
    import subprocess
    import sys

    code = (
        "import sys, codexgate.cli, codexgate.app, codexgate.server.serve\n"
        "print(','.join(m for m in ('lark', 'regex', 'jsonschema', 'referencing', 'rich', 'pypdfium2')"
        " if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == ""
