"""Every public function and method of ``cudnn_port`` has typed parameters and a typed return.

An AST walk (nothing is imported): module-level functions and the methods of module-level classes whose names do
not start with ``_``; ``self``/``cls`` and ``*args``/``**kwargs`` may stay untyped.
"""
import ast
from pathlib import Path
from typing import Iterator, List, Tuple

PACKAGE = Path(__file__).resolve().parent.parent / "cudnn_port"


def public_functions(tree: ast.Module) -> Iterator[Tuple[str, ast.AST]]:
    """Yield (qualified name, def node) for the public functions and public methods of public classes."""
    funcs = (ast.FunctionDef, ast.AsyncFunctionDef)
    for node in tree.body:
        if isinstance(node, funcs) and not node.name.startswith("_"):
            yield node.name, node
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            for item in node.body:
                if isinstance(item, funcs) and not item.name.startswith("_"):
                    yield f"{node.name}.{item.name}", item


def untyped() -> Tuple[List[str], List[str], int]:
    """Return (untyped parameters, untyped returns, count of public parameters)."""
    params, returns, total = [], [], 0
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent)
        for name, node in public_functions(ast.parse(path.read_text(encoding="utf-8"))):
            args = node.args
            for i, arg in enumerate(args.posonlyargs + args.args + args.kwonlyargs):
                if i == 0 and arg.arg in ("self", "cls") and "." in name:
                    continue
                total += 1
                if arg.annotation is None:
                    params.append(f"{rel}:{node.lineno} {name}({arg.arg})")
            if node.returns is None:
                returns.append(f"{rel}:{node.lineno} {name}")
    return params, returns, total


def test_public_parameters_and_returns_are_typed():
    params, returns, _ = untyped()
    assert not params, "untyped public parameters:\n" + "\n".join(params)
    assert not returns, "public functions without a return type:\n" + "\n".join(returns)


if __name__ == "__main__":
    p, r, n = untyped()
    print("\n".join(p + r))
    print(f"{len(p)} of {n} public parameters untyped; {len(r)} public functions without a return type")
