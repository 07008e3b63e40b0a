#!/usr/bin/env python3
"""ggml's CPU kernels judged by conform (docs/third_party.md, "ggml (CPU)").

Runs `conform check-plugin` on the ggml plug-in (third_party/ggml/conform_ggml.c,
built by scripts/ggml-check) at seed 1 with the default case count, once as
exported and once per declared variant below, prints one markdown row per
kernel (its verdict per property, the tightest accuracy profile it meets, its
largest error per region, its first failure), and compares the verdicts with
the ones docs/third_party.md records (EXPECTED): exit status 1 when any
differs, 77 (CTest's skip) when the plug-in library is absent.

    python3 third_party/ggml/check.py --conform build/conform --plugin build-ggml/libconform_ggml.so [--out DIR] [--record]
"""
import argparse
import json
import os
import subprocess
import sys

# Declared variants: (label, kernel, extra check-plugin arguments).
VARIANTS = [("masked_row=nan", "ggml.softmax.fp32", ["--convention", "masked_row=nan"])]
# The activations declared as ggml builds them: the textbook forms in FP32, IEEE
# specials (docs/activation.md, "Arithmetic classes").
for kernel, arith in [("ggml.silu.fp32", "quotient"), ("ggml.swiglu.fp32", "quotient"),
                      ("ggml.gelu_erf.fp32", "one_plus_erf"), ("ggml.geglu_erf.fp32", "one_plus_erf"),
                      ("ggml.gelu_tanh.fp32", "one_plus_tanh"), ("ggml.geglu_tanh.fp32", "one_plus_tanh"),
                      ("ggml.softplus.fp32", "log1p_exp"), ("ggml.softcap.fp32", "scaled_tanh")]:
    VARIANTS.append(("act_arith=%s,special_values=ieee" % arith, kernel,
                     ["--convention", "act_arith=" + arith, "--convention", "special_values=ieee"]))

EXPECTED = {  # measured verdicts (docs/third_party.md): seed 1, 100 cases per property
    "ggml.rms_norm.fp32": {"within_budget": "FAIL", "special_values": "FAIL", "scale_invariance": "PASS",
                           "zero_centered_equivalence": "PASS", "rounding_bias": "PASS"},
    "ggml.layer_norm.fp32": {"within_budget": "FAIL", "special_values": "FAIL", "rounding_bias": "PASS"},
    "ggml.softmax.fp32": {"within_budget": "FAIL", "special_values": "PASS", "shift_invariance": "FAIL",
                          "masked_rows": "FAIL", "rounding_bias": "PASS"},
    "ggml.softmax.fp32 masked_row=nan": {"within_budget": "PASS", "special_values": "PASS", "shift_invariance": "PASS",
                                         "masked_rows": "PASS", "rounding_bias": "PASS"},
    "ggml.silu.fp32": {"within_budget": "FAIL", "special_values": "FAIL", "rounding_bias": "PASS"},
    "ggml.gelu_tanh.fp32": {"within_budget": "FAIL", "special_values": "FAIL", "rounding_bias": "PASS"},
    "ggml.gelu_erf.fp32": {"within_budget": "FAIL", "special_values": "FAIL", "rounding_bias": "PASS"},
    "ggml.softplus.fp32": {"within_budget": "FAIL", "special_values": "FAIL", "rounding_bias": "PASS"},
    "ggml.softcap.fp32": {"within_budget": "FAIL", "special_values": "FAIL", "parameter_sensitivity": "PASS",
                          "softcap_bound": "PASS", "rounding_bias": "PASS"},
    "ggml.swiglu.fp32": {"within_budget": "FAIL", "special_values": "FAIL", "rounding_bias": "PASS"},
    "ggml.geglu_tanh.fp32": {"within_budget": "FAIL", "special_values": "FAIL", "rounding_bias": "PASS"},
    "ggml.geglu_erf.fp32": {"within_budget": "FAIL", "special_values": "FAIL", "rounding_bias": "PASS"},
    "ggml.rope.fp32": {"within_budget": "FAIL", "special_values": "FAIL", "position_zero_identity": "PASS",
                       "ntk_identity": "PASS", "pairing_permutation": "PASS", "offset_consistency": "PASS",
                       "pass_through": "PASS", "parameter_sensitivity": "PASS", "rounding_bias": "PASS",
                       "rope_invariance_curve": "FAIL"},
    "ggml.attention.f16kv": {"within_budget": "FAIL", "special_values": "FAIL", "parameter_sensitivity": "PASS",
                             "tile_invariance": "FAIL", "mask_shift_invariance": "FAIL", "causality": "PASS",
                             "gqa_replication": "PASS", "large_values": "FAIL", "rounding_bias": "PASS"},
    "ggml.attention.f32kv": {"within_budget": "PASS", "special_values": "PASS", "parameter_sensitivity": "PASS",
                             "tile_invariance": "PASS", "mask_shift_invariance": "PASS", "causality": "PASS",
                             "gqa_replication": "PASS", "large_values": "PASS", "rounding_bias": "PASS"},
    "ggml.softcap.fp32 act_arith=scaled_tanh,special_values=ieee": {"within_budget": "PASS", "special_values": "PASS",
                                                                   "parameter_sensitivity": "PASS", "softcap_bound": "PASS",
                                                                   "rounding_bias": "FAIL"},
    "ggml.softplus.fp32 act_arith=log1p_exp,special_values=ieee": {"within_budget": "FAIL", "special_values": "FAIL", "rounding_bias": "PASS"},
    "ggml.silu.fp32 act_arith=quotient,special_values=ieee": {"within_budget": "PASS", "special_values": "PASS", "rounding_bias": "FAIL"},
    "ggml.swiglu.fp32 act_arith=quotient,special_values=ieee": {"within_budget": "PASS", "special_values": "PASS", "rounding_bias": "PASS"},
    "ggml.gelu_erf.fp32 act_arith=one_plus_erf,special_values=ieee": {"within_budget": "PASS", "special_values": "PASS", "rounding_bias": "PASS"},
    "ggml.geglu_erf.fp32 act_arith=one_plus_erf,special_values=ieee": {"within_budget": "PASS", "special_values": "PASS", "rounding_bias": "PASS"},
    "ggml.gelu_tanh.fp32 act_arith=one_plus_tanh,special_values=ieee": {"within_budget": "FAIL", "special_values": "FAIL", "rounding_bias": "PASS"},
    "ggml.geglu_tanh.fp32 act_arith=one_plus_tanh,special_values=ieee": {"within_budget": "FAIL", "special_values": "FAIL", "rounding_bias": "PASS"},
}


