"""libtorch (PyTorch's TorchScript runtime) vs tsrun, measured side by side in one run.

For each benchmark model: torch.jit.load time and forward latency (median of N, 2 threads, under
torch.inference_mode()), then tsrun's figures for the same archive and inputs from
`target/release/tsrun bench MODEL -i INPUT...` when that subcommand exists, else the output of the
criterion bench `cargo bench --bench models`. Absolute times drift between machines: read ratios.

    /work/main/.venv/bin/python benches/libtorch_side_by_side.py [-n 30] [--no-tsrun]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

warnings.filterwarnings("ignore")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TSRUN = os.path.join(ROOT, "target", "release", "tsrun")

import numpy as np  # noqa: E402
import torch  # noqa: E402


def bench_inputs():
    g = torch.Generator().manual_seed(0)
    return {
        "resnet18": [torch.randn(1, 3, 224, 224, generator=g)],
        "bert_bench": [torch.randint(0, 512, (1, 128), generator=g), torch.ones(1, 128, dtype=torch.int64)],
    }


def median_ms(fn, n, warmup=3):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def libtorch_figures(path, inputs, n):
    load_ms = median_ms(lambda: torch.jit.load(path), max(3, n // 5), warmup=1)
    module = torch.jit.load(path).eval()
    with torch.inference_mode():
        forward_ms = median_ms(lambda: module(*inputs), n)
    return load_ms, forward_ms


def has_bench_subcommand():
    if not os.path.exists(TSRUN):
        return False
    proc = subprocess.run([TSRUN, "bench", "--help"], capture_output=True, text=True)
    return proc.returncode == 0


def tsrun_bench(path, inputs, n, tmp):
    """Run `tsrun bench`; the inputs are written as .npy files. Returns its output text."""
    files = []
    for i, t in enumerate(inputs):
        f = os.path.join(tmp, f"input{i}.npy")
        np.save(f, t.numpy())
        files.append(f)
    cmd = [TSRUN, "bench", path]
    for f in files:
        cmd += ["-i", f]
    cmd += ["-n", str(n)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        return f"tsrun bench failed: {(proc.stderr or proc.stdout).strip()[-400:]}"
    return proc.stdout.strip()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("-n", type=int, default=30, help="timed iterations per model")
    parser.add_argument("--no-tsrun", action="store_true", help="only measure libtorch")
    args = parser.parse_args()
    torch.set_num_threads(2)

    rows = []
    for name, inputs in bench_inputs().items():
        path = os.path.join(ROOT, "fixtures", "models", f"{name}.pt")
        load_ms, forward_ms = libtorch_figures(path, inputs, args.n)
        rows.append((name, load_ms, forward_ms))

    tsrun_out = {}
    if not args.no_tsrun:
        subprocess.run(["cargo", "build", "--release", "--bin", "tsrun"], cwd=ROOT, check=True)
        if has_bench_subcommand():
            with tempfile.TemporaryDirectory() as tmp:
                for name, inputs in bench_inputs().items():
                    path = os.path.join(ROOT, "fixtures", "models", f"{name}.pt")
                    tsrun_out[name] = tsrun_bench(path, inputs, args.n, tmp)
        else:
            proc = subprocess.run(["cargo", "bench", "--bench", "models"], cwd=ROOT, capture_output=True, text=True)
            tsrun_out["criterion"] = proc.stdout.strip() if proc.returncode == 0 else \
                f"cargo bench --bench models failed: {proc.stderr.strip()[-400:]}"

    print(f"threads: {torch.get_num_threads()}, torch {torch.__version__}, median of {args.n}")
    print(f"{'model':14s} | {'libtorch load':>13s} | {'libtorch forward':>16s} | tsrun")
    print("-" * 80)
    for name, load_ms, forward_ms in rows:
        side = tsrun_out.get(name, "see below" if tsrun_out else "not measured")
        first, *rest = side.splitlines() or [""]
        print(f"{name:14s} | {load_ms:10.2f} ms | {forward_ms:13.2f} ms | {first}")
        for line in rest:
            print(f"{'':14s} | {'':13s} | {'':16s} | {line}")
    if "criterion" in tsrun_out:
        print("\ntsrun (cargo bench --bench models):\n" + tsrun_out["criterion"])


if __name__ == "__main__":
    sys.exit(main())
