"""SIGINT and SIGTERM: end a command within seconds, with nothing half-written left behind.

Handlers are process-wide, so only the CLI installs them (:func:`signals_interrupt`, which a library user may also
use on purpose); library calls only hold signals back around the steps that must not be cut (:func:`signals_held`),
check before publishing (:func:`check`) and register their temporary folders (:func:`remove_on_exit`).

Inside :func:`signals_interrupt`:

- a signal is recorded at once (:func:`raised_signal`) and raised as :class:`Interrupted` in the main thread. A
  library may swallow that exception (TensorFlow's C++ checkpoint reader calls back into Python and drops what the
  callback raised) or turn it into its own error: the record stays until the outermost context ends (a nested one
  does not reset it), and :func:`check` raises it again before OUT is published;
- a watchdog thread is woken by the signal itself (``signal.set_wakeup_fd``), which works while the main thread is
  blocked inside a C++ kernel and cannot run Python. If the main thread has not left the context within
  :data:`GRACE` seconds (and no step that must not be cut is running), the watchdog removes every registered
  temporary folder, says the command's one line and ends the process with ``os._exit(128 + signum)``;
- when the context ends, the first thing it does (before any call a signal could interrupt) is to stop raising: a
  signal from then on is recorded only (the CLI still ends with 130 / 143, :func:`raised_signal`). Then the resend
  timers of :func:`_unraisable` are cancelled and joined (a resend sends only while the context is open), the
  watchdog is woken and joined, a signal sent to the main thread is let in while the handler still records, and only
  then do the handlers the process had come back: no thread of ours outlives the context, and no signal of ours
  reaches the process's own handlers (a test runner's KeyboardInterrupt, or SIGTERM's default, which ends it).
"""
import contextlib
import os
import shutil
import signal
import sys
import threading
import time
from typing import Callable, Iterator, Optional

