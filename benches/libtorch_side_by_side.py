"""libtorch vs ONNX Runtime vs tsrun, measured side by side in ONE run.

For each of the five reference models of issue 9 and each thread count T (1 and 2), the script
alternates: libtorch (torch.jit.load, torch.inference_mode(), torch.set_num_threads(T)), ONNX Runtime
(the model exported with torch.onnx.export(torch.jit.load(archive), inputs, dynamo=False), run with
intra_op_num_threads=T, inter_op_num_threads=1) and `tsrun bench --json --threads T` on the same
archive and inputs. It prints medians and the ratios tsrun/libtorch and tsrun/ORT, plus tsrun's
first call / median and peak RSS / archive size, and for comparison libtorch's and ONNX Runtime's own
first call / median (their first call after torch.jit.load / session creation, in the same process:
libtorch's profiling executor optimizes on its first calls). Absolute times drift between machines:
read ratios.
With --rounds K the whole alternation (every model, every thread count) runs K times and each
figure is the median over the rounds (first call / median: the median of each round's ratio, each
round's tsrun being a fresh process; peak RSS: the largest), so a burst of load on a shared host
skews one round, not the table.

Models that are not committed fixtures are built (torch.manual_seed(0), eval mode) into a cache
directory outside git (--cache, default $TSRUN_BENCH_CACHE or /tmp/tsrun-bench).

    /work/main/.venv/bin/python benches/libtorch_side_by_side.py [--threads 1 2] [--models mlp lstm]
        [--seconds 1.5] [--rounds 1] [--no-build] [--tsrun target/release/tsrun]
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings

warnings.filterwarnings("ignore")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "fixtures", "models")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import Tensor, nn  # noqa: E402


# ---------------------------------------------------------------------------------------------
# The reference models (issue 9): torch.manual_seed(0), eval mode, saved with torch.jit.save.

class LSTMTagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(1000, 64)
        self.lstm = nn.LSTM(64, 128, batch_first=True)
        self.out = nn.Linear(128, 20)

    def forward(self, tokens: Tensor) -> Tensor:
        h, _ = self.lstm(self.embedding(tokens))
        return torch.log_softmax(self.out(h), dim=-1)


class BertLastHidden(nn.Module):
    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids):
        return self.bert(input_ids)[0]


def build_resnet18(path):
    import torchvision
    torch.manual_seed(0)
    torch.jit.save(torch.jit.script(torchvision.models.resnet18().eval()), path)


def build_mobilenet_v3_small(path):
    import torchvision
    torch.manual_seed(0)
    torch.jit.save(torch.jit.script(torchvision.models.mobilenet_v3_small().eval()), path)


def build_bert(path):
    import transformers
    torch.manual_seed(0)
    cfg = transformers.BertConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                                  intermediate_size=1024, vocab_size=30522, torchscript=True)
    m = BertLastHidden(transformers.BertModel(cfg)).eval()
    ids = torch.randint(0, 30522, (1, 128))
    torch.jit.save(torch.jit.trace(m, (ids,), strict=False), path)


def build_mlp(path):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))
    torch.jit.save(torch.jit.script(m.eval()), path)


def build_lstm(path):
    torch.manual_seed(0)
    torch.jit.save(torch.jit.script(LSTMTagger().eval()), path)


def inputs_for(name):
    g = torch.Generator().manual_seed(0)
    if name in ("resnet18", "mobilenet_v3_small"):
        return [torch.randn(1, 3, 224, 224, generator=g)]
    if name == "bert":
        return [torch.randint(0, 30522, (1, 128), generator=g)]
    if name == "mlp":
        return [torch.randn(1, 64, generator=g)]
    if name == "lstm":
        return [torch.randint(0, 1000, (1, 64), generator=g)]
    raise ValueError(name)


# name -> (label, committed fixture or None, builder)
MODELS = {
    "resnet18": ("torchvision resnet18, 1x3x224x224, scripted", "resnet18.pt", build_resnet18),
    "mobilenet_v3_small": ("torchvision mobilenet_v3_small, scripted", "mobilenet_v3_small.pt",
                           build_mobilenet_v3_small),
    "bert": ("BERT 4 layers, hidden 256, seq 128, traced", None, build_bert),
    "mlp": ("MLP 64-128-128-10, batch 1, scripted", None, build_mlp),
    "lstm": ("LSTM tagger (emb 64, hidden 128, seq 64), scripted", None, build_lstm),
}


def archive_for(name, cache):
    _, fixture, build = MODELS[name]
    if fixture is not None and os.path.exists(os.path.join(FIXTURES, fixture)):
        return os.path.join(FIXTURES, fixture)
    path = os.path.join(cache, f"{name}.pt")
    if not os.path.exists(path):
        build(path)
    return path


def onnx_for(name, archive, inputs, cache):
    path = os.path.join(cache, f"{name}.onnx")
    if not os.path.exists(path) or os.path.getmtime(path) < os.path.getmtime(archive):
        torch.onnx.export(torch.jit.load(archive), tuple(inputs), path, dynamo=False)
    return path


# ---------------------------------------------------------------------------------------------
# Timing

def timed(fn, n):
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def iterations_for(fn, seconds):
    """Calls that fill about `seconds`, estimated from a few warm calls (10..5000)."""
    for _ in range(3):
        fn()
    est = timed(fn, 5)
    return max(10, min(5000, int(seconds / max(est, 1e-7))))


def first_then_median(fn, n):
    """(first call, median of n calls after 3 warm-up calls) of `fn`."""
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    for _ in range(3):
        fn()
    return timed(fn, n), first


def libtorch_median(archive, inputs, threads, n):
    torch.set_num_threads(threads)
    module = torch.jit.load(archive).eval()
    with torch.inference_mode():
        return first_then_median(lambda: module(*inputs), n)


def ort_median(onnx_path, inputs, threads, n):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"])
    feed = {i.name: t.numpy() for i, t in zip(sess.get_inputs(), inputs)}
    return first_then_median(lambda: sess.run(None, feed), n)


def tsrun_report(tsrun, archive, input_files, threads, n):
    cmd = [tsrun, "bench", archive, "--json", "--threads", str(threads), "-n", str(n)]
    for f in input_files:
        cmd += ["-i", f]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        return {"error": str(e)}
    if proc.returncode != 0:
        return {"error": (proc.stderr or proc.stdout).strip()[-300:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def fmt(secs):
    """Three significant digits in a unit that keeps the number in [1, 1000)."""
    if secs is None:
        return "-"
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        if secs >= scale * 0.9995:
            v = secs / scale
            break
    else:
        v, unit = secs * 1e9, "ns"
    digits = 0 if v >= 99.95 else 1 if v >= 9.995 else 2
    return f"{v:.{digits}f} {unit}"


def machine():
    cpu = platform.processor() or "?"
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
        cpu = next(line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name"))
        have = set(next(line for line in info.splitlines() if line.startswith("flags")).split())
        flags = " ".join(x for x in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile") if x in have)
    except (OSError, StopIteration):
        pass
    return f"{cpu} ({os.cpu_count()} logical CPUs; {flags})"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--seconds", type=float, default=1.5, help="time per measurement")
    parser.add_argument("--rounds", type=int, default=1,
                        help="repeat the whole alternation; report medians over the rounds")
    parser.add_argument("--cache", default=os.environ.get("TSRUN_BENCH_CACHE", "/tmp/tsrun-bench"))
    parser.add_argument("--tsrun", default=os.path.join(ROOT, "target", "release", "tsrun"))
    parser.add_argument("--no-build", action="store_true", help="do not run cargo build --release first")
    args = parser.parse_args()
    os.makedirs(args.cache, exist_ok=True)
    if not args.no_build:
        subprocess.run(["cargo", "build", "--release", "--bin", "tsrun"], cwd=ROOT, check=True)

    import onnxruntime as ort
    print(f"machine: {machine()}")
    print(f"torch {torch.__version__}, onnxruntime {ort.__version__}, one run, medians, "
          f"~{args.seconds:g} s per measurement, {max(1, args.rounds)} round(s)")

    prepared = {}
    for name in args.models:
        inputs = inputs_for(name)
        archive = archive_for(name, args.cache)
        files = []
        for i, t in enumerate(inputs):
            f = os.path.join(args.cache, f"{name}.input{i}.npy")
            np.save(f, t.numpy())
            files.append(f)
        prepared[name] = (inputs, archive, onnx_for(name, archive, inputs, args.cache), files)

    iterations = {}
    results = {}
    for _ in range(max(1, args.rounds)):
        for threads in args.threads:
            for name in args.models:
                inputs, archive, onnx_path, files = prepared[name]
                key = (threads, name)
                if key not in iterations:
                    torch.set_num_threads(threads)
                    module = torch.jit.load(archive).eval()
                    with torch.inference_mode():
                        iterations[key] = iterations_for(lambda: module(*inputs), args.seconds)
                    del module
                n = iterations[key]
                lt = libtorch_median(archive, inputs, threads, n)
                ot = ort_median(onnx_path, inputs, threads, n)
                ts = tsrun_report(args.tsrun, archive, files, threads, n)
                results.setdefault(key, []).append((lt, ot, ts))
    rows = []
    for (threads, name), rounds in results.items():
        inputs, archive, onnx_path, files = prepared[name]
        lt = statistics.median(r[0][0] for r in rounds)
        ot = statistics.median(r[1][0] for r in rounds)
        lt_first = statistics.median(r[0][1] / r[0][0] for r in rounds)
        ot_first = statistics.median(r[1][1] / r[1][0] for r in rounds)
        reports = [r[2] for r in rounds if "error" not in r[2]]
        if len(reports) < len(rounds):
            ts = next(r[2] for r in rounds if "error" in r[2])
        else:
            ts = {
                "median_s": statistics.median(r["median_s"] for r in reports),
                "first_over_median": statistics.median(
                    r["first_call_s"] / r["median_s"] for r in reports),
                "peak_rss_bytes": max((r.get("peak_rss_bytes") or 0) for r in reports) or None,
            }
        rows.append((threads, name, iterations[(threads, name)], lt, ot, ts, os.path.getsize(archive),
                     lt_first, ot_first))

    head = (f"{'T':>1} | {'model':50s} | {'libtorch':>9s} | {'ORT':>9s} | {'tsrun':>9s} | "
            f"{'ts/lt':>5s} | {'ts/ORT':>6s} | {'1st/med':>7s} | {'RSS-archive':>11s} | "
            f"{'lt 1st/med':>10s} | {'ORT 1st/med':>11s} | n")
    print(head)
    print("-" * len(head))
    for threads, name, n, lt, ot, ts, size, lt_first, ot_first in rows:
        label = MODELS[name][0]
        if "error" in ts:
            print(f"{threads} | {label:50s} | {fmt(lt):>9s} | {fmt(ot):>9s} | tsrun failed: {ts['error']}")
            continue
        med = ts["median_s"]
        rss = ts.get("peak_rss_bytes")
        rss_over = f"{(rss - size) / 2**20:+.1f} MiB" if rss is not None else "-"
        print(f"{threads} | {label:50s} | {fmt(lt):>9s} | {fmt(ot):>9s} | {fmt(med):>9s} | "
              f"{med / lt:5.2f} | {med / ot:6.2f} | {ts['first_over_median']:7.2f} | {rss_over:>11s} | "
              f"{lt_first:10.2f} | {ot_first:11.2f} | {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
