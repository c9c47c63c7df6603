"""What the benchmarks that run each job in a fresh child process share (bench_convert.py, bench_torch_read.py):
the child's memory figures, read from ``/proc/self/status``, and the parent's run of the script as that child."""
import argparse
import json
import subprocess
import sys


def status_mib(field):
    """``field`` of ``/proc/self/status`` in MiB: VmRSS (now) or VmHWM (the peak of this process image; unlike
    ru_maxrss it is not inherited across exec)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024


def run_child(script, *args, env=None):
    """``python script --child ARGS`` in a fresh process: the JSON of its last line of output. Exits naming the job
    (the first of ``args``) and the end of its error output where the child fails."""
    done = subprocess.run([sys.executable, script, "--child", *args], capture_output=True, text=True, env=env)
    if done.returncode:
        sys.exit(f"bench child {args[0]} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def parse_or_run_child(parser, child):
    """``parser``'s arguments, with a hidden ``--child A B C`` added: where it is given (by :func:`run_child`), the
    job runs here, ``child(A, B, C)``, and the process exits."""
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        sys.exit(child(*args.child))
    return args
