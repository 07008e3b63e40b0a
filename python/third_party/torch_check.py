"""PyTorch's kernels checked through conform case sets (docs/third_party.md):
F.scaled_dot_product_attention under each backend it offers (flash,
memory-efficient, cuDNN, math) in FP16 and BF16 — causal and GQA cases come
from the suite's generators — F.rms_norm, F.silu, F.gelu (both forms),
F.softplus, and transformers' GPT-OSS eager attention with sinks (op
sink_attention) when transformers is importable.

Made for a GPU (scripts/gpu-third-party runs it there); --device cpu runs the
same checks on PyTorch's CPU kernels (the math backend only).  A case a
backend refuses ("No available kernel", an unsupported mask or shape) is
left without outputs: it and its properties are reported not run.  SDPA
returns no log-sum-exp, so `lse` is declared unwritten.  SDPA takes either a
mask or is_causal: a causal case with a mask gets is_causal's own mask
(top-left, torch.ones(Lq, Lk).tril()) added to it as -inf.

    python3 python/third_party/torch_check.py --conform build/conform [--device cuda] [--json out.json]
"""
import os
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print("SKIP: %s" % e)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Check, run_checks  # noqa: E402
from conform_cases import Unsupported  # noqa: E402

DEVICE = "cuda"
for i, a in enumerate(sys.argv):
    if a == "--device" and i + 1 < len(sys.argv):
        DEVICE = sys.argv[i + 1]
        del sys.argv[i:i + 2]
        break
TORCH = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def tensor(a, dtype):
    """A case input on the device in the case's format (bf16 arrives as ml_dtypes or float32 values: exact)."""
    return torch.from_numpy(np.asarray(a, dtype=np.float32)).to(DEVICE).to(TORCH[dtype])


def unary(f, dtype):
    def fn(inputs, params):
        return {"y": f(tensor(inputs["x"], dtype))}
    return fn


def rms_norm(dtype):
    def fn(inputs, params):
        if params.get("zero_centered", 0):
            raise Unsupported("F.rms_norm has no zero-centred weight")
        x = tensor(inputs["x"], dtype)
        return {"y": F.rms_norm(x, (x.shape[-1],), weight=tensor(inputs["weight"], dtype), eps=float(params["eps"]))}
    return fn


def backends():
    from torch.nn.attention import SDPBackend
    names = {"math": SDPBackend.MATH}
    if DEVICE == "cuda":
        names.update(flash=SDPBackend.FLASH_ATTENTION, efficient=SDPBackend.EFFICIENT_ATTENTION,
                     cudnn=SDPBackend.CUDNN_ATTENTION)
    return names


def sdpa(dtype, backend):
    from torch.nn.attention import sdpa_kernel

    def fn(inputs, params):
        if params["softcap"] > 0 or params["window"] > 0:
            raise Unsupported("scaled_dot_product_attention has no softcap or window")
        q, k, v = (tensor(inputs[n], dtype)[None] for n in ("q", "k", "v"))  # [1, H, L, D]
        if backend == "efficient" and q.shape[1] != k.shape[1]:  # it refuses GQA: the same heads, repeated
            group = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        mask = tensor(inputs["mask"], dtype) if "mask" in inputs else None
        causal = bool(params["causal"])
        if causal and mask is not None:  # SDPA takes one or the other: is_causal's own mask (top-left) added in
            lq, lk = q.shape[2], k.shape[2]
            hidden = torch.ones(lq, lk, dtype=torch.bool, device=DEVICE).tril().logical_not()
            mask = mask.masked_fill(hidden, float("-inf"))
            causal = False
        try:
            with sdpa_kernel([backends()[backend]]):
                o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                                   scale=None if params["scale"] == 0 else float(params["scale"]),
                                                   enable_gqa=q.shape[1] != k.shape[1])
        except RuntimeError as e:  # the backend refuses these inputs
            raise Unsupported(str(e))
        return {"o": o[0]}
    return fn


def gpt_oss_eager(dtype):
    """transformers' GPT-OSS eager_attention_forward as the model calls it: the
    causal and window structure and the case's -inf entries become the
    additive mask HF builds (the format's lowest finite value where a key is
    hidden), the case's other mask values added; the sinks are the module's."""
    import types
    from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward

    def fn(inputs, params):
        if params["softcap"] > 0:
            raise Unsupported("GPT-OSS attention has no softcap")
        q, k, v = (tensor(inputs[n], dtype)[None] for n in ("q", "k", "v"))  # [1, H, L, D]
        lq, lk = q.shape[2], k.shape[2]
        pos = torch.arange(lq, device=DEVICE)[:, None] + (lk - lq)  # bottom-right: the queries are the last Lq
        j = torch.arange(lk, device=DEVICE)[None, :]
        hidden = torch.zeros(lq, lk, dtype=torch.bool, device=DEVICE)
        window = int(params["window"])
        if params["causal"] or window > 0:
            hidden |= j > pos
        if window > 0:
            hidden |= j <= pos - window
        add = tensor(inputs["mask"], dtype) if "mask" in inputs else torch.zeros(lq, lk, dtype=TORCH[dtype], device=DEVICE)
        hidden |= torch.isneginf(add)
        mask = add.masked_fill(hidden, torch.finfo(TORCH[dtype]).min)[None, None]
        module = types.SimpleNamespace(num_key_value_groups=q.shape[1] // k.shape[1], training=False,
                                       sinks=tensor(inputs["sinks"], dtype))
        scale = float(params["scale"]) if params["scale"] != 0 else q.shape[-1] ** -0.5
        o, _ = eager_attention_forward(module, q, k, v, mask, scale)
        return {"o": o[0].transpose(0, 1)}  # [L, H, Dv] -> [H, L, Dv]
    return fn


