"""ONNX Runtime's CPU operators checked through conform case sets (docs/third_party.md).

Each operator is a one-node ONNX model run by onnxruntime's CPU execution
provider; the model's inputs are the case's inputs as they are (bf16 only
where the operator takes it).  What the harness computes itself is named in
the check's note (RoPE's cos/sin caches, quantize's scale).

    python3 python/third_party/onnxruntime_check.py --conform build/conform
"""
import math
import os
import sys

try:
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
except ImportError as e:
    print("SKIP: %s (bash scripts/setup installs onnxruntime and onnx into /opt/conform-venv)" % e)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Check, run_checks  # noqa: E402
from conform_cases import Unsupported  # noqa: E402

ELEM = {"fp32": TensorProto.FLOAT, "fp16": TensorProto.FLOAT16, "bf16": TensorProto.BFLOAT16}
NP = {"fp32": np.float32, "fp16": np.float16}
_sessions = {}


def session(key, nodes, inputs, outputs, opset=21, ms_opset=None, initializers=()):
    """An InferenceSession of one graph, made once per key."""
    if key not in _sessions:
        imports = [helper.make_opsetid("", opset)]
        if ms_opset:
            imports.append(helper.make_opsetid("com.microsoft", ms_opset))
        graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
        model = helper.make_model(graph, opset_imports=imports)
        model.ir_version = 10
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the operator as written
        _sessions[key] = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return _sessions[key]


def vi(name, elem, rank):
    return helper.make_tensor_value_info(name, elem, ["d%d_%s" % (i, name) for i in range(rank)])


def arr(a, dtype):
    """A case input as the session takes it (NumPy float32/float16; bf16 is not offered here)."""
    return np.ascontiguousarray(np.asarray(a, dtype=NP[dtype]))


def layer_norm(dtype):
    def fn(inputs, params):
        x = arr(inputs["x"], dtype)
        eps = float(params["eps"])
        s = session(("ln", dtype, eps, x.ndim), [helper.make_node(
            "LayerNormalization", ["x", "w", "b"], ["y"], axis=-1, epsilon=eps, stash_type=1)],
            [vi("x", ELEM[dtype], x.ndim), vi("w", ELEM[dtype], 1), vi("b", ELEM[dtype], 1)],
            [vi("y", ELEM[dtype], x.ndim)])
        return {"y": s.run(None, {"x": x, "w": arr(inputs["weight"], dtype), "b": arr(inputs["bias"], dtype)})[0]}
    return fn


def rms_norm(dtype):
    def fn(inputs, params):
        if params.get("zero_centered", 0):
            raise Unsupported("SimplifiedLayerNormalization has no zero-centred weight")
        x = arr(inputs["x"], dtype)
        eps = float(params["eps"])
        s = session(("rms", dtype, eps, x.ndim), [helper.make_node(
            "SimplifiedLayerNormalization", ["x", "w"], ["y"], axis=-1, epsilon=eps, stash_type=1)],
            [vi("x", ELEM[dtype], x.ndim), vi("w", ELEM[dtype], 1)], [vi("y", ELEM[dtype], x.ndim)])
        return {"y": s.run(None, {"x": x, "w": arr(inputs["weight"], dtype)})[0]}
    return fn


def softmax(dtype):
    def fn(inputs, params):
        x = arr(inputs["x"], dtype)
        s = session(("softmax", dtype, x.ndim), [helper.make_node("Softmax", ["x"], ["y"], axis=-1)],
                    [vi("x", ELEM[dtype], x.ndim)], [vi("y", ELEM[dtype], x.ndim)])
        return {"y": s.run(None, {"x": x})[0]}
    return fn


def unary(op_type, dtype, **attrs):
    """One ONNX node y = op_type(x, attrs)."""
    def fn(inputs, params):
        x = arr(inputs["x"], dtype)
        s = session((op_type, tuple(sorted(attrs.items())), dtype, x.ndim), [helper.make_node(op_type, ["x"], ["y"], **attrs)],
                    [vi("x", ELEM[dtype], x.ndim)], [vi("y", ELEM[dtype], x.ndim)], opset=20)
        return {"y": s.run(None, {"x": x})[0]}
    return fn


