#!/usr/bin/env python3
"""bench/ratio_table.py on synthetic Google Benchmark JSON: each kernel is held
to the faster of its two copy references (memcpy, streaming copy), the norm
benchmarks' `copy/<bytes>` naming is matched by size, repetitions are read
through their median aggregate, and the paired `share/...` counters make the
second table.  With benchmark programs as arguments (CTest passes
activation_bench, gated_bench and norm_bench when they are built), it also
checks that every kernel and share/ name they register gets its row and a
copy reference.  Run by CTest; exits non-zero on the first wrong line."""
import json
import os
import subprocess
import sys
import tempfile

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "ratio_table.py")


def run(benchmarks):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"benchmarks": benchmarks}, f)
    try:
        return subprocess.run([sys.executable, SCRIPT, f.name], check=True, capture_output=True, text=True).stdout
    finally:
        os.unlink(f.name)


def it(name, bps, **counters):
    return {"name": name, "run_name": name, "run_type": "iteration", "bytes_per_second": bps, **counters}


def median(name, bps, **counters):
    return {"name": name + "_median", "run_name": name, "run_type": "aggregate", "aggregate_name": "median",
            "bytes_per_second": bps, **counters}


def expect(out, line):
    if line not in out.splitlines():
        sys.exit(f"missing line:\n{line}\nin output:\n{out}")


def check_names(binaries):
    """Every cpu.simd.<op>.<fmt>/<r>x<c> name a program registers gets a row
    with a share (so a copy reference of its size exists), and every share/
    name a row in the paired table."""
    for binary in binaries:
        names = subprocess.run([binary, "--benchmark_list_tests"], check=True, capture_output=True,
                               text=True).stdout.split()
        records = [it(n, 1e9, share=0.5, kernel_GBps=1.0, copy_GBps=2.0) for n in names]
        out = run(records).splitlines()
        kernels = [n for n in names if n.startswith("cpu.simd.")]
        shares = [n for n in names if n.startswith("share/")]
        if not kernels or not shares:
            sys.exit(f"{binary}: no cpu.simd or share/ benchmarks listed")
        for n in kernels:
            op_fmt, shape = n[len("cpu.simd."):].split("/")
            row = f"| {op_fmt} | {shape.replace('x', '×')} | 1.00 |"
            hits = [line for line in out if line.startswith(row)]
            if not hits or not any(line.endswith(" % |") and "| – |" not in line[-8:] for line in hits):
                sys.exit(f"{binary}: {n} has no row with a copy reference")
        for n in shares:
            op_fmt, shape = n[len("share/cpu.simd."):].split("/")[:2]
            if f"| {op_fmt} | {shape.replace('x', '×')} | 1.00 | 2.00 | 50 % |" not in out:
                sys.exit(f"{binary}: {n} missing from the paired table")
        print(f"{os.path.basename(binary)}: {len(kernels)} kernel and {len(shares)} share names parsed")


def main():
    # Elementwise naming; the streaming copy is the faster reference here.
    out = run([it("copy/4096x4096.fp32/67108864", 10e9), it("copy_stream/4096x4096.fp32/67108864", 15e9),
               it("cpu.simd.sigmoid.fp32/4096x4096", 6e9)])
    expect(out, "| sigmoid.fp32 | 4096×4096 | 6.00 | 10.00 | 15.00 | 40 % |")
    # Norm naming (copy by bytes); memcpy faster (in cache); no streaming twin in an old run.
    out = run([it("copy/32768", 60e9), it("copy_stream/32768", 30e9), it("cpu.simd.rms_norm.bf16/4x4096", 15e9),
               it("copy/67108864", 9e9), it("cpu.simd.rms_norm.fp16/1024x32768", 9e9)])
    expect(out, "| rms_norm.bf16 | 4×4096 | 15.00 | 60.00 | 30.00 | 25 % |")
    expect(out, "| rms_norm.fp16 | 1024×32768 | 9.00 | 9.00 | – | 100 % |")
    # Repetitions: the median aggregates, not the single runs; paired shares in the second table.
    out = run([it("copy/2048x8192.bf16/33554432", 1e9), median("copy/2048x8192.bf16/33554432", 8e9),
               median("copy_stream/2048x8192.bf16/33554432", 12e9), it("cpu.simd.silu.bf16/2048x8192", 1e9),
               median("cpu.simd.silu.bf16/2048x8192", 6e9),
               median("share/cpu.simd.silu.bf16/2048x8192/manual_time", 5.9e9, share=0.4833, kernel_GBps=5.8,
                      copy_GBps=12.0)])
    expect(out, "| silu.bf16 | 2048×8192 | 6.00 | 8.00 | 12.00 | 50 % |")
    expect(out, "| silu.bf16 | 2048×8192 | 5.80 | 12.00 | 48 % |")
    # onednn_bench's pairs: the third table, medians and the median ratio, /manual_time dropped.
    out = run([median("int8_gemm.fp32/128x4096x4096/manual_time", 0, conform=6.5e11, onednn=7.1e11,
                      onednn_over_conform=1.09, **{"FLOP/s": 1}),
               median("softmax.fp32/64x4096/manual_time", 0, conform=2.5e10, onednn=1.9e10, onednn_over_conform=0.76,
                      **{"bytes/s": 1})])
    expect(out, "| int8_gemm.fp32/128x4096x4096 | GFLOP/s | 650 | 710 | 1.09 |")
    expect(out, "| softmax.fp32/64x4096 | GB/s | 25 | 19 | 0.76 |")
    print("ratio_table: all expected lines present")
    check_names(sys.argv[1:])


if __name__ == "__main__":
    main()
