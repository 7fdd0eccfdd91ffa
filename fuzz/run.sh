#!/usr/bin/env bash
# Run every fuzz target for SECONDS each (default 60), niced, with corpora seeded from the
# committed fixtures. Needs cargo-fuzz (`cargo install cargo-fuzz`) and nightly flags: the
# nightly toolchain where one is installed, else the stable one with RUSTC_BOOTSTRAP=1.
# Crashes land in fuzz/artifacts/<target>/; each one found becomes a regression test in
# tests/suite/hostile_archives.rs. Prints the executions of every target at the end.
# FUZZ_PREBUILT=1 runs binaries built beforehand with
#   RUSTC_BOOTSTRAP=1 cargo fuzz build -O --codegen-units 16
# (cargo-fuzz's default of one codegen unit needs over 21 GB of RAM for the instrumented tsrun
# crate; 16 units peak near 16 GB). FUZZ_TARGETS="unpickle archive" picks targets.
set -euo pipefail
SECONDS_PER_TARGET="${1:-60}"
cd "$(dirname "$0")"
TARGETS=(${FUZZ_TARGETS:-unpickle archive parse graph_text compile run_inputs})
python3 - <<'PY'
# Seed corpora from the fixtures: archives, their data.pkl / constants.pkl, code files and
# the printed graphs PyTorch gave (stdlib only, no torch needed).
import json, os, zipfile, hashlib
root = os.path.join("..", "fixtures")
def put(target, data):
    d = os.path.join("seeds", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, hashlib.sha1(data).hexdigest()), "wb") as f:
        f.write(data)
models = os.path.join(root, "models")
for name in sorted(os.listdir(models)):
    path = os.path.join(models, name)
    if not name.endswith(".pt") or os.path.getsize(path) > 200_000:
        continue
    raw = open(path, "rb").read()
    put("archive", raw)
    z = zipfile.ZipFile(path)
    for rec in z.namelist():
        data = z.read(rec)
        if rec.endswith(".pkl"):
            put("unpickle", data)
        elif rec.endswith(".py") and "/code/" in rec:
            put("parse", data)
            put("compile", data)
for name in sorted(os.listdir(os.path.join(root, "golden"))):
    p = os.path.join(root, "golden", name, "printed.json")
    if not os.path.exists(p):
        continue
    for methods in json.load(open(p)).values():
        for m in methods.values():
            for key in ("graph", "inlined_graph"):
                if isinstance(m, dict) and isinstance(m.get(key), str) and len(m[key]) < 20000:
                    put("graph_text", m[key].encode())
for i in range(16):
    put("run_inputs", bytes([i, i * 7 % 6, 2, 2, 8, 3, 250, 1, 0, 5, 9]))
PY
mkdir -p logs
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    CARGO=(cargo +nightly)
else
    export RUSTC_BOOTSTRAP=1
    CARGO=(cargo)
fi
for t in "${TARGETS[@]}"; do
    mkdir -p "corpus/$t"
    mkdir -p "artifacts/$t"
    flags=(-max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=3072 -timeout=20
        -max_len=262144 -print_final_stats=1 -artifact_prefix="artifacts/$t/")
    # FUZZ_PREBUILT=1 runs the binaries `cargo fuzz build -O` left (no cargo while fuzzing)
    if [ "${FUZZ_PREBUILT:-0}" = 1 ]; then
        cmd=(nice -n 19 "target/x86_64-unknown-linux-gnu/release/$t" "${flags[@]}" "corpus/$t" "seeds/$t")
    else
        cmd=(nice -n 19 "${CARGO[@]}" fuzz run -O "$t" "corpus/$t" "seeds/$t" -- "${flags[@]}")
    fi
    "${cmd[@]}" >"logs/$t.log" 2>&1 || echo "$t: crashed (see fuzz/logs/$t.log, fuzz/artifacts/$t)"
done
for t in "${TARGETS[@]}"; do
    echo "$t: $(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "logs/$t.log" | grep -o '[0-9]*$' || echo '?') executions"
done
