"""python/conform_cases.py with NumPy kernels (docs/cases.md): check() passes a
correct kernel, fails a wrong one with conform's first failure, and honours
declared conventions; fill() refuses outputs of the wrong shape or name.

    python3 tests/python/conform_cases_test.py --conform build/conform

Exit status 77 (CTest's skip) when NumPy is not importable.
"""
import argparse
import os
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


class Check(unittest.TestCase):
    def test_correct_rms_norm_passes(self):
        seen = set()

        def fn(inputs, params):
            seen.add(str(getattr(inputs["x"], "conform_dtype", inputs["x"].dtype)))
            return rms_norm(inputs, params)

        summary = conform_cases.check("rms_norm", "bf16", fn, cases=40, conform=CONFORM)
        self.assertRegex(summary, r"^\d+ cases: (\d+) pass, 0 fail")
        self.assertEqual(seen, {"bfloat16"} if conform_cases._ml_bfloat16() else {"bf16"})

    def test_eps_outside_the_root_fails_and_names_the_convention(self):
        with self.assertRaises(AssertionError) as e:
            conform_cases.check("rms_norm", "bf16", lambda i, p: rms_norm(i, p, eps_outside=True), cases=40,
                                conform=CONFORM)
        text = str(e.exception)
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
        with self.assertRaises(AssertionError) as e:
            conform_cases.check("softmax", "fp32", nan_rows, cases=60, conform=CONFORM)
        self.assertIn("special-value class mismatch (want finite, got NaN)", str(e.exception))
        self.assertIn("matches convention masked_row=nan", str(e.exception))
        conform_cases.check("softmax", "fp32", nan_rows, cases=60, conform=CONFORM, conventions={"masked_row": "nan"})
        conform_cases.check("softmax", "bf16", softmax, cases=60, conform=CONFORM)


class Fill(unittest.TestCase):
    def generate(self, op, dtype):
        import subprocess
        d = tempfile.mkdtemp(prefix="conform-cases-test-")
        subprocess.run([CONFORM, "cases", "--op", op, "--dtype", dtype, "--cases", "3", "--out", d], check=True,
                       capture_output=True)
        return d

    def test_wrong_shape_and_unknown_output_name_the_case(self):
        d = self.generate("silu", "fp16")
        with self.assertRaisesRegex(ValueError, r"c00001\.safetensors: output 'y': shape \[1\], the case expects"):
            conform_cases.fill(d, lambda i, p: {"y": np.zeros(1)})
        with self.assertRaisesRegex(ValueError, r"c00001\.safetensors: fn returned outputs \['z'\]; silu has \['y'\]"):
            conform_cases.fill(d, lambda i, p: {"z": i["x"]})

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
