"""SIGINT and SIGTERM end every command with 130 / 143 and leave nothing: no OUT (or, for a signal that lands in the
publishing rename itself, a whole one that the line says is kept), no hidden ``.OUT.tmp-*``; also when the signal's
exception is swallowed by a TensorFlow C++ callback, when it lands in the temp folder's ``mkdir``, and when
TensorFlow is blocked inside a kernel (a watchdog ends the process within seconds). Every subprocess has a timeout,
so a regression fails instead of hanging."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from helpers import ROOT
from cudnn_port import signals

tf = pytest.importorskip("tensorflow")
SAMPLE = os.path.join(ROOT, "models", "tf1_bilstm", "model.ckpt")
ARGV = ["convert", SAMPLE, "--quiet", "--formats", "checkpoint"]


def leftovers(folder):
    return sorted(n for n in os.listdir(folder) if n.startswith("."))


def assert_clean_end(code, err, signum, out):
    """130 / 143 and one line; OUT absent (nothing was written) or whole (the signal landed in the rename)."""
    from cudnn_port.manifest import load_manifest
    from cudnn_port.verify import file_rows

    assert code == 128 + signum, (code, err)
    assert "Traceback" not in err and f"interrupted ({signal.Signals(signum).name})" in err, err
    assert leftovers(os.path.dirname(out)) == []
    if os.path.exists(out):
        assert "already complete and is kept" in err, err
        assert file_rows(out, load_manifest(out))[0]["passed"]
    else:
        assert "nothing was written" in err, err


def in_child(body, *args, timeout=300):
    """Run ``body`` (Python source) in a fresh interpreter and return the JSON of the last line it prints. A test
    that signals its own process does it there: a signal landing after cudnn-port's handlers are gone then ends or
    interrupts that child, never this test runner (pytest's SIGINT handler raises KeyboardInterrupt, under xdist the
    worker reports "received keyboard-interrupt" and the run fails; SIGTERM's default ends the worker)."""
    proc = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body), *map(str, args)], cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0 and proc.stdout.strip(), (proc.returncode, proc.stdout[-2000:], proc.stderr[-4000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


PRELUDE = textwrap.dedent("""
    import json, os, signal, sys, tempfile, threading, time
    from cudnn_port import cli, signals

    def ours():
        return sorted(t.name for t in threading.enumerate() if t.name.startswith("cudnn-port") and t.is_alive())

    def captured(run):
        \"\"\"run() with fd 2 in a file: (its result, what it wrote to stderr).\"\"\"
        sys.stderr.flush()
        saved = os.dup(2)
        with tempfile.TemporaryFile() as f:
            os.dup2(f.fileno(), 2)
            try:
                result = run()
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
                os.close(saved)
            f.seek(0)
            return result, f.read().decode(errors="replace")

    def counted(argv, at=None, signum=signal.SIGINT):
        \"\"\"cli.main(argv), counting Python and C calls made while its signal context is open; at call number
        ``at``, send ``signum`` to the process from inside that call. Returns (exit code, calls, stderr).\"\"\"
        calls = [0]

        def profile(frame, event, arg):
            if event in ("call", "c_call") and signals._State.depth:
                calls[0] += 1
                if calls[0] == at:
                    os.kill(os.getpid(), signum)

        def run():
            sys.setprofile(profile)
            try:
                return cli.main(argv)
            finally:
                sys.setprofile(None)
        code, err = captured(run)
        return code, calls[0], err
""")


@pytest.mark.slow
def test_a_signal_at_any_of_50_moments_of_a_conversion(tmp_path):
    """The fuzz run saw 4 of 34 signals ignored: raised inside a callback TensorFlow's C++ checkpoint reader makes,
    swallowed there, and never checked again (a nested context even reset the record). Here the watchdog is held
    off, so only the record and the check before publishing can end the run. Each moment is a call made while the
    CLI's signal context is open (its closing: test_a_signal_as_the_context_closes_is_reported_not_lost)."""
    runs = in_child("""
        import numpy as np
        signals.GRACE = 600.0
        argv, folder = json.loads(sys.argv[1]), sys.argv[2]
        for name in ("warm", "count"):  # the first run imports TensorFlow: the second counts the calls of each run
            code, total, err = counted(argv[:2] + [os.path.join(folder, name)] + argv[2:])
            assert code == 0, err
        runs = []
        rng = np.random.default_rng(38)
        for i, at in enumerate(sorted(rng.integers(1, total, 50))):
            signum = (signal.SIGINT, signal.SIGTERM)[i % 2]
            out = os.path.join(folder, f"run{i}", "out")
            os.mkdir(os.path.dirname(out))
            code, _, err = counted(argv[:2] + [out] + argv[2:], at=int(at), signum=signum)
            runs.append([code, err, int(signum), out, ours()])
        print(json.dumps(runs))
    """, json.dumps(ARGV), tmp_path, timeout=900)
    assert len(runs) == 50
    for code, err, signum, out, threads in runs:
        assert_clean_end(code, err, signum, out)
        assert threads == [], threads


def test_a_signal_during_the_temp_folders_mkdir_leaves_no_folder(tmp_path):
    code, err, threads = in_child("""
        real = os.mkdir

        def mkdir(path, *args, **kwargs):
            real(path, *args, **kwargs)
            if os.path.basename(path).startswith(".out.tmp-"):
                os.kill(os.getpid(), signal.SIGTERM)

        os.mkdir = mkdir
        argv = json.loads(sys.argv[1])
        code, err = captured(lambda: cli.main(argv[:2] + [sys.argv[2]] + argv[2:]))
        print(json.dumps([code, err, ours()]))
    """, json.dumps(ARGV), tmp_path / "out")
    assert_clean_end(code, err, signal.SIGTERM, str(tmp_path / "out"))
    assert threads == []  # the watchdog and the stderr filter ended with the command


def test_a_signal_as_the_context_closes_is_reported_not_lost(tmp_path):
    """A SIGTERM that lands while the CLI's context closes (its handler recording, no longer raising) ends the
    command with 143 and the line saying the complete OUT is kept, rather than exit 0 or the process's own
    handlers."""
    code, err, threads = in_child("""
        real = signals._close

        def close(*args):
            os.kill(os.getpid(), signal.SIGTERM)
            return real(*args)

        signals._close = close
        argv = json.loads(sys.argv[1])
        code, err = captured(lambda: cli.main(argv[:2] + [sys.argv[2]] + argv[2:]))
        time.sleep(0.3)
        print(json.dumps([code, err, ours()]))
    """, json.dumps(ARGV), tmp_path / "out")
    assert_clean_end(code, err, signal.SIGTERM, str(tmp_path / "out"))
    assert (tmp_path / "out").exists() and threads == []


def test_a_nested_context_keeps_the_record():
    raised, after = in_child("""
        with signals.signals_interrupt():
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(1)
            except KeyboardInterrupt:
                pass  # what a C++ callback does with it
            with signals.signals_interrupt():
                pass
            try:
                signals.check()
                raised = None
            except signals.Interrupted as e:
                raised = e.signum
        print(json.dumps([raised, signals.raised_signal()]))  # the record stays until the next outermost context
    """)
    assert raised == after == signal.SIGINT


def test_no_timer_or_thread_outlives_the_context():
    """An Interrupted raised inside a destructor is sent again 50 ms later from a timer thread; a context that ended
    sooner let that timer send the signal to the handlers the process had before (under pytest, a KeyboardInterrupt
    in the worker, or the end of it for SIGTERM). Now the timer is cancelled and joined, and the watchdog joined,
    before the context's handlers go; while the context is open, the resend still raises."""
    result = in_child("""
        import types

        def unraisable(signum):
            sys.unraisablehook(types.SimpleNamespace(exc_type=signals.Interrupted, err_msg=None, object=None,
                                                     exc_value=signals.Interrupted(signum), exc_traceback=None))

        result = {}
        for signum in (signal.SIGINT, signal.SIGTERM):
            with signals.signals_interrupt():
                unraisable(signum)  # the context closes at once, well within the timer's 50 ms
            result[f"left_{signum}"] = ours()
            time.sleep(0.3)  # a resend sent now would end this child (SIGTERM) or raise here (SIGINT)
        try:
            with signals.signals_interrupt():
                unraisable(signal.SIGTERM)
                time.sleep(5)  # the resend lands here
            result["raised"] = None
        except signals.Interrupted as e:
            result["raised"] = e.signum
        result["left"] = ours()
        print(json.dumps(result))
    """)
    assert result == {f"left_{int(signal.SIGINT)}": [], f"left_{int(signal.SIGTERM)}": [], "raised": signal.SIGTERM,
                      "left": []}


def test_library_calls_leave_signal_handlers_alone(tmp_path):
    from cudnn_port import convert

    before = {s: signal.getsignal(s) for s in signals.SIGNALS}
    seen = []
    convert(SAMPLE, tmp_path / "out", formats=["checkpoint"],
            progress=lambda m: seen.append({s: signal.getsignal(s) for s in signals.SIGNALS}))
    assert seen and all(handlers == before for handlers in seen)


def _child(script, *args):
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), *map(str, args)], cwd=ROOT,
                            env=dict(os.environ, PYTHONPATH=ROOT), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


