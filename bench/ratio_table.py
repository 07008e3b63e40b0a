#!/usr/bin/env python3
"""Turn Google Benchmark JSON from the elementwise and norm benchmarks into a
Markdown table: each kernel's median throughput and its share of the copy
bandwidth measured in the same run for the same bytes.

  build/bench/activation_bench --benchmark_repetitions=3 \
      --benchmark_format=json --benchmark_out=act.json ...
  python3 bench/ratio_table.py act.json [gated.json norm.json ...]

Copy references: `copy/<rows>x<cols>.<fmt>/<bytes>` (activation_bench,
gated_bench) or `copy/<bytes>` with bytes = rows * cols * element size
(norm_bench).  Throughput is Google Benchmark's bytes_per_second (bytes read
+ written, per CPU second), GB = 10^9 bytes; the median of the repetitions
when there are several.
"""
import json
import re
import sys

SIZE = {"fp32": 4, "bf16": 2, "fp16": 2}


def medians(path):
    with open(path) as f:
        runs = json.load(f)["benchmarks"]
    out, plain = {}, {}
    for r in runs:
        if r.get("aggregate_name") == "median":
            out[r["run_name"]] = r["bytes_per_second"]
        elif r.get("run_type", "iteration") == "iteration":
            plain[r["name"]] = r["bytes_per_second"]
    return out or plain


def main(paths):
    rows = []
    for path in paths:
        m = medians(path)
        for name, bps in m.items():
            k = re.match(r"cpu\.simd\.(\w+)\.(fp32|bf16|fp16)/(\d+)x(\d+)$", name)
            if not k:
                continue
            op, fmt, r, c = k.group(1), k.group(2), int(k.group(3)), int(k.group(4))
            copy = next((v for n, v in m.items() if n.startswith(f"copy/{r}x{c}.{fmt}/")), None)
            if copy is None:
                copy = m.get(f"copy/{r * c * SIZE[fmt]}")
            share = f"{100 * bps / copy:.0f} %" if copy else "–"
            rows.append((op, fmt, f"{r}×{c}", bps / 1e9, copy / 1e9 if copy else None, share))
    print("| kernel | shape | GB/s | copy GB/s | share of copy |")
    print("|---|---|---|---|---|")
    for op, fmt, shape, g, c, share in rows:
        print(f"| {op}.{fmt} | {shape} | {g:.2f} | {c:.2f} | {share} |" if c else f"| {op}.{fmt} | {shape} | {g:.2f} | – | – |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