GRACE = 3.0  # seconds the main thread has to unwind after a signal before the watchdog ends the process
HELD_LIMIT = 30.0  # at most this much longer while a step that must not be cut (a rename) runs
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived. ``published``: OUT had already been put in place, whole, when it did."""

    def __init__(self, signum, published=False):
        super().__init__(signal.Signals(signum).name)
        self.signum, self.published = signum, published


class _State:
    depth = 0  # 1 while a signals_interrupt context is open (its handlers in place); 0 from the moment it closes
    held = 0  # > 0 while a step that must not be cut runs
    pending = None  # a signal that arrived while held
    raised = None  # the first signal of the outermost context, kept even if a library swallowed the exception
    published = False  # OUT was put in place during this context
    cleanup: set = set()  # temporary folders the watchdog removes before it ends the process
    resends: list = []  # the timers of :func:`_unraisable`, cancelled and joined when the context closes
    lock = threading.Lock()  # a resend checks that the context is open and sends, as one step


def _on_signal(signum, frame):
    if _State.raised is None:
        _State.raised = signum
    if not _State.depth:  # the context is closing: recorded, never raised into its cleanup
        return
    if _State.held:
        _State.pending = signum
        return
    raise Interrupted(signum, _State.published)  # after the publishing rename, OUT is whole and kept


def raised_signal() -> Optional[int]:
    """The signal received inside the current :func:`signals_interrupt`, or None. A library may turn the
    :class:`Interrupted` into its own error (TensorFlow's import into "ImportError: initialization failed") or
    swallow it: this still knows the run was interrupted."""
    return _State.raised


def was_published() -> bool:
    """Whether OUT was put in place during the current (or last) :func:`signals_interrupt` context."""
    return _State.published


def check(published: bool = False) -> None:
    """Inside :func:`signals_interrupt`: raise :class:`Interrupted` if a signal was received in it, whatever became of
    its exception. Outside (a library call without the CLI's handlers): nothing."""
    if _State.depth and _State.raised is not None:
        raise Interrupted(_State.raised, published)


def remove_on_exit(path: str) -> None:
    """Have the watchdog remove ``path`` (a temporary folder or file) if it has to end the process."""
    _State.cleanup.add(os.fspath(path))


def forget(path: str) -> None:
    """``path`` was removed or published: the watchdog leaves it alone."""
    _State.cleanup.discard(os.fspath(path))


def remove_tree(path: str, tries: int = 40) -> None:
    """Remove the folder or file ``path``, trying again while it is still there: a kernel the signal could not stop
    may still be writing into it, and a file made while :func:`shutil.rmtree` runs makes its last ``rmdir`` fail."""
    for _ in range(tries):
        if not os.path.lexists(path):
            return
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.remove(path)
        if os.path.lexists(path):
            time.sleep(0.05)


def mark_published() -> None:
    """OUT is in place: an interrupt from now on keeps it (and says so)."""
    _State.published = True


def _unraisable(hook):
    """A ``sys.unraisablehook``: an :class:`Interrupted` raised inside a destructor (``__del__``, where Python
    cannot propagate it) is raised again: the signal is sent once more to the main thread, 50 ms later from a timer
    thread (:func:`_resend`), so that it lands after this hook has returned. Once a signal has been raised, other
    destructor errors are dropped: they come from objects the interrupt cut short. Anything else goes to ``hook``."""
    def handle(unraisable):
        if isinstance(unraisable.exc_value, Interrupted):
            resend = threading.Timer(0.05, _resend, (unraisable.exc_value.signum,))
            resend.name, resend.daemon = "cudnn-port-resend", True
            with _State.lock:
                _State.resends.append(resend)
            resend.start()
        elif _State.raised is None:
            hook(unraisable)
    return handle


def _resend(signum: int) -> None:
    """Send ``signum`` to the main thread, only while the context is open: the context's close takes the lock and
    sets ``depth`` to 0 first, so a resend either sends before it (and the close lets the signal in while the handler
    records) or never. Sent to the main thread itself (``pthread_kill``), so that its next system call takes it."""
    with _State.lock:
        if _State.depth:
            if hasattr(signal, "pthread_kill"):
                main = threading.main_thread().ident
                assert main is not None  # the main thread has started: it runs this process
                signal.pthread_kill(main, signum)
            else:  # Windows: no threads to aim at
                os.kill(os.getpid(), signum)


def _default_exit(signum: int, published: bool) -> int:
    what = "OUT was already complete and is kept" if published else "nothing was written"
    os.write(2, f"cudnn-port: interrupted ({signal.Signals(signum).name}); {what}\n".encode())
    return 128 + signum


def _watch(read_fd, done, on_timeout):
    """The watchdog: wait for a signal byte; give the main thread GRACE seconds to unwind; then end the process."""
    with open(read_fd, "rb", buffering=0) as pipe:
        while True:
            data = pipe.read(64)
            if not data or done.is_set():
                return
            signum = next((b for b in data if b in SIGNALS), None)
            if signum is not None:
                break
        if done.wait(GRACE):
            return
        deadline = time.monotonic() + HELD_LIMIT
        while _State.held and time.monotonic() < deadline and not done.is_set():
            time.sleep(0.05)
        if done.is_set():
            return
        for path in list(_State.cleanup):
            remove_tree(path)
        code = 128 + signum
        try:
            code = on_timeout(signum, _State.published)
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            time.sleep(0.3)  # let a stderr filter thread forward the line
            os._exit(code)


@contextlib.contextmanager
def signals_interrupt(on_timeout: Optional[Callable[[int, bool], int]] = None) -> Iterator[None]:
    """While inside, SIGINT and SIGTERM raise :class:`Interrupted` (SIGTERM would otherwise kill the process with
    no cleanup), also when the signal lands inside a destructor, and a watchdog ends the process if the main thread
    does not unwind within :data:`GRACE` seconds (``on_timeout(signum, published)`` says the line and returns the
    exit code; by default the CLI's line, exit 128 + signum). Nested uses are one. Only the main thread can set
    handlers; elsewhere this does nothing. On leaving, nothing it started is left running (:func:`_close`)."""
    if threading.current_thread() is not threading.main_thread() or _State.depth:
        yield
        return
    _State.raised, _State.pending, _State.published = None, None, False
    done = threading.Event()  # the main thread left this context
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    previous, watchdog, previous_hook = {}, None, sys.unraisablehook
    old_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    try:
        for s in SIGNALS:
            previous[s] = signal.signal(s, _on_signal)
        watchdog = threading.Thread(target=_watch, args=(read_fd, done, on_timeout or _default_exit),
                                    name="cudnn-port-signals", daemon=True)
        watchdog.start()
        sys.unraisablehook = _unraisable(previous_hook)
        _State.depth = 1  # a signal while the handlers went in was recorded only: check() and the CLI still see it
        yield
    finally:
        _State.depth = 0  # first, before any call: from here a signal is recorded, never raised into this cleanup
        _close(done, watchdog, write_fd, previous, old_fd, previous_hook)
        if watchdog is None:  # it never started: its end of the pipe is still ours
            os.close(read_fd)


def _close(done, watchdog, write_fd, previous, old_fd, previous_hook) -> None:
    """End a :func:`signals_interrupt` context (``depth`` already 0, so its handler records and never raises): stop
    and join every thread it started, let a signal already sent to the main thread in, then give the process its
    handlers back."""
    done.set()
    sys.unraisablehook = previous_hook
    with _State.lock:  # no resend sends from here on
        resends, _State.resends = _State.resends, []
    for timer in resends:
        timer.cancel()
        timer.join()
    try:
        os.write(write_fd, b"\0")  # wake the watchdog so that it sees done and stops
    except OSError:
        pass
    if watchdog is not None:
        watchdog.join()  # it returns within 50 ms once done is set
    if hasattr(signal, "pthread_sigmask"):  # a system call: a signal a resend sent to the main thread is delivered
        signal.pthread_sigmask(signal.SIG_BLOCK, [])  # on its return, while our handler records
    for s, handler in previous.items():
        signal.signal(s, handler)  # runs the handler of any signal still pending first: ours, recording
    signal.set_wakeup_fd(old_fd)
    os.close(write_fd)
    _State.cleanup.clear()


@contextlib.contextmanager
def signals_held(published: bool = False, deliver: bool = True) -> Iterator[None]:
    """Hold SIGINT / SIGTERM back while inside; one that arrived is raised on leaving normally (``deliver``), not
    over an exception already on its way."""
    _State.held += 1
    try:
        yield
    finally:
        _State.held -= 1
    if deliver and not _State.held and _State.pending is not None:
        signum, _State.pending = _State.pending, None
        raise Interrupted(signum, published)