HANG = """
    import os, sys
    from cudnn_port import cli, outdir

    def run(args, progress):
        import tensorflow as tf
        tf.compat.v1.disable_eager_execution()
        dequeue = tf.compat.v1.FIFOQueue(1, tf.float32).dequeue()  # an empty queue: blocks in C++ for ever

        def write(tmp):
            open(os.path.join(tmp, "partial"), "w").close()
            print("blocked", flush=True)
            tf.compat.v1.Session().run(dequeue)
            return {}

        outdir.OutputFolder(sys.argv[1]).build(write)
        return 0, {}, "the queue gave something"

    cli.run = run
    os._exit(cli.main(["inspect", "x"]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_command_blocked_in_a_tensorflow_kernel_ends_within_seconds(tmp_path, signum):
    """A dequeue from an empty queue hung verify and convert; SIGINT and SIGTERM did nothing."""
    proc = _child(HANG, tmp_path / "out")
    try:
        assert proc.stdout.readline().strip() == "blocked"
        assert leftovers(tmp_path)  # the temp folder exists while it hangs
        start = time.monotonic()
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert time.monotonic() - start < signals.GRACE + 5
    assert_clean_end(proc.returncode, err, signum, str(tmp_path / "out"))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
def test_a_real_signal_at_a_random_delay(tmp_path, seed):
    """Sent a random time after the command's first progress line (before it, Python is still starting up)."""
    rng = np.random.default_rng(seed)
    signum, delay = (signal.SIGINT, signal.SIGTERM)[seed % 2], float(rng.uniform(0.0, 6.0))
    proc = subprocess.Popen([sys.executable, "-m", "cudnn_port.cli", "convert", SAMPLE, "out"],
                            cwd=tmp_path, env=dict(os.environ, PYTHONPATH=ROOT), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stderr.readline()
        time.sleep(delay)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
        err = first + err
    finally:
        proc.kill()
    if proc.returncode == 0:  # finished before the signal came
        assert (tmp_path / "out").exists() and leftovers(tmp_path) == []
    else:
        assert_clean_end(proc.returncode, err, signum, str(tmp_path / "out"))
