"""libtorch vs tsrun on torchvision zoo models (float, or `quantized_NAME`), side by side in ONE run.

For each torchvision classification model named (scripted, torch.manual_seed(0), eval mode, input
1x3x224x224 from a seeded generator) and each thread count T, the script alternates libtorch
(torch.jit.load, torch.inference_mode(), torch.set_num_threads(T), median over ~--seconds) and
`tsrun bench --json --threads T` on the same archive and input, and prints the medians and
tsrun/libtorch. With --before PATH a second tsrun binary (say, the main branch's build) is timed
in the same alternation, so a change's before/after ratios come from one run. With --rounds K the whole alternation runs K times and each figure is the median
over the rounds. Archives and inputs go to a cache directory outside git (--cache, default
$TSRUN_ZOO_BENCH_CACHE or /tmp/tsrun-zoo-bench). Timing and formatting come from
libtorch_side_by_side.py. Run it under the shared CPU lock:

    flock /tmp/cpu.lock /work/main/.venv/bin/python benches/zoo_side_by_side.py [--threads 1 2]
        [--models efficientnet_b0 densenet121] [--seconds 1.5] [--rounds 1] [--no-build]
        [--tsrun target/release/tsrun] [--before /work/main/target/release/tsrun]
"""
import argparse
import os
import statistics
import subprocess
import sys
import warnings

warnings.filterwarnings("ignore")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import libtorch_side_by_side as lsbs  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

DEFAULT_MODELS = [
    "resnet50", "efficientnet_b0", "efficientnet_b1", "densenet121", "convnext_tiny", "regnet_y_400mf",
    "mnasnet1_0", "mobilenet_v2", "shufflenet_v2_x1_0", "squeezenet1_1", "vit_b_32", "swin_t",
]


QUANTIZED = "quantized_"


def archive_for(name, cache):
    """The scripted archive of torchvision's `name` (random init, seed 0, eval), built once.

    `quantized_NAME` is torchvision's quantizable NAME (resnet18, resnet50, mobilenet_v2,
    mobilenet_v3_large, googlenet, shufflenet_v2_x1_0, ...) fused, prepared with PyTorch's
    default engine's qconfig (x86), calibrated on 8 random 224x224 batches and converted:
    eager post-training static quantization as users ship it, run by both sides under that
    engine (tsrun's default `--quantized-engine native`)."""
    path = os.path.join(cache, f"{name}.pt")
    if not os.path.exists(path):
        import torchvision
        torch.manual_seed(0)
        if name.startswith(QUANTIZED):
            from torchvision.models import quantization as tvq
            base = name[len(QUANTIZED):]
            kw = {"aux_logits": False, "init_weights": True} if base in ("googlenet", "inception_v3") else {}
            model = getattr(tvq, base)(weights=None, quantize=False, **kw).eval()
            model.fuse_model()
            model.qconfig = torch.ao.quantization.get_default_qconfig(torch.backends.quantized.engine)
            torch.ao.quantization.prepare(model, inplace=True)
            with torch.no_grad():
                for _ in range(8):
                    model(torch.randn(2, 3, 224, 224))
            torch.ao.quantization.convert(model, inplace=True)
        else:
            model = torchvision.models.get_model(name).eval()
        torch.jit.save(torch.jit.script(model), path)
    return path


def input_file_for(name, cache):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 3, 224, 224, generator=g)
    path = os.path.join(cache, f"{name}.input0.npy")
    np.save(path, x.numpy())
    return x, path


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--models", nargs="+", default=DEFAULT_MODELS)
    parser.add_argument("--seconds", type=float, default=1.5, help="time per measurement")
    parser.add_argument("--rounds", type=int, default=1,
                        help="repeat the whole alternation; report medians over the rounds")
    parser.add_argument("--cache", default=os.environ.get("TSRUN_ZOO_BENCH_CACHE", "/tmp/tsrun-zoo-bench"))
    parser.add_argument("--tsrun", default=os.path.join(lsbs.ROOT, "target", "release", "tsrun"))
    parser.add_argument("--before", help="a second tsrun binary timed alongside (before/after columns)")
    parser.add_argument("--no-build", action="store_true", help="do not run cargo build --release first")
    args = parser.parse_args()
    os.makedirs(args.cache, exist_ok=True)
    if not args.no_build:
        subprocess.run(["cargo", "build", "--release", "--bin", "tsrun"], cwd=lsbs.ROOT, check=True)

    print(f"machine: {lsbs.machine()}")
    print(f"torch {torch.__version__}, one run, medians, ~{args.seconds:g} s per measurement, "
          f"{max(1, args.rounds)} round(s)")

    prepared = {}
    for name in args.models:
        x, path = input_file_for(name, args.cache)
        prepared[name] = ([x], archive_for(name, args.cache), [path])

    iterations = {}
    results = {}
    for _ in range(max(1, args.rounds)):
        for threads in args.threads:
            for name in args.models:
                inputs, archive, files = prepared[name]
                key = (threads, name)
                if key not in iterations:
                    torch.set_num_threads(threads)
                    module = torch.jit.load(archive).eval()
                    with torch.inference_mode():
                        iterations[key] = lsbs.iterations_for(lambda: module(*inputs), args.seconds)
                    del module
                n = iterations[key]
                lt, _first = lsbs.libtorch_median(archive, inputs, threads, n)
                ts = lsbs.tsrun_report(args.tsrun, archive, files, threads, n)
                before = lsbs.tsrun_report(args.before, archive, files, threads, n) if args.before else None
                results.setdefault(key, []).append((lt, ts, before))

    head = f"{'T':>1} | {'model':20s} | {'libtorch':>9s} | {'tsrun':>9s} | {'ts/lt':>5s}"
    if args.before:
        head += f" | {'before':>9s} | {'bef/lt':>6s}"
    head += " | n"
    print(head)
    print("-" * len(head))

    def median_of(reports):
        failed = [r for r in reports if "error" in r]
        return (None, failed[0]["error"]) if failed else (statistics.median(r["median_s"] for r in reports), None)

    for (threads, name), rounds in results.items():
        lt = statistics.median(r[0] for r in rounds)
        n = iterations[(threads, name)]
        ts, error = median_of([r[1] for r in rounds])
        if error is not None:
            print(f"{threads} | {name:20s} | {lsbs.fmt(lt):>9s} | tsrun failed: {error}")
            continue
        line = f"{threads} | {name:20s} | {lsbs.fmt(lt):>9s} | {lsbs.fmt(ts):>9s} | {ts / lt:5.2f}"
        if args.before:
            bt, error = median_of([r[2] for r in rounds])
            line += " | before failed" if error is not None else f" | {lsbs.fmt(bt):>9s} | {bt / lt:6.2f}"
        print(f"{line} | {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
