#!/usr/bin/env python3
"""Drive `tsrun serve` with NVIDIA's tritonclient over HTTP and gRPC (not run in CI: it needs
the venv with `tritonclient[http,grpc]`, torch and numpy).

    cargo build --release
    .venv/bin/python tests/serve_tritonclient.py [--tsrun target/release/tsrun]

It starts the server on free 127.0.0.1 ports with the bundled `mlp` fixture (plus a copy with a
model-config.json naming its tensors), then checks metadata, readiness, inference equal to
PyTorch (the committed golden, and the archive run by torch.jit.load when torch is present),
binary tensor data, a bad-input error, and 16 concurrent clients x 100 requests, over both
protocols. Exit status 0 when every check passed.
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, "fixtures", "models", "mlp.pt")
GOLDEN = os.path.join(ROOT, "fixtures", "golden", "mlp", "runs.npz")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def goldens():
    """(input, PyTorch output) pairs: the committed goldens, plus torch.jit.load's answer on a
    fresh batch when torch is importable."""
    z = np.load(GOLDEN)
    pairs = [(z["0.in.0"], z["0.out"]), (z["1.in.0"], z["1.out"])]
    try:
        import torch

        m = torch.jit.load(FIXTURE).eval()
        x = np.random.default_rng(0).standard_normal((5, 8)).astype(np.float32)
        with torch.no_grad():
            pairs.append((x, m(torch.from_numpy(x)).numpy()))
    except ImportError:
        pass
    return pairs


FAILURES = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILURES.append(what)


def close(a, b):
    return a.shape == b.shape and np.allclose(a, b, rtol=1e-4, atol=1e-5)


def run_http(url, pairs):
    c = httpclient.InferenceServerClient(url=url, concurrency=16)
    check(c.is_server_live(), "http: server live")
    check(c.is_server_ready(), "http: server ready")
    check(c.is_model_ready("mlp"), "http: model ready")
    meta = c.get_server_metadata()
    check(meta["name"] == "tsrun", f"http: server metadata {meta}")
    mm = c.get_model_metadata("mlp_cfg")
    check(mm["inputs"][0]["name"] == "x" and mm["versions"] == ["1"], f"http: model metadata {mm}")
    for binary in (True, False):
        for x, y in pairs:
            inp = httpclient.InferInput("x", list(x.shape), "FP32")
            inp.set_data_from_numpy(x, binary_data=binary)
            out = httpclient.InferRequestedOutput("y", binary_data=binary)
            r = c.infer("mlp_cfg", [inp], outputs=[out])
            check(close(r.as_numpy("y"), y), f"http: infer {x.shape} binary={binary} equals PyTorch")
    # default names, no outputs requested (binary_data_output)
    x, y = pairs[0]
    inp = httpclient.InferInput("input__0", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    r = c.infer("mlp", [inp])
    check(close(r.as_numpy("output__0"), y), "http: default names equal PyTorch")
    bad = httpclient.InferInput("x", [1, 8], "FP64")
    bad.set_data_from_numpy(np.zeros((1, 8), np.float64))
    try:
        c.infer("mlp_cfg", [bad])
        check(False, "http: bad dtype refused")
    except InferenceServerException as e:
        check("expected FP32" in str(e), f"http: bad dtype refused ({e})")
    # 16 concurrent clients x 100 requests
    errors = []

    def client(k):
        cc = httpclient.InferenceServerClient(url=url)
        for i in range(100):
            x, y = pairs[(k + i) % len(pairs)]
            inp = httpclient.InferInput("x", list(x.shape), "FP32")
            inp.set_data_from_numpy(x)
            got = cc.infer("mlp_cfg", [inp]).as_numpy("y")
            if not close(got, y):
                errors.append((k, i))

    t0 = time.time()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(not errors, f"http: 16 clients x 100 requests all equal PyTorch ({time.time() - t0:.1f} s, {len(errors)} wrong)")


def run_grpc(url, pairs):
    c = grpcclient.InferenceServerClient(url=url)
    check(c.is_server_live(), "grpc: server live")
    check(c.is_server_ready(), "grpc: server ready")
    check(c.is_model_ready("mlp"), "grpc: model ready")
    check(c.get_server_metadata().name == "tsrun", "grpc: server metadata")
    mm = c.get_model_metadata("mlp_cfg")
    check(mm.inputs[0].name == "x" and list(mm.inputs[0].shape) == [-1, 8], "grpc: model metadata")
    for x, y in pairs:
        inp = grpcclient.InferInput("x", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        r = c.infer("mlp_cfg", [inp], outputs=[grpcclient.InferRequestedOutput("y")])
        check(close(r.as_numpy("y"), y), f"grpc: infer {x.shape} equals PyTorch")
    bad = grpcclient.InferInput("x", [1, 4], "FP32")
    bad.set_data_from_numpy(np.zeros((1, 4), np.float32))
    try:
        c.infer("mlp_cfg", [bad])
        check(False, "grpc: bad shape refused")
    except InferenceServerException as e:
        check("expected [-1, 8]" in str(e), f"grpc: bad shape refused ({e})")
    errors = []

    def client(k):
        cc = grpcclient.InferenceServerClient(url=url)
        for i in range(100):
            x, y = pairs[(k + i) % len(pairs)]
            inp = grpcclient.InferInput("x", list(x.shape), "FP32")
            inp.set_data_from_numpy(x)
            if not close(cc.infer("mlp_cfg", [inp]).as_numpy("y"), y):
                errors.append((k, i))

    t0 = time.time()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(not errors, f"grpc: 16 clients x 100 requests all equal PyTorch ({time.time() - t0:.1f} s, {len(errors)} wrong)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tsrun", default=os.path.join(ROOT, "target", "release", "tsrun"))
    ap.add_argument("--max-batch", default="8")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="tsrun-triton-")
    cfg = os.path.join(tmp, "configured")
    os.makedirs(cfg)
    shutil.copy(FIXTURE, os.path.join(tmp, "mlp.pt"))
    shutil.copy(FIXTURE, os.path.join(cfg, "mlp_cfg.pt"))
    with open(os.path.join(cfg, "model-config.json"), "w") as f:
        json.dump({"inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 8]}],
                   "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 4]}]}, f)
    http_port, grpc_port = free_port(), free_port()
    server = subprocess.Popen([args.tsrun, "serve", os.path.join(tmp, "mlp.pt"), cfg,
                               "--http", f"127.0.0.1:{http_port}", "--grpc", f"127.0.0.1:{grpc_port}",
                               "--max-batch", args.max_batch])
    try:
        probe = httpclient.InferenceServerClient(url=f"127.0.0.1:{http_port}")
        for _ in range(100):
            try:
                if probe.is_server_ready():
                    break
            except Exception:
                time.sleep(0.1)
        pairs = goldens()
        run_http(f"127.0.0.1:{http_port}", pairs)
        run_grpc(f"127.0.0.1:{grpc_port}", pairs)
    finally:
        server.terminate()  # SIGTERM: graceful shutdown
        rc = server.wait(timeout=30)
        check(rc == 0, f"server exits cleanly on SIGTERM (status {rc})")
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{len(FAILURES)} failed checks")
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
