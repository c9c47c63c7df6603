"""Imports inside functions are the exception: each one waits for a heavy or optional package, and says so.

``import cudnn_port`` and ``cudnn-port --help`` import no TensorFlow, Keras, onnx, h5py or LiteRT
(tests/test_tflite.py, tests/test_hardening.py), so a function that needs one imports it when called. Every other
import sits at the top of its module, where ``lint-imports`` (pyproject.toml) checks that it runs downhill. An AST
walk (nothing is imported): each import inside a function must load a heavy package, directly or through a module of
ours that loads one when it is imported, and a ``# lazy:`` comment above it in the function says which.
"""
import ast
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

PACKAGE = Path(__file__).resolve().parent.parent / "cudnn_port"
HEAVY = {"tensorflow", "keras", "onnx", "onnxruntime", "tf2onnx", "torch", "openvino", "ai_edge_litert",
         "flatbuffers", "h5py", "safetensors", "ml_dtypes"}  # ml_dtypes: optional, comes with TensorFlow and Keras
# pytest loads the plugin in every run of every project that installs cudnn-port; it loads cudnn_port only for a test
# that asks for a parity report
WAITS_FOR_A_CALLER = {("pytest_plugin.py", "cudnn_port.verify")}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def targets(module: str, node: ast.AST) -> List[str]:
    """The names ``node`` (an import statement in ``module``) loads: ours resolved to full names, others' roots."""
    if isinstance(node, ast.Import):
        return [a.name if a.name.startswith("cudnn_port") else a.name.split(".")[0] for a in node.names]
    if not node.level:
        return [node.module if node.module.startswith("cudnn_port") else node.module.split(".")[0]]
    base = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        base = base.rpartition(".")[0]
    target = f"{base}.{node.module}" if node.module else base
    return [target] + [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in MODULES]


def load_time_imports(tree: ast.Module) -> Iterator[ast.AST]:
    """The import statements that run when the module is imported: not in functions, not under TYPE_CHECKING."""
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        elif isinstance(node, (ast.If, ast.Try, ast.With, ast.ClassDef)):
            todo += [n for field in ("body", "orelse", "finalbody", "handlers") for n in getattr(node, field, [])]
        elif isinstance(node, ast.ExceptHandler):
            todo += node.body


def heavy_at_load() -> Dict[str, Set[str]]:
    """{module of ours: the heavy packages importing it loads}, through the modules of ours it imports at load."""
    direct = {}
    for name, path in MODULES.items():
        loaded = {t for node in load_time_imports(ast.parse(path.read_text())) for t in targets(name, node)}
        direct[name] = loaded
    found = {}
    for name in MODULES:
        seen, todo, heavy = set(), [name], set()
        while todo:
            current = todo.pop()
            if current in seen:
                continue
            seen.add(current)
            for t in direct.get(current, ()):
                if t in MODULES:
                    todo.append(t)
                elif t in HEAVY:
                    heavy.add(t)
        found[name] = heavy
    return found


def function_imports() -> Iterator[Tuple[str, str, ast.AST, List[str]]]:
    """(file, function, import statement, the function's source lines up to it) for every import in a function."""
    for name, path in MODULES.items():
        source = path.read_text()
        lines = source.splitlines()
        for func in ast.walk(ast.parse(source)):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            nested = {id(n) for inner in ast.walk(func) if inner is not func and
                      isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef)) for n in ast.walk(inner)}
            for node in ast.walk(func):
                if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in nested:
                    yield name, func.name, node, lines[func.lineno - 1:node.lineno]


def test_every_import_inside_a_function_says_why_it_waits():
    silent = [f"{module}.{func}: {ast.unparse(node)}" for module, func, node, before in function_imports()
              if not any("# lazy:" in line for line in before)]
    assert not silent, f"imports inside functions without a '# lazy:' reason: {silent}"


def test_every_import_inside_a_function_waits_for_a_heavy_package():
    heavy = heavy_at_load()
    light = []
    for module, func, node, _ in function_imports():
        names = targets(module, node)
        if (MODULES[module].name, names[0]) in WAITS_FOR_A_CALLER:
            continue
        if not any(n in HEAVY or heavy.get(n) for n in names):
            light.append(f"{module}.{func}: {ast.unparse(node)}")
    assert not light, f"imports inside functions that load nothing heavy (move them to the top): {light}"


def test_the_walk_sees_a_light_import_inside_a_function(tmp_path, monkeypatch):
    """The check itself: a function importing the standard library, or a module of ours that loads nothing heavy,
    is found."""
    fake = tmp_path / "cudnn_port"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "light.py").write_text("import os\n")
    (fake / "user.py").write_text("def f():\n    # lazy: nothing\n    from .light import os\n    import json\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    monkeypatch.setattr(sys.modules[__name__], "MODULES", {module_name(p): p for p in sorted(fake.rglob("*.py"))})
    found = [ast.unparse(node) for module, _, node, _ in function_imports()
             if not any(n in HEAVY or heavy_at_load().get(n) for n in targets(module, node))]
    assert found == ["from .light import os", "import json"], found
