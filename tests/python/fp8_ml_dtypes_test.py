"""conform's FP8 E4M3 against ml_dtypes (docs/numerics.md, "FP8"): every code
stored in golden/vectors/fp8_quantize.*.json decodes to the value its "hex"
says, and every code conform's oracle stored is what ml_dtypes'
float8_e4m3fn conversion gives for x / s (in double; both round to nearest
even, and with dynamic scales nothing lies past 448).  An independent
implementation of the same rounding, on the golden data the C++ tests
reproduce bit for bit.

    /opt/conform-venv/bin/python3 tests/python/fp8_ml_dtypes_test.py --golden golden

Exit status 77 (CTest's skip) when NumPy or ml_dtypes is not importable.
"""
import argparse
import json
import os
import sys

try:
    import numpy as np
    import ml_dtypes
except ImportError as e:
    print("SKIP: %s (%s)" % (e, sys.executable))
    sys.exit(77)


def tensor(t):
    bits = np.array([int(b, 16) for b in t["bits"]], dtype=np.uint64)
    values = np.array([float.fromhex(h) for h in t["hex"]], dtype=np.float64)
    return bits, values, t["shape"]


def check_vector(v, where):
    q_bits, q_values, shape = tensor(v["outputs"]["q"])
    _, x, _ = tensor(v["inputs"]["x"])
    _, scale, sshape = tensor(v["outputs"]["scale"])
    codes = q_bits.astype(np.uint8)
    decoded = codes.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    same = (decoded == q_values) | (np.isnan(decoded) & np.isnan(q_values))
    assert same.all(), "%s: ml_dtypes decodes code %s differently" % (where, codes[~same][:4])
    p = v["params"]
    br, bc, cols = int(p.get("br", 1)), int(p.get("bc", 128)), shape[1]
    rows_i, cols_i = np.divmod(np.arange(x.size), cols)
    s = scale[(rows_i // br) * sshape[1] + cols_i // bc]
    with np.errstate(all="ignore"):
        ratio = x / s
    judged = np.isfinite(s) & np.isfinite(x) & (np.abs(ratio) <= 448)
    want = ratio[judged].astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    bad = want != codes[judged]
    assert not bad.any(), "%s: x / s = %r: ml_dtypes %r, conform %r" % (
        where, ratio[judged][bad][:3], want[bad][:3], codes[judged][bad][:3])
    return int(judged.sum())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--golden", required=True)
    args = ap.parse_args()
    judged = 0
    for fmt in ("fp32", "bf16", "fp16"):
        path = os.path.join(args.golden, "vectors", "fp8_quantize.%s.json" % fmt)
        with open(path) as f:
            doc = json.load(f)
        for i, v in enumerate(doc["vectors"]):
            judged += check_vector(v, "%s vectors[%d] (%s)" % (path, i, v["family"]))
    assert judged > 500, "only %d codes compared" % judged
    print("fp8 against ml_dtypes %s: %d codes agree" % (ml_dtypes.__version__, judged))


if __name__ == "__main__":
    main()