def has_transformers():
    try:
        import transformers.models.gpt_oss.modeling_gpt_oss  # noqa: F401
        return True
    except ImportError:
        return False


DOMAIN = {"softcap": [0], "window": [0]}
# What each GPU backend accepts, so that its cases run rather than being refused
# (a property with a refused case is not run): head sizes 64 (D = Dv, a
# multiple of 8); flash takes no additive mask, and is_causal only when
# Lq = Lk (there both alignments agree, so one causal check at Lq = Lk = 64
# and the lengths free without causality); cuDNN no single key.
HEADS = {"head_dim": [64], "v_head_dim": [64]}
GPU_DOMAINS = {
    "flash": [(dict(HEADS, mask=[0], causal=[0]), None, "no mask, not causal"),
              (dict(HEADS, mask=[0], causal=[1], q_len=[64], kv_len=[64]), None, "causal: no mask, Lq = Lk = 64")],
    "efficient": [(HEADS, None, ""), (HEADS, {"causal": "top_left"}, "")],
    "cudnn": [(dict(HEADS, kv_len={"min": 2}), None, ""), (dict(HEADS, kv_len={"min": 2}), {"causal": "top_left"}, "")],
}
CHECKS = []
for dt in ("fp16", "bf16"):
    for b in backends():
        variants = GPU_DOMAINS.get(b, [({}, None, ""), ({}, {"causal": "top_left"}, "")])
        for extra, conv, note in variants:
            label = b + (", causal" if note.startswith("causal") else "")
            CHECKS.append(Check("F.scaled_dot_product_attention[%s]" % label, "attention", dt, sdpa(dt, b),
                                domain=dict(DOMAIN, **extra), unwritten=["lse"], conventions=conv,
                                note=("head sizes 64; " + note) if extra else note))
    CHECKS += [
        Check("F.rms_norm", "rms_norm", dt, rms_norm(dt), domain={"zero_centered": [0]}),
        Check("F.silu", "silu", dt, unary(F.silu, dt)),
        Check("F.gelu(approximate='none')", "gelu_erf", dt, unary(F.gelu, dt)),
        Check("F.gelu(approximate='tanh')", "gelu_tanh", dt, unary(lambda x: F.gelu(x, approximate="tanh"), dt)),
        Check("F.softplus", "softplus", dt, unary(F.softplus, dt)),
    ]
    # The same declared as PyTorch builds them: the textbook forms in FP32, IEEE
    # specials (docs/activation.md, "Arithmetic classes").
    CHECKS += [
        Check(name, op, dt, fn, conventions={"act_arith": arith, "special_values": "ieee"})
        for name, op, arith, fn in [
            ("F.silu", "silu", "quotient", unary(F.silu, dt)),
            ("F.gelu(approximate='none')", "gelu_erf", "one_plus_erf", unary(F.gelu, dt)),
            ("F.gelu(approximate='tanh')", "gelu_tanh", "one_plus_tanh",
             unary(lambda x: F.gelu(x, approximate="tanh"), dt)),
            ("F.softplus", "softplus", "log1p_exp", unary(F.softplus, dt))]
    ]

# GPT-OSS's eager attention (transformers), in FP32 and in BF16, the model's
# format, declared as it computes: BF16 logits, weights and output
# (attention_arith = input), subnormals flushed (+ftz).  Each also without
# hidden keys (no mask, causal or window), where only its arithmetic is judged.
if has_transformers():
    GPT_OSS = "GptOss eager_attention_forward"
    NO_HIDDEN = {"softcap": [0], "mask": [0], "causal": [0], "window": [0]}
    for name, domain in ((GPT_OSS, {"softcap": [0]}), (GPT_OSS + " (no hidden keys)", NO_HIDDEN)):
        CHECKS += [
            Check(name, "sink_attention", "fp32", gpt_oss_eager("fp32"), domain=domain, unwritten=["lse"]),
            Check(name, "sink_attention", "bf16", gpt_oss_eager("bf16"), domain=domain, unwritten=["lse"],
                  conventions={"attention_arith": "input"}, profile="strict+ftz"),
        ]

EXPECTED = {}  # never run on a GPU: nothing recorded (docs/third_party.md)

if __name__ == "__main__":
    if DEVICE == "cuda" and not torch.cuda.is_available():
        print("SKIP: torch.cuda.is_available() is False (use --device cpu for PyTorch's CPU kernels)")
        sys.exit(77)
    sys.exit(run_checks(CHECKS, EXPECTED, "torch %s %s" % (torch.__version__, DEVICE)))
