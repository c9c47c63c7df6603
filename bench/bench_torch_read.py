"""Reading a PyTorch file: ``cudnn-port inspect`` of a ~100 MB state_dict against ``torch.load`` of the same file.

A 3-layer bidirectional nn.LSTM (hidden 640, input 320: about 25M float32 parameters, 94 MiB) and a Linear head,
saved with ``torch.save(model.state_dict())``, and the same dict saved in the pre-1.6 format. Each reader runs in a
fresh child process (its imports not counted: a warm-up read of a tiny file first), alternating, ``--rounds`` times;
the bench prints the median seconds of each and their ratio, and exits 1 when inspect takes more than
``--target`` times torch.load's time (2.0: what issue 60 asks) or its peak memory above the file's size plus its
baseline by more than 2.5x the file (one copy of the bytes beyond what the artifacts need is allowed).

    python bench/bench_torch_read.py [--rounds 3] [--hidden 640] [--json]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from fresh_process import parse_or_run_child, run_child, status_mib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def child(reader, path, tiny):
    """One read in this fresh process, after a warm-up read of ``tiny`` (imports and first-call costs)."""
    if reader == "torch":
        import torch

        def read(p):
            return torch.load(p, map_location="cpu", weights_only=True)
    else:
        from cudnn_port.inspection import inspect_source

        def read(p):
            return inspect_source(p)
    read(tiny)
    base = status_mib("VmRSS")
    start = time.perf_counter()
    read(path)
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "rss_growth_mib": status_mib("VmHWM") - base}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=640)
    parser.add_argument("--target", type=float, default=2.0)
    parser.add_argument("--json", action="store_true")
    args = parse_or_run_child(parser, child)
    import torch

    torch.manual_seed(0)
    model = torch.nn.ModuleDict({"lstm": torch.nn.LSTM(args.hidden // 2, args.hidden, 3, bidirectional=True),
                                 "head": torch.nn.Linear(2 * args.hidden, 10)})
    tmp = tempfile.mkdtemp()
    files = {"zip": os.path.join(tmp, "model.pt"), "legacy": os.path.join(tmp, "legacy.pt")}
    torch.save(model.state_dict(), files["zip"])
    torch.save(model.state_dict(), files["legacy"], _use_new_zipfile_serialization=False)
    tiny = os.path.join(tmp, "tiny.pt")
    torch.save(torch.nn.LSTM(3, 4).state_dict(), tiny)
    results, ok = {}, True
    for kind, path in files.items():
        times = {"torch": [], "inspect": []}
        growth = []
        for _ in range(args.rounds):
            for reader in ("torch", "inspect"):
                row = run_child(__file__, reader, path, tiny, env=dict(os.environ, PYTHONPATH=ROOT))
                times[reader].append(row["seconds"])
                if reader == "inspect":
                    growth.append(row["rss_growth_mib"])
        mib = os.path.getsize(path) / 2 ** 20
        med = {k: statistics.median(v) for k, v in times.items()}
        ratio = med["inspect"] / med["torch"]
        memory = max(growth) / mib
        met = ratio <= args.target and memory <= 2.5
        ok &= met
        results[kind] = {"file_mib": round(mib, 1), "torch_load_s": round(med["torch"], 3),
                         "inspect_s": round(med["inspect"], 3), "ratio": round(ratio, 2),
                         "inspect_peak_growth_x_file": round(memory, 2), "target_met": met}
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for kind, r in results.items():
            print(f"{kind:7s} {r['file_mib']:6.1f} MiB  torch.load {r['torch_load_s']:.3f} s  inspect "
                  f"{r['inspect_s']:.3f} s  ratio {r['ratio']:.2f} (target <= {args.target})  inspect's peak "
                  f"memory growth {r['inspect_peak_growth_x_file']:.2f}x the file  "
                  f"{'met' if r['target_met'] else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
