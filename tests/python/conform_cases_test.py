"""python/conform_cases.py with NumPy kernels (docs/cases.md): check() passes a
correct kernel, fails a wrong one with conform's first failure, and honours
declared conventions; fill() refuses outputs of the wrong shape or name.

    python3 tests/python/conform_cases_test.py --conform build/conform

Exit status 77 (CTest's skip) when NumPy is not importable.
"""
import argparse
import os
import re
import shutil
import sys
import tempfile
import unittest

try:
    import numpy as np
except ImportError:
    print("SKIP: NumPy is not importable by %s" % sys.executable)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
import conform_cases  # noqa: E402

CONFORM = "conform"


def rms_norm(inputs, params, eps_outside=False):
    x = np.asarray(inputs["x"], dtype=np.float64)
    w = np.asarray(inputs["weight"], dtype=np.float64)
    if params.get("zero_centered", 0):
        w = 1 + w
    ms = np.mean(x * x, axis=-1, keepdims=True)
    with np.errstate(all="ignore"):
        y = x / (np.sqrt(ms) + params["eps"]) if eps_outside else x / np.sqrt(ms + params["eps"])
    return {"y": y * w}


def softmax(inputs, params, masked_row_zero=True):
    x = np.asarray(inputs["x"], dtype=np.float64)
    with np.errstate(all="ignore"):
        e = np.exp(x - np.max(x, axis=-1, keepdims=True))
        y = e / np.sum(e, axis=-1, keepdims=True)
    if masked_row_zero:
        y = np.where(np.all(np.isneginf(x), axis=-1, keepdims=True), 0.0, y)
    return {"y": y}


def round_fp8(v, fmt, saturate, toward_zero=False):
    """v (float64, exact quotients) rounded to the FP8 format: to nearest, ties to the even code (or
    toward zero); past max, saturated or overflowed (E4M3 NaN, E5M2 Inf)."""
    table = conform_cases._fp8_values(fmt)
    top = 0x7E if fmt == "fp8_e4m3" else 0x7B  # the largest finite code
    ladder = np.append(table[:top + 1], 2 * table[top] - table[top - 1])  # one step past max
    mag = np.abs(v)
    hi = np.clip(np.searchsorted(ladder, mag), 1, top + 1)  # ladder[hi - 1] < mag <= ladder[hi]
    lo_v, hi_v = ladder[hi - 1], ladder[hi]
    if toward_zero:
        code = np.where(mag >= hi_v, hi, hi - 1)
    else:
        up = (mag - lo_v > hi_v - mag) | ((mag - lo_v == hi_v - mag) & (hi % 2 == 0))
        code = np.where(up, hi, hi - 1)
    out = np.where(mag == 0, 0.0, ladder[np.minimum(code, top)])
    over = code > top
    if not saturate:
        out = np.where(over, np.nan if fmt == "fp8_e4m3" else np.inf, out)
    return np.where(np.isnan(v), np.nan, np.copysign(out, v))


