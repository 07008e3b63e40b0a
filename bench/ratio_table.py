#!/usr/bin/env python3
"""Turn Google Benchmark JSON from the elementwise and norm benchmarks into a
Markdown table: each kernel's median throughput and its share of the copy
bandwidth measured in the same run for the same bytes, where the copy
bandwidth is the faster of the two copy references: memcpy (`copy/...`) and
a streaming-store copy loop (`copy_stream/...`, bench_util.hpp).  Out of
cache the streaming loop is the faster one on the development machine
(glibc's memcpy there pays a read of every line it writes).

  build/bench/activation_bench --benchmark_repetitions=3 \
      --benchmark_format=json --benchmark_out=act.json ...
  python3 bench/ratio_table.py act.json [gated.json norm.json ...]

Copy references: `copy/<rows>x<cols>.<fmt>/<bytes>` (activation_bench,
gated_bench) or `copy/<bytes>` with bytes = rows * cols * element size
(norm_bench), each with its `copy_stream/...` twin.  Throughput is Google Benchmark's bytes_per_second (bytes read
+ written, per CPU second), GB = 10^9 bytes; the median of the repetitions
when there are several.

`share/<kernel>/<shape>` entries (the out-of-cache shapes) time the kernel
and the streaming copy alternately in every iteration; their counters (the
median over the iterations of copy time / kernel time, and each one's
median GB/s) go into a second table.  On a shared machine whose bandwidth
swings between runs, that paired share is the figure to read.

bench/onednn_bench's pairs (conform's kernel and oneDNN's timed alternately,
counters `conform`, `onednn`, `onednn_over_conform` and the unit
`bytes/s` or `FLOP/s`) make a third table: each side's median rate and the
median per-iteration ratio oneDNN / conform (below 1: conform is faster),
the figure docs/int8.md and docs/softmax.md quote.

  build/bench/onednn_bench --benchmark_format=json --benchmark_out=dnn.json
  python3 bench/ratio_table.py dnn.json
"""
import json
import re
import sys

SIZE = {"fp32": 4, "bf16": 2, "fp16": 2}
KERNEL = r"cpu\.simd\.(\w+)\.(fp32|bf16|fp16)/(\d+)x(\d+)"  # op, format, rows, cols


def records(path):
    """name -> benchmark record: the median aggregate where there are
    repetitions, else the single run."""
    with open(path) as f:
        runs = json.load(f)["benchmarks"]
    out, plain = {}, {}
    for r in runs:
        if r.get("aggregate_name") == "median":
            out[r["run_name"]] = r
        elif r.get("run_type", "iteration") == "iteration":
            plain[r["name"]] = r
    return out or plain


def paired(recs):
    """Rows of the paired share table from the share/... records."""
    rows = []
    for name, r in recs.items():
        k = re.match(rf"share/{KERNEL}(/manual_time)?$", name)
        if k and "share" in r:
            shape = f"{k.group(3)}×{k.group(4)}"
            rows.append((f"{k.group(1)}.{k.group(2)}", shape, r["kernel_GBps"], r["copy_GBps"], r["share"]))
    return rows


def copy_ref(m, prefix, r, c, fmt):
    """The copy reference of this shape and format in the run, or None."""
    v = next((v for n, v in m.items() if n.startswith(f"{prefix}/{r}x{c}.{fmt}/")), None)
    return v if v is not None else m.get(f"{prefix}/{r * c * SIZE[fmt]}")


def onednn_pairs(recs):
    """Rows of the conform-vs-oneDNN table."""
    rows = []
    for name, r in recs.items():
        if "onednn_over_conform" not in r:
            continue
        unit = "GFLOP/s" if "FLOP/s" in r else "GB/s"
        what = name.removesuffix("/manual_time")
        rows.append((what, unit, r["conform"] / 1e9, r["onednn"] / 1e9, r["onednn_over_conform"]))
    return rows


def gb(v):
    return f"{v / 1e9:.2f}" if v else "–"


def main(paths):
    rows, pairs, dnn = [], [], []
    for path in paths:
        recs = records(path)
        pairs += paired(recs)
        dnn += onednn_pairs(recs)
        m = {n: r["bytes_per_second"] for n, r in recs.items() if "bytes_per_second" in r}
        for name, bps in m.items():
            k = re.match(rf"{KERNEL}$", name)
            if not k:
                continue
            op, fmt, r, c = k.group(1), k.group(2), int(k.group(3)), int(k.group(4))
            copies = [copy_ref(m, prefix, r, c, fmt) for prefix in ("copy", "copy_stream")]
            best = max((v for v in copies if v), default=None)
            share = f"{100 * bps / best:.0f} %" if best else "–"
            rows.append((op, fmt, f"{r}×{c}", bps / 1e9, *(gb(v) for v in copies), share))
    if rows:
        print("| kernel | shape | GB/s | memcpy GB/s | streaming copy GB/s | share of the faster copy |")
        print("|---|---|---|---|---|---|")
        for op, fmt, shape, g, c, cs, share in rows:
            print(f"| {op}.{fmt} | {shape} | {g:.2f} | {c} | {cs} | {share} |")
    if pairs:
        if rows:
            print()
        print("| kernel | shape | GB/s | streaming copy GB/s (same iterations) | paired share |")
        print("|---|---|---|---|---|")
        for kernel, shape, g, c, share in pairs:
            print(f"| {kernel} | {shape} | {g:.2f} | {c:.2f} | {100 * share:.0f} % |")
    if dnn:
        if rows or pairs:
            print()
        print("| op / shape | unit | conform cpu.simd | oneDNN | oneDNN / conform |")
        print("|---|---|---|---|---|")
        for what, unit, c, o, ratio in dnn:
            print(f"| {what} | {unit} | {c:.3g} | {o:.3g} | {ratio:.2f} |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