def softcap(dtype):
    """Gemma 2's softcap as exporters write it: Div by c, Tanh, Mul by c (c an initializer of the format)."""
    def fn(inputs, params):
        x = arr(inputs["x"], dtype)
        c = float(params["beta"])
        cap = numpy_helper.from_array(np.array(c, dtype=NP[dtype]), "c")
        nodes = [helper.make_node("Div", ["x", "c"], ["z"]), helper.make_node("Tanh", ["z"], ["t"]),
                 helper.make_node("Mul", ["t", "c"], ["y"])]
        s = session(("softcap", c, dtype, x.ndim), nodes, [vi("x", ELEM[dtype], x.ndim)], [vi("y", ELEM[dtype], x.ndim)],
                    initializers=[cap])
        return {"y": s.run(None, {"x": x})[0]}
    return fn


def gelu(dtype, approximate):
    return unary("Gelu", dtype, approximate=approximate)


def scaled_theta(params, r):
    """theta'_j of the rope op's frequency scaling (docs/rope.md), in float64 as a caller building the
    caches would: linear theta/s, llama3's bands and blend, yarn's ramp over the correction range."""
    b = params["base"] * params["ntk_scale"]
    theta = b ** (-np.arange(0, r, 2, dtype=np.float64) / r)
    kind, s = int(params.get("scaling", 0)), params.get("factor", 1.0)
    if kind == 1:
        return theta / s
    if kind == 2:
        l, h, L0 = params["low_freq_factor"], params["high_freq_factor"], params["original_max_pos"]
        wavelen = 2 * np.pi / theta
        sigma = np.clip((L0 / wavelen - l) / (h - l), 0, 1)
        return (1 - sigma) * theta / s + sigma * theta
    if kind == 3:
        L0 = params["original_max_pos"]
        lo, hi = (r * np.log(L0 / (2 * np.pi * beta)) / (2 * np.log(b)) for beta in (params["beta_fast"], params["beta_slow"]))
        if params.get("truncate", 1):
            lo, hi = np.floor(lo), np.ceil(hi)
        lo, hi = max(lo, 0), min(hi, r - 1)
        hi = hi + 0.001 if lo == hi else hi
        ramp = np.clip((np.arange(r // 2) - lo) / (hi - lo), 0, 1)
        return theta / s * ramp + theta * (1 - ramp)
    return theta


def rope(dtype):
    """com.microsoft RotaryEmbedding on x [H, L, D] as [1, H, L, D]; cos/sin caches from float64 angles
    (offset + l) theta'_j (the case's frequency scaling) times attention_factor, rounded to the format,
    one row per token."""
    def fn(inputs, params):
        x = arr(inputs["x"], dtype)
        heads, length, d = x.shape
        r = int(params["rotary_dim"]) or d
        offset = int(params["offset"])
        if r % 2 or r > d:
            raise Unsupported("an odd rotary dimension")
        theta, af = scaled_theta(params, r), params.get("attention_factor", 1.0)
        # rows of the caches for this case's positions only (offset may be large); position_ids index them
        angles = (offset + np.arange(length, dtype=np.float64))[:, None] * theta[None, :]
        cos, sin = (af * np.cos(angles)).astype(NP[dtype]), (af * np.sin(angles)).astype(NP[dtype])
        interleaved = 1 if params["pairing"] == 0 else 0
        s = session(("rope", dtype, interleaved, r, d, heads), [helper.make_node(
            "RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain="com.microsoft", interleaved=interleaved,
            rotary_embedding_dim=r if r < d else 0, num_heads=heads)],
            [vi("x", ELEM[dtype], 4), vi("pos", TensorProto.INT64, 2), vi("cos", ELEM[dtype], 2),
             vi("sin", ELEM[dtype], 2)], [vi("y", ELEM[dtype], 4)], ms_opset=1)
        pos = np.arange(length, dtype=np.int64)[None, :]
        y = s.run(None, {"x": x[None], "pos": pos, "cos": cos, "sin": sin})[0]
        return {"y": y[0]}
    return fn


def quantize(dtype):
    """QuantizeLinear (int8, zero point 0) with the scale conform's formula gives: fl32(amax / 127) per group."""
    def fn(inputs, params):
        x = np.asarray(inputs["x"], dtype=np.float32)
        axis = int(params["axis"])
        with np.errstate(all="ignore"):
            if params["scale"] > 0:
                scale = np.full((1,) if axis == 0 else (x.shape[axis - 1],), params["scale"], dtype=np.float32)
            else:
                a = np.abs(x.astype(np.float64))
                amax = a.max(initial=0.0) if axis == 0 else a.max(axis=1 if axis == 1 else 0, initial=0.0)
                amax = np.where(np.isfinite(np.asarray(x.astype(np.float64)).sum(
                    axis=None if axis == 0 else (1 if axis == 1 else 0))), amax, np.nan)
                scale = np.atleast_1d((amax / 127.0).astype(np.float32))
        if axis == 0:
            node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"])
            feeds_s, zp = scale.reshape(()), np.zeros((), np.int8)
        else:
            node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=axis - 1)
            feeds_s, zp = scale, np.zeros(scale.shape, np.int8)
        s = session(("quantize", axis), [node], [vi("x", TensorProto.FLOAT, 2), vi("s", TensorProto.FLOAT, feeds_s.ndim),
                                                 vi("z", TensorProto.INT8, zp.ndim)], [vi("q", TensorProto.INT8, 2)])
        q = s.run(None, {"x": x, "s": feeds_s, "z": zp})[0]
        full = np.broadcast_to(scale.reshape(1, 1) if axis == 0 else
                               (scale[:, None] if axis == 1 else scale[None, :]), x.shape)
        return {"q": q, "scale": np.ascontiguousarray(full)}
    return fn


def matmul_integer(dtype):
    """MatMulInteger alone: acc (y declared unwritten)."""
    def fn(inputs, params):
        a, b = np.asarray(inputs["a"], np.int8), np.asarray(inputs["b"], np.int8)
        acc = session(("mmi",), [helper.make_node("MatMulInteger", ["a", "b"], ["acc"])],
                      [vi("a", TensorProto.INT8, 2), vi("b", TensorProto.INT8, 2)], [vi("acc", TensorProto.INT32, 2)])
        return {"acc": acc.run(None, {"a": a, "b": b})[0]}
    return fn


def int8_gemm(dtype):
    """MatMulInteger (acc) and com.microsoft MatMulIntegerToFloat (y)."""
    def fn(inputs, params):
        a, b = np.asarray(inputs["a"], np.int8), np.asarray(inputs["b"], np.int8)
        sa, sb = np.asarray(inputs["scale_a"], np.float32), np.asarray(inputs["scale_b"], np.float32)
        if sa.size != 1:
            raise Unsupported("MatMulIntegerToFloat takes one scale for A")
        acc = session(("mmi",), [helper.make_node("MatMulInteger", ["a", "b"], ["acc"])],
                      [vi("a", TensorProto.INT8, 2), vi("b", TensorProto.INT8, 2)], [vi("acc", TensorProto.INT32, 2)])
        y = session(("mmif", dtype), [helper.make_node("MatMulIntegerToFloat", ["a", "b", "sa", "sb"], ["y"],
                                                       domain="com.microsoft")],
                    [vi("a", TensorProto.INT8, 2), vi("b", TensorProto.INT8, 2), vi("sa", ELEM[dtype], 1),
                     vi("sb", ELEM[dtype], 1)], [vi("y", ELEM[dtype], 2)], ms_opset=1)
        return {"acc": acc.run(None, {"a": a, "b": b})[0],
                "y": y.run(None, {"a": a, "b": b, "sa": sa.reshape(1).astype(NP[dtype]),
                                  "sb": sb.astype(NP[dtype])})[0]}
    return fn


def group_query_attention(dtype, sinks=False):
    """com.microsoft GroupQueryAttention, batch 1, no rotary: q [Hq, Lq, D] as query [1, Lq, Hq*D]; the first
    Lk - Lq keys and values as past_key/past_value [1, Hkv, Lk - Lq, D] (BNSH), the last Lq as key/value
    [1, Lq, Hkv*D]; seqlens_k = Lk - 1, total_sequence_length = Lk; the mask as attention_bias [1, 1, Lq, Lk];
    the attribute causal = the case's causal, and a window W as local_window_size W with causal 1 (ORT's
    local_window_size counts the query's own key, as conform's window does).  With sinks (op sink_attention),
    the sinks as head_sink [Hq] (input 11, GPT-OSS's)."""
    def fn(inputs, params):
        q, k, v = (arr(inputs[n], dtype) for n in ("q", "k", "v"))
        heads, lq, d = q.shape
        kv_heads, lk, dv = v.shape
        if dv != d:
            raise Unsupported("GroupQueryAttention takes one head size for keys and values")
        if lq > lk:
            raise Unsupported("the new queries are the last of the total sequence: Lq > Lk is not expressible")
        window = int(params["window"])
        causal = 1 if params["causal"] or window > 0 else 0
        scale, softcap = float(params["scale"]), float(params["softcap"])
        mask = arr(inputs["mask"], dtype) if "mask" in inputs else None
        attrs = {"num_heads": heads, "kv_num_heads": kv_heads, "causal": causal}
        if window > 0:
            attrs["local_window_size"] = window
        if scale != 0:
            attrs["scale"] = scale
        if softcap != 0:
            attrs["softcap"] = softcap
        names = ["q", "k", "v", "pk", "pv", "seqlens_k", "total"] + (["", "", "", "bias"] if mask is not None else [])
        if sinks:
            names += [""] * (11 - len(names)) + ["sink"]
        e = ELEM[dtype]
        s = session(("gqa", dtype, mask is not None, sinks) + tuple(sorted(attrs.items())), [helper.make_node(
            "GroupQueryAttention", names, ["o", "present_k", "present_v"], domain="com.microsoft", **attrs)],
            [vi("q", e, 3), vi("k", e, 3), vi("v", e, 3), vi("pk", e, 4), vi("pv", e, 4),
             vi("seqlens_k", TensorProto.INT32, 1), helper.make_tensor_value_info("total", TensorProto.INT32, [])]
            + ([vi("bias", e, 4)] if mask is not None else []) + ([vi("sink", e, 1)] if sinks else []),
            [vi("o", e, 3), vi("present_k", e, 4), vi("present_v", e, 4)], ms_opset=1)
        past = lk - lq
        feeds = {"q": np.ascontiguousarray(q.transpose(1, 0, 2).reshape(1, lq, heads * d)),
                 "k": np.ascontiguousarray(k[:, past:].transpose(1, 0, 2).reshape(1, lq, kv_heads * d)),
                 "v": np.ascontiguousarray(v[:, past:].transpose(1, 0, 2).reshape(1, lq, kv_heads * dv)),
                 "pk": np.ascontiguousarray(k[None, :, :past]), "pv": np.ascontiguousarray(v[None, :, :past]),
                 "seqlens_k": np.array([lk - 1], np.int32), "total": np.array(lk, np.int32)}
        if mask is not None:
            feeds["bias"] = mask[None, None]
        if sinks:
            feeds["sink"] = arr(inputs["sinks"], dtype)
        o = s.run(["o"], feeds)[0]
        return {"o": np.ascontiguousarray(o.reshape(lq, heads, dv).transpose(1, 0, 2))}
    return fn


CHECKS = [
    Check("LayerNormalization", "layer_norm", "fp32", layer_norm("fp32")),
    Check("LayerNormalization", "layer_norm", "fp16", layer_norm("fp16")),
    Check("SimplifiedLayerNormalization", "rms_norm", "fp32", rms_norm("fp32"), domain={"zero_centered": [0]},
          note="no zero-centred weight: the domain excludes it, zero_centered_equivalence is not run"),
    Check("SimplifiedLayerNormalization", "rms_norm", "fp16", rms_norm("fp16"), domain={"zero_centered": [0]}),
    Check("Softmax", "softmax", "fp32", softmax("fp32")),
    Check("Softmax", "softmax", "fp32", softmax("fp32"), conventions={"masked_row": "nan"}),
    # MLAS's AVX2 softmax flushes subnormal results (its AVX-512 one does not): the profile that admits it.
    Check("Softmax", "softmax", "fp32", softmax("fp32"), conventions={"masked_row": "nan"}, profile="strict+ftz"),
    Check("Softmax", "softmax", "fp16", softmax("fp16")),
    Check("Softmax", "softmax", "fp16", softmax("fp16"), conventions={"masked_row": "nan"}),
    Check("Gelu(none)", "gelu_erf", "fp32", gelu("fp32", "none")),
    Check("Gelu(tanh)", "gelu_tanh", "fp32", gelu("fp32", "tanh")),
    Check("Gelu(none)", "gelu_erf", "fp16", gelu("fp16", "none")),
    # The same declared: the textbook forms in FP32, IEEE specials (docs/activation.md, "Arithmetic classes").
    Check("Gelu(none)", "gelu_erf", "fp32", gelu("fp32", "none"),
          conventions={"act_arith": "one_plus_erf", "special_values": "ieee"}),
    Check("Gelu(tanh)", "gelu_tanh", "fp32", gelu("fp32", "tanh"),
          conventions={"act_arith": "one_plus_tanh", "special_values": "ieee"}),
    Check("Gelu(none)", "gelu_erf", "fp16", gelu("fp16", "none"),
          conventions={"act_arith": "one_plus_erf", "special_values": "ieee"}),
    Check("Softplus", "softplus", "fp32", unary("Softplus", "fp32")),
    Check("Softplus", "softplus", "fp32", unary("Softplus", "fp32"),
          conventions={"act_arith": "log1p_exp", "special_values": "ieee"}),
    Check("Div+Tanh+Mul", "softcap", "fp32", softcap("fp32"), conventions={"act_arith": "scaled_tanh"},
          note="Gemma 2's softcap as exported: x / c, Tanh, * c"),
    Check("RotaryEmbedding", "rope", "fp32", rope("fp32"), note="cos/sin caches: float64 angles rounded to fp32"),
    Check("RotaryEmbedding", "rope", "fp16", rope("fp16"), note="cos/sin caches: float64 angles rounded to fp16"),
    Check("QuantizeLinear", "quantize", "fp32", quantize("fp32"),
          note="scale = fl32(amax / 127) per group computed by the harness; q is ORT's"),
    Check("MatMulInteger", "int8_gemm", "fp32", matmul_integer("fp32"), unwritten=["y"]),
    Check("MatMulInteger+MatMulIntegerToFloat", "int8_gemm", "fp32", int8_gemm("fp32"),
          note="cases with a per-row scale_a are not expressible: not run"),
]
# GroupQueryAttention takes one head size for keys and values, and its queries are the newest tokens of the
# sequence (Lq <= Lk: kv_len at least 16, the longest q_len the generator draws); it returns no lse.
GQA_DOMAIN = {"head_dim": [16], "v_head_dim": [16], "kv_len": {"min": 16}}
GQA_NOTE = ("layout only: past_key/past_value hold the first Lk - Lq keys and values, key/value the last Lq; "
            "head sizes 16, Lk >= 16; lse unwritten (key_count not run)")
for dt in ("fp32", "fp16"):
    CHECKS += [
        Check("GroupQueryAttention", "attention", dt, group_query_attention(dt), domain=GQA_DOMAIN,
              unwritten=["lse"], cases=12, weight=4, note=GQA_NOTE),
        Check("GroupQueryAttention", "attention", dt, group_query_attention(dt), domain=GQA_DOMAIN,
              unwritten=["lse"], conventions={"masked_row": "nan"}, cases=12, weight=4, note=GQA_NOTE),
        # GPT-OSS's sinks as head_sink, declared as GQA's empty rows come out (undeclared, they are the failures).
        Check("GroupQueryAttention(head_sink)", "sink_attention", dt, group_query_attention(dt, sinks=True),
              domain=GQA_DOMAIN, unwritten=["lse"], conventions={"masked_row": "nan"}, cases=12, weight=4,
              note=GQA_NOTE + "; sinks as head_sink"),
    ]

EXPECTED = {  # measured verdicts (docs/third_party.md): seed 1, each check's case count
    'LayerNormalization/fp32': {'within_budget': 'FAIL', 'special_values': 'FAIL', 'rounding_bias': 'PASS'},
    'LayerNormalization/fp16': {'within_budget': 'PASS', 'special_values': 'PASS', 'rounding_bias': 'PASS'},
    'SimplifiedLayerNormalization/fp32': {'within_budget': 'FAIL', 'special_values': 'FAIL', 'scale_invariance': 'PASS', 'zero_centered_equivalence': 'FAIL', 'rounding_bias': 'PASS'},
    'SimplifiedLayerNormalization/fp16': {'within_budget': 'PASS', 'special_values': 'PASS', 'scale_invariance': 'PASS', 'zero_centered_equivalence': 'NOT RUN', 'rounding_bias': 'PASS'},
    'Softmax/fp32': {'within_budget': 'FAIL', 'special_values': 'FAIL', 'shift_invariance': 'FAIL', 'masked_rows': 'FAIL', 'rounding_bias': 'PASS'},
    'Softmax/fp32 masked_row=nan': {'within_budget': 'PASS', 'special_values': 'PASS', 'shift_invariance': 'PASS', 'masked_rows': 'PASS', 'rounding_bias': 'PASS'},
    'Softmax/fp16': {'within_budget': 'FAIL', 'special_values': 'PASS', 'shift_invariance': 'FAIL', 'masked_rows': 'FAIL', 'rounding_bias': 'PASS'},
    'Softmax/fp16 masked_row=nan': {'within_budget': 'PASS', 'special_values': 'PASS', 'shift_invariance': 'PASS', 'masked_rows': 'PASS', 'rounding_bias': 'PASS'},
    'Gelu(none)/fp32': {'within_budget': 'FAIL', 'special_values': 'FAIL', 'rounding_bias': 'PASS'},
    'Gelu(tanh)/fp32': {'within_budget': 'FAIL', 'special_values': 'FAIL', 'rounding_bias': 'PASS'},
    'Gelu(none)/fp16': {'within_budget': 'FAIL', 'special_values': 'FAIL', 'rounding_bias': 'PASS'},
    'RotaryEmbedding/fp32': {'within_budget': 'PASS', 'special_values': 'PASS', 'position_zero_identity': 'PASS', 'ntk_identity': 'PASS', 'pairing_permutation': 'PASS', 'offset_consistency': 'PASS', 'pass_through': 'PASS', 'parameter_sensitivity': 'PASS', 'rounding_bias': 'PASS'},
    'RotaryEmbedding/fp16': {'within_budget': 'FAIL', 'special_values': 'FAIL', 'position_zero_identity': 'PASS', 'ntk_identity': 'PASS', 'pairing_permutation': 'PASS', 'offset_consistency': 'PASS', 'pass_through': 'PASS', 'parameter_sensitivity': 'PASS', 'rounding_bias': 'PASS'},
    'QuantizeLinear/fp32': {'within_budget': 'FAIL', 'special_values': 'FAIL', 'ties_to_even': 'PASS', 'outlier_token_isolation': 'PASS', 'monotone': 'PASS', 'rounding_bias': 'PASS'},
    'MatMulInteger/fp32': {'within_budget': 'PASS', 'special_values': 'PASS', 'extreme_operands': 'PASS', 'rounding_bias': 'PASS'},
    'MatMulInteger+MatMulIntegerToFloat/fp32': {'within_budget': 'NOT RUN', 'special_values': 'NOT RUN', 'extreme_operands': 'PASS'},
    'GroupQueryAttention/fp32': {'within_budget': 'PASS', 'special_values': 'FAIL', 'parameter_sensitivity': 'PASS', 'tile_invariance': 'FAIL', 'mask_shift_invariance': 'FAIL', 'causality': 'FAIL', 'gqa_replication': 'PASS', 'large_values': 'PASS', 'rounding_bias': 'PASS'},
    'GroupQueryAttention/fp32 masked_row=nan': {'within_budget': 'FAIL', 'special_values': 'FAIL', 'parameter_sensitivity': 'PASS', 'tile_invariance': 'PASS', 'mask_shift_invariance': 'FAIL', 'causality': 'FAIL', 'gqa_replication': 'PASS', 'large_values': 'PASS', 'rounding_bias': 'PASS'},
    'GroupQueryAttention/fp16': {'within_budget': 'PASS', 'special_values': 'FAIL', 'parameter_sensitivity': 'PASS', 'tile_invariance': 'FAIL', 'mask_shift_invariance': 'FAIL', 'causality': 'FAIL', 'gqa_replication': 'PASS', 'large_values': 'PASS', 'rounding_bias': 'PASS'},
    'GroupQueryAttention/fp16 masked_row=nan': {'within_budget': 'PASS', 'special_values': 'FAIL', 'parameter_sensitivity': 'PASS', 'tile_invariance': 'PASS', 'mask_shift_invariance': 'PASS', 'causality': 'FAIL', 'gqa_replication': 'PASS', 'large_values': 'PASS', 'rounding_bias': 'PASS'},
    'GroupQueryAttention(head_sink)/fp32 masked_row=nan': {'within_budget': 'PASS', 'special_values': 'FAIL', 'parameter_sensitivity': 'PASS', 'tile_invariance': 'PASS', 'mask_shift_invariance': 'PASS', 'causality': 'FAIL', 'gqa_replication': 'PASS', 'large_values': 'PASS', 'rounding_bias': 'PASS'},
    'GroupQueryAttention(head_sink)/fp16 masked_row=nan': {'within_budget': 'PASS', 'special_values': 'FAIL', 'parameter_sensitivity': 'PASS', 'tile_invariance': 'PASS', 'mask_shift_invariance': 'PASS', 'causality': 'FAIL', 'gqa_replication': 'PASS', 'large_values': 'PASS', 'rounding_bias': 'PASS'},
    'Gelu(none)/fp32 act_arith=one_plus_erf,special_values=ieee': {'within_budget': 'PASS', 'special_values': 'PASS', 'rounding_bias': 'PASS'},
    'Gelu(none)/fp16 act_arith=one_plus_erf,special_values=ieee': {'within_budget': 'PASS', 'special_values': 'PASS', 'rounding_bias': 'PASS'},
    'Gelu(tanh)/fp32 act_arith=one_plus_tanh,special_values=ieee': {'within_budget': 'FAIL', 'special_values': 'PASS', 'rounding_bias': 'PASS'},
    'Div+Tanh+Mul/fp32 act_arith=scaled_tanh': {'within_budget': 'FAIL', 'special_values': 'FAIL', 'parameter_sensitivity': 'PASS', 'softcap_bound': 'PASS', 'rounding_bias': 'FAIL'},
    'Softplus/fp32': {'within_budget': 'FAIL', 'special_values': 'FAIL', 'rounding_bias': 'PASS'},
    'Softplus/fp32 act_arith=log1p_exp,special_values=ieee': {'within_budget': 'FAIL', 'special_values': 'FAIL', 'rounding_bias': 'PASS'},
    'Softmax/fp32 masked_row=nan,profile=strict+ftz': {'within_budget': 'PASS', 'special_values': 'PASS', 'shift_invariance': 'PASS', 'masked_rows': 'PASS', 'rounding_bias': 'PASS'},
}

# Where the verdict depends on the kernels MLAS picks for the host (measured on the 2-vCPU AMD EPYC VM without AVX-512).
EXPECTED_BY_ISA = {
    'avx2': {
        'Softmax/fp32 masked_row=nan': {'within_budget': 'PASS', 'special_values': 'FAIL', 'shift_invariance': 'FAIL', 'masked_rows': 'PASS', 'rounding_bias': 'PASS'},
    },
}

if __name__ == "__main__":
    sys.exit(run_checks(CHECKS, EXPECTED, "onnxruntime " + ort.__version__, by_isa=EXPECTED_BY_ISA))