def fp8_quantize(inputs, params, toward_zero=False):
    """docs/fp8.md: per block s = RN_fp32(max(amax / max, 2^-126)) (or the power of two, or the
    static scale), q = RN_fp8(x / s); a block with NaN or Inf: s and q NaN."""
    x = np.asarray(inputs["x"], dtype=np.float64)
    fmt = "fp8_e5m2" if params.get("format", 0) else "fp8_e4m3"
    fmax = conform_cases._fp8_values(fmt)[0x7E if fmt == "fp8_e4m3" else 0x7B]
    br, bc = int(params["br"]), int(params["bc"])
    rows, cols = x.shape
    scale = np.empty(((rows + br - 1) // br, (cols + bc - 1) // bc))
    q = np.empty_like(x)
    for i in range(scale.shape[0]):
        for j in range(scale.shape[1]):
            blk = x[i * br:(i + 1) * br, j * bc:(j + 1) * bc]
            amax = np.max(np.abs(blk))
            if params.get("static_scale", 0) > 0:
                s = float(np.float32(params["static_scale"]))
            elif not np.isfinite(amax):
                s = np.nan
            elif params.get("scale", 0):
                e = int(np.ceil(np.log2(amax / fmax))) if amax > 0 else -126
                e = e - 1 if amax <= fmax * 2.0 ** (e - 1) else e + 1 if amax > fmax * 2.0 ** e else e
                s = 2.0 ** max(e, -126)
            else:
                s = float(max(np.float32(amax) / np.float32(fmax), np.float32(2.0 ** -126)))
            scale[i, j] = s
            with np.errstate(all="ignore"):
                q[i * br:(i + 1) * br, j * bc:(j + 1) * bc] = (
                    np.nan if np.isnan(s) else round_fp8(blk / s, fmt, params.get("saturate", 1) != 0, toward_zero))
    return {"q": q, "scale": scale}


def fp8_gemm(inputs, params):
    """y = sum over K blocks of scale_a scale_b (a b) in float64: the FP8 inputs arrive as ml_dtypes
    float8 arrays, or float32 values naming their format (FP8Values)."""
    a, b = (np.asarray(inputs[n]).astype(np.float64) for n in ("a", "b"))
    sa, sb = (np.asarray(inputs[n], dtype=np.float64) for n in ("scale_a", "scale_b"))
    blk = int(params["block"])
    y = np.zeros((a.shape[0], b.shape[1]))
    for kb in range(sa.shape[1]):
        part = a[:, kb * blk:(kb + 1) * blk] @ b[kb * blk:(kb + 1) * blk, :]
        y += part * sa[:, kb:kb + 1] * np.repeat(sb[kb], blk)[:b.shape[1]]
    return {"y": y}


class Check(unittest.TestCase):
    def assert_check_fails(self, *args, **kwargs):
        """check() must fail; the case set it keeps for the user is removed after the test."""
        with self.assertRaises(AssertionError) as e:
            conform_cases.check(*args, **kwargs)
        kept = re.search(r"\(case set kept in (.+)\)$", str(e.exception))
        self.assertIsNotNone(kept, str(e.exception))
        self.assertTrue(os.path.isdir(kept.group(1)), kept.group(1))
        self.addCleanup(shutil.rmtree, kept.group(1), True)
        return str(e.exception)

    def test_correct_rms_norm_passes(self):
        seen = set()

        def fn(inputs, params):
            seen.add(str(getattr(inputs["x"], "conform_dtype", inputs["x"].dtype)))
            return rms_norm(inputs, params)

        summary = conform_cases.check("rms_norm", "bf16", fn, cases=40, conform=CONFORM)
        self.assertRegex(summary, r"^\d+ cases: (\d+) pass, 0 fail")
        self.assertEqual(seen, {"bfloat16"} if conform_cases._ml_bfloat16() else {"bf16"})

    def test_eps_outside_the_root_fails_and_names_the_convention(self):
        text = self.assert_check_fails("rms_norm", "bf16", lambda i, p: rms_norm(i, p, eps_outside=True), cases=40,
                                       conform=CONFORM)
        self.assertIn("rms_norm bf16: ", text)
        self.assertRegex(text, r"(within_budget|special_values|scale_invariance|zero_centered_equivalence) FAIL")
        self.assertRegex(text, r"element \d+ .*: x=-?0x")     # the element with its inputs in hex
        self.assertIn("matches convention eps_placement=outside", text)
        case = text.split("case: ")[1].split("\n")[0]
        self.assertTrue(os.path.isfile(case), case)          # the case set is kept for the user

    def test_eps_outside_declared_passes(self):
        conform_cases.check("rms_norm", "fp32", lambda i, p: rms_norm(i, p, eps_outside=True), cases=40,
                            conform=CONFORM, conventions={"eps_placement": "outside"})

    def test_softmax_nan_on_a_fully_masked_row_fails_unless_declared(self):
        nan_rows = lambda i, p: softmax(i, p, masked_row_zero=False)  # noqa: E731
        text = self.assert_check_fails("softmax", "fp32", nan_rows, cases=60, conform=CONFORM)
        self.assertIn("special-value class mismatch (want finite, got NaN)", text)
        self.assertIn("matches convention masked_row=nan", text)
        conform_cases.check("softmax", "fp32", nan_rows, cases=60, conform=CONFORM, conventions={"masked_row": "nan"})
        conform_cases.check("softmax", "bf16", softmax, cases=60, conform=CONFORM)

    def test_fp8_gemm_in_float64_passes(self):
        formats = set()

        def fn(inputs, params):
            formats.add(str(getattr(inputs["a"], "conform_dtype", inputs["a"].dtype)))
            return fp8_gemm(inputs, params)

        conform_cases.check("fp8_gemm", "fp8_e4m3", fn, cases=20, conform=CONFORM)
        self.assertEqual(formats, {"float8_e4m3fn"} if conform_cases._ml_float8("fp8_e4m3") else {"fp8_e4m3"})

    def test_fp8_quantize_exact_passes_and_truncation_fails(self):
        conform_cases.check("fp8_quantize", "fp32", fp8_quantize, cases=30, conform=CONFORM)
        text = self.assert_check_fails("fp8_quantize", "fp32", lambda i, p: fp8_quantize(i, p, toward_zero=True),
                                       cases=30, conform=CONFORM)
        self.assertIn("q[", text)


class Fill(unittest.TestCase):
    def generate(self, op, dtype):
        import subprocess
        d = tempfile.mkdtemp(prefix="conform-cases-test-")
        self.addCleanup(shutil.rmtree, d, True)
        subprocess.run([CONFORM, "cases", "--op", op, "--dtype", dtype, "--cases", "3", "--out", d], check=True,
                       capture_output=True)
        return d

    def test_wrong_shape_and_unknown_output_name_the_case(self):
        d = self.generate("silu", "fp16")
        with self.assertRaisesRegex(ValueError, r"c00001\.safetensors: output 'y': shape \[1\], the case expects"):
            conform_cases.fill(d, lambda i, p: {"y": np.zeros(1)})
        with self.assertRaisesRegex(ValueError, r"c00001\.safetensors: fn returned outputs \['z'\]; silu has \['y'\]"):
            conform_cases.fill(d, lambda i, p: {"z": i["x"]})

    def test_fp8_outputs_must_be_fp8_numbers(self):
        d = self.generate("fp8_quantize", "fp32")
        with self.assertRaisesRegex(ValueError, r"output 'q': element \d+ = .* is not an fp8_e4m3 number"):
            conform_cases.fill(d, lambda i, p: dict(fp8_quantize(i, p), q=np.full(np.shape(i["x"]), 0.3)))

    def test_filled_outputs_are_stored_in_the_case_format(self):
        d = self.generate("silu", "bf16")
        n, unsupported = conform_cases.fill(d, lambda i, p: {"y": np.asarray(i["x"], np.float32)}, impl="identity")
        self.assertEqual(unsupported, 0)
        manifest = conform_cases.read_manifest(d)
        self.assertEqual(n, len(manifest["cases"]))
        case = conform_cases.cc.read_case(os.path.join(d, manifest["cases"][0]["file"]))
        self.assertEqual(case["impl"], "identity")
        self.assertIsInstance(case["outputs"]["y"], conform_cases.cc.BF16)  # bf16 bits, as the manifest asks
        self.assertTrue(np.array_equal(case["outputs"]["y"].bits, case["inputs"]["x"].bits))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--conform", default="conform")
    parser.add_argument("--require", action="append", default=[], help="a module to require (skip without it)")
    args, rest = parser.parse_known_args()
    CONFORM = args.conform
    for module in args.require:
        try:
            __import__(module)
        except ImportError:
            print("SKIP: %s is not importable by %s" % (module, sys.executable))
            sys.exit(77)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
