"""The one way a registry finds its entries: each module of a package that declares one (``FORMAT`` in
:mod:`cudnn_port.formats`, ``SOURCE`` in :mod:`cudnn_port.readers`), imported once, in ``order``."""
import importlib
import pkgutil
from typing import Any, Dict, Iterable


def declaring(package: str, path: Iterable[str], attribute: str, kind: type) -> Dict[str, Any]:
    """{module's full name: its entry} of every module of ``package`` (found on ``path``) whose ``attribute`` is a
    ``kind`` (the modules import-linter's ``formats-apart`` contract keeps apart, tests/test_registry.py)."""
    found = {}
    for module in pkgutil.iter_modules(path):
        name = f"{package}.{module.name}"
        entry = getattr(importlib.import_module(name), attribute, None)
        if isinstance(entry, kind):
            found[name] = entry
    return found


def declared(package: str, path: Iterable[str], attribute: str, kind: type, key: str) -> Dict[str, Any]:
    """{entry's ``key``: entry} of every module of ``package`` (found on ``path``) whose ``attribute`` is a
    ``kind``, sorted by (``order``, key); two modules declaring one key are a programming error."""
    found = list(declaring(package, path, attribute, kind).values())
    keys = [getattr(e, key) for e in found]
    if len(set(keys)) != len(keys):
        raise RuntimeError(f"two modules of {package} declare the same {key}: {sorted(keys)}")
    return {getattr(e, key): e for e in sorted(found, key=lambda e: (e.order, getattr(e, key)))}


def insert(registry: Dict[str, Any], entry: Any, key: str, what: str) -> None:
    """Put ``entry`` into ``registry`` (as :func:`declared` built it) in its ``order``, as its module would; an entry
    whose ``key`` is registered already is refused (``what`` names the kind of entry in the message)."""
    name = getattr(entry, key)
    if name in registry:
        raise RuntimeError(f"a {what} called {name!r} is registered already")
    every = sorted([*registry.values(), entry], key=lambda e: (e.order, getattr(e, key)))
    registry.clear()
    registry.update((getattr(e, key), e) for e in every)
