"""One write path per rule (docs/architecture.md): every SQL statement the product writes by
hand is listed from the source, and no two of them express the same write (the same verb on
the same table) outside an app's ``statements.py``, where a set statement sits beside its
models. The rest goes through the ORM."""

from __future__ import annotations

import ast
import functools
import importlib
import re
import tomllib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.apps import apps

ROOT = Path(__file__).resolve().parent.parent.parent
# The product's packages, as the import contracts name them; never a migration (a migration
# writes what it writes once).
PACKAGES = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"][
    "root_packages"
]
_WRITE = re.compile(
    r"\b(?P<verb>INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+(?P<table>\{[^}]*\}|\"?\w+\"?)"
    r"(?:\s+AS\s+\w+)?\s*(?=(?P<rest>.{0,40}))",
    re.DOTALL,
)
_DB_TABLE = re.compile(r"(\w+)\._meta\.db_table")


@dataclass(frozen=True)
class Write:
    path: str
    line: int
    verb: str
    table: str

    @property
    def in_statements(self) -> bool:
        return self.path.endswith("/statements.py")


def _text(node: ast.AST) -> str | None:
    """A string literal's text, an f-string's with ``{name}`` for each placeholder."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            elif isinstance(value, ast.FormattedValue):
                parts.append("{" + ast.unparse(value.value) + "}")
        return "".join(parts)
    return None


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(
            node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
        ):
            body = node.body
            if body and isinstance(body[0], ast.Expr):
                ids.add(id(body[0].value))
    return ids


def _is_statement(verb: str, rest: str) -> bool:
    """A statement, not prose naming one: an UPDATE sets, an INSERT gives columns or rows."""
    if verb == "UPDATE":
        return bool(re.match(r"(?:AS\s+\w+\s+)?SET\b", rest))
    if verb.startswith("INSERT"):
        return bool(re.match(r"[(]|VALUES\b|SELECT\b|\{", rest))
    return True


def _assignments(tree: ast.AST) -> dict[str, list[tuple[int, str]]]:
    """Each name's assignments in a module: (line, the assigned expression's source)."""
    found: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id].append((node.lineno, ast.unparse(node.value)))
    return found


def _resolve(module: str, table: str, *, line: int, assigned: dict) -> str:
    """The table a statement names: a literal name; a module-level string of the module
    (``{_EVENTS}``); ``Model._meta.db_table`` of a model the module holds, written in place
    or in the name's last assignment before the statement (``table = ...``). A table only
    the running code knows (a model given as an argument) stays as written, by module."""
    table = table.strip('"')
    if not table.startswith("{"):
        return table.lower()
    expression = table[1:-1]
    namespace = importlib.import_module(module)
    value = getattr(namespace, expression, None) if expression.isidentifier() else None
    if isinstance(value, str):
        return value.strip('"').lower()
    source = expression
    if expression.isidentifier():
        earlier = [text for at, text in assigned.get(expression, []) if at <= line]
        source = earlier[-1] if earlier else expression
    match = _DB_TABLE.search(source)
    model = getattr(namespace, match[1], None) if match else None
    if model is not None and hasattr(model, "_meta"):
        return model._meta.db_table.lower()
    # A module-level name of a table in it (``quote(_EVENTS)``).
    for name in re.findall(r"\w+", source):
        value = getattr(namespace, name, None)
        if isinstance(value, str) and value in _tables():
            return value
    return f"{module}:{expression}"


@functools.cache
def _tables() -> frozenset[str]:
    return frozenset(model._meta.db_table for model in apps.get_models())


def product_writes() -> list[Write]:
    writes = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if "migrations" in relative.parts:
                continue
            tree = ast.parse(path.read_text(), filename=str(path))
            docstrings = _docstrings(tree)
            assigned = _assignments(tree)
            module = ".".join(relative.with_suffix("").parts)
            for node in ast.walk(tree):
                if id(node) in docstrings:
                    continue
                text = _text(node)
                if text is None:
                    continue
                for match in _WRITE.finditer(text):
                    verb = " ".join(match["verb"].split())
                    if not _is_statement(verb, match["rest"]):
                        continue
                    writes.append(
                        Write(
                            path=str(relative),
                            line=node.lineno,
                            verb=verb,
                            table=_resolve(
                                module,
                                match["table"],
                                line=node.lineno,
                                assigned=assigned,
                            ),
                        )
                    )
    return writes


@pytest.fixture(scope="module")
def writes() -> list[Write]:
    return product_writes()


def test_the_product_statements_are_listed(writes):
    """The scan finds the statements it must: ingest's upsert, the claim and the close of a
    batch, the research set."""
    found = {(w.path, w.verb, w.table) for w in writes}
    assert ("webhooks/statements.py", "INSERT INTO", "webhooks_inboxevent") in found
    assert ("webhooks/statements.py", "INSERT INTO", "webhooks_inboxattempt") in found
    assert ("webhooks/statements.py", "UPDATE", "webhooks_inboxevent") in found
    assert (
        "research/statements.py",
        "INSERT INTO",
        "research_documentrevision",
    ) in found
    for write in writes:
        print(f"{write.path}:{write.line} {write.verb} {write.table}")


def test_no_two_statements_outside_statements_modules_express_the_same_write(writes):
    """The same verb on the same table written twice by hand, outside an app's
    ``statements.py``, is one rule written twice: one of them belongs in ``statements.py``
    (a set statement) or in the ORM."""
    by_write = defaultdict(list)
    for write in writes:
        if not write.in_statements:
            by_write[(write.verb, write.table)].append(f"{write.path}:{write.line}")
    repeated = {key: places for key, places in by_write.items() if len(places) > 1}
    assert not repeated, repeated


@pytest.mark.parametrize("app", ["webhooks", "research"])
def test_the_inbox_and_research_write_by_hand_only_in_their_statements(writes, app):
    """Every hand-written write of these apps is in their ``statements.py``."""
    elsewhere = [
        f"{w.path}:{w.line} {w.verb} {w.table}"
        for w in writes
        if w.path.startswith(f"{app}/") and not w.in_statements
    ]
    assert not elsewhere
