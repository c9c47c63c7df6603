"""Progress lines: every library call that works for a while takes ``progress(message)``, or None for silence."""
from typing import Callable, Optional

Progress = Callable[[str], None]


def say_to(progress: Optional[Progress]) -> Progress:
    """``progress`` itself, or (None) a callable that says nothing."""
    return progress or _silent


def _silent(message: str) -> None:
    """Says nothing."""
