"""House rules a reviewer would otherwise check by hand: no function in extender/ is longer than
80 lines, so each one can be read on one screen."""

from __future__ import annotations

import ast
from pathlib import Path

MAX_LINES = 80
PACKAGE = Path(__file__).resolve().parent.parent / "extender"


def test_no_function_is_longer_than_80_lines() -> None:
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_LINES:
                    long.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, "functions over 80 lines:\n" + "\n".join(long)
