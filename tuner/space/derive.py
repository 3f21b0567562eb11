"""The `derive:` expression language of a search space: safe arithmetic over other params."""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping
from typing import Any


class DeriveError(ValueError):
    """An expression that is not allowed; the message quotes it and says what is."""


_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}


_FUNCTIONS: dict[str, Callable[..., Any]] = {"min": min, "max": max}


def expression_names(expression: str) -> list[str]:
    """Parse a derive expression and return the params it names; only arithmetic is allowed
    because the file is user input and must never run code."""
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError:
        raise DeriveError(f"{expression!r} is not an arithmetic expression") from None
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            if node.id not in _FUNCTIONS:
                names.append(node.id)
        elif isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS) or (
                node.keywords
            ):
                raise DeriveError(f"{expression!r}: only min(...) and max(...) may be called")
        elif isinstance(node, ast.BinOp):
            if type(node.op) not in _BINARY:
                raise DeriveError(f"{expression!r}: allowed operators are + - * / // %")
        elif isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, int | float):
                raise DeriveError(f"{expression!r}: only numbers may appear as constants")
        elif not isinstance(
            node, ast.Expression | ast.UnaryOp | ast.USub | ast.UAdd | ast.Load | ast.operator
        ):
            raise DeriveError(f"{expression!r}: only numbers, param names, + - * / // %, min, max")
    return names


def evaluate(expression: str, values: Mapping[str, object]) -> object:
    def walk(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return values[node.id]
        if isinstance(node, ast.UnaryOp):
            operand = walk(node.operand)
            return -operand if isinstance(node.op, ast.USub) else operand
        if isinstance(node, ast.BinOp):
            return _BINARY[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.Call):
            return _FUNCTIONS[node.func.id](*(walk(arg) for arg in node.args))  # type: ignore[attr-defined]
        raise ValueError(f"unexpected node {node!r}")  # expression_names rejected it already

    return walk(ast.parse(expression, mode="eval"))