def status(p):
    return "PASS" if p["passed"] else "NOT RUN" if p["message"].startswith("not run") else "FAIL"


def check_plugin(conform, plugin, out, extra):
    """One check-plugin run into `out`: its report's kernels (exit 0 or 1 both judged)."""
    r = subprocess.run([conform, "check-plugin", plugin, "--out", out] + extra, capture_output=True, text=True)
    if r.returncode not in (0, 1):
        raise SystemExit("conform check-plugin %s: exit %d\n%s%s" % (plugin, r.returncode, r.stderr, r.stdout[-2000:]))
    with open(os.path.join(out, "check-plugin.json")) as f:
        return json.load(f)["report"]["kernels"]


def row(key, rep):
    """kernel | verdicts | tightest profile | max ulp per region | first failure."""
    verdicts = {p["name"]: status(p) for p in rep["properties"]}
    failed = [p for p in rep["properties"] if not p["passed"]]
    first = failed[0]["message"].split("\n")[0][:200] if failed else "-"
    regions = ", ".join("%s %d" % (r["name"], r["max_ulp"]) for r in rep["stats"]["regions"] if r["elements"])
    cells = ", ".join("%s %s" % (n, s) for n, s in verdicts.items())
    print("| `%s` | %s | %s | %s | %s |" % (key, cells, rep["stats"].get("tightest_profile") or "none", regions or "-",
                                           first.replace("|", "\\|")))
    return verdicts


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--conform", default="conform")
    ap.add_argument("--plugin", required=True, help="the built plug-in (scripts/ggml-check)")
    ap.add_argument("--out", default="ggml-report", help="check-plugin reports go under this directory")
    ap.add_argument("--record", action="store_true", help="print the EXPECTED dict of these verdicts")
    args = ap.parse_args()
    if not os.path.exists(args.plugin):
        print("SKIP: %s is not built (bash scripts/ggml-check builds it)" % args.plugin)
        return 77
    measured = {}
    print("| kernel | verdicts | tightest profile | largest error (ulp) by region | first failure |")
    print("|---|---|---|---|---|")
    for rep in check_plugin(args.conform, args.plugin, os.path.join(args.out, "as-exported"), []):
        measured[rep["kernel"]] = row(rep["kernel"], rep)
    for label, kernel, extra in VARIANTS:
        out = os.path.join(args.out, kernel + "." + label.replace("=", "-"))
        for rep in check_plugin(args.conform, args.plugin, out, ["--kernel", kernel] + extra):
            key = "%s %s" % (kernel, label)
            measured[key] = row(key, rep)
    if args.record:
        print(json.dumps(measured, indent=1))
    differ = ["%s: recorded %s, measured %s" % (k, EXPECTED.get(k), v) for k, v in measured.items() if EXPECTED.get(k) != v]
    differ += ["%s: recorded, not measured" % k for k in EXPECTED if k not in measured]
    for d in differ:
        print("DIFFERS " + d)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
