"""JAX on the CPU checked through conform case sets (docs/third_party.md):
jax.nn activations, softmax and dot_product_attention in FP32 and BF16.

Inputs reach JAX in the case's format (bf16 as jnp.bfloat16); the outputs
are JAX's, in that format.  Nothing is computed by the harness but the
layout: attention's q [Hq, Lq, D] becomes [1, Lq, Hq, D], and the
log-sum-exp comes from return_residual=True.  Elementwise inputs are
flattened and zero-padded to a power-of-two length, softmax's rows padded
to a power-of-two count (the padding's outputs dropped): JAX compiles each
op once per shape, and XLA's compilations were most of these checks' time
on the 2-core CI machine; the elementwise and row results are the same bits
at any length (checked on every function and format here when this was
introduced).

    python3 python/third_party/jax_check.py --conform build/conform
"""
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
try:
    import numpy as np
    import jax
    import jax.numpy as jnp
except ImportError as e:
    print("SKIP: %s (bash scripts/setup installs jax into /opt/conform-venv)" % e)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Check, run_checks  # noqa: E402
from conform_cases import Unsupported  # noqa: E402

JNP = {"fp32": jnp.float32, "bf16": jnp.bfloat16}


def _bucket(n, smallest):
    b = smallest
    while b < n:
        b *= 2
    return b


def _padded_rows(x, rows):
    """x [r, n] with zero rows appended up to `rows`."""
    out = np.zeros((rows,) + x.shape[1:], dtype=x.dtype)
    out[:x.shape[0]] = x
    return out


def unary(f, dtype):
    def fn(inputs, params):
        x = np.asarray(jnp.asarray(inputs["x"], dtype=JNP[dtype]))
        flat = x.reshape(-1, 1)
        y = np.asarray(f(jnp.asarray(_padded_rows(flat, _bucket(flat.shape[0], 256))[:, 0])))
        return {"y": y[:flat.shape[0]].reshape(x.shape)}
    return fn


def softmax(dtype):
    def fn(inputs, params):
        x = np.asarray(jnp.asarray(inputs["x"], dtype=JNP[dtype]))
        rows = x.reshape(-1, x.shape[-1])
        y = np.asarray(jax.nn.softmax(jnp.asarray(_padded_rows(rows, _bucket(rows.shape[0], 8))), axis=-1))
        return {"y": y[:rows.shape[0]].reshape(x.shape)}
    return fn


def _attention(q, k, v, bias, scale, causal, window):
    out, lse = jax.nn.dot_product_attention(
        q.transpose(1, 0, 2)[None], k.transpose(1, 0, 2)[None], v.transpose(1, 0, 2)[None],
        bias=None if bias is None else bias[None, None], scale=scale, is_causal=causal,
        local_window_size=(window - 1, 0) if window > 0 else None, return_residual=True)
    return out[0].transpose(1, 0, 2), lse[0].transpose(1, 0)


_attention_jit = jax.jit(_attention, static_argnames=("scale", "causal", "window"))  # one compilation per shape


def attention(dtype):
    def fn(inputs, params):
        if params["softcap"] > 0:
            raise Unsupported("dot_product_attention has no logit softcap")
        q, k, v = (jnp.asarray(inputs[n], dtype=JNP[dtype]) for n in ("q", "k", "v"))
        if v.shape[2] != q.shape[2]:
            raise Unsupported("dot_product_attention takes one head size for keys and values")
        bias = jnp.asarray(inputs["mask"], dtype=JNP[dtype]) if "mask" in inputs else None
        window = int(params["window"])
        o, lse = _attention_jit(q, k, v, bias, scale=None if params["scale"] == 0 else float(params["scale"]),
                                causal=bool(params["causal"]) or window > 0, window=window)
        return {"o": np.asarray(o), "lse": np.asarray(lse.astype(jnp.float32))}
    return fn


# dot_product_attention: no softcap, and one head size for keys and values.
DOMAIN = {"softcap": [0], "head_dim": [16], "v_head_dim": [16]}
CHECKS = []
for dt in ("fp32", "bf16"):
    CHECKS += [
        Check("jax.nn.sigmoid", "sigmoid", dt, unary(jax.nn.sigmoid, dt)),
        Check("jax.nn.silu", "silu", dt, unary(jax.nn.silu, dt)),
        Check("jax.nn.gelu(approximate=False)", "gelu_erf", dt, unary(lambda x: jax.nn.gelu(x, approximate=False), dt)),
        Check("jax.nn.gelu(approximate=True)", "gelu_tanh", dt, unary(lambda x: jax.nn.gelu(x, approximate=True), dt)),
        Check("jax.nn.softplus", "softplus", dt, unary(jax.nn.softplus, dt)),
    ]
    # The same declared as XLA's CPU activations are built: the textbook forms,
    # IEEE specials, subnormals flushed (docs/activation.md, "Arithmetic
    # classes": FP32 arithmetic; in bf16 XLA evaluates in bf16, outside them).
    CHECKS += [
        Check(name, op, dt, fn, conventions={"act_arith": arith, "special_values": "ieee"}, profile="strict+ftz")
        for name, op, arith, fn in [
            ("jax.nn.sigmoid", "sigmoid", "quotient", unary(jax.nn.sigmoid, dt)),
            ("jax.nn.silu", "silu", "quotient", unary(jax.nn.silu, dt)),
            ("jax.nn.gelu(approximate=False)", "gelu_erf", "one_plus_erf",
             unary(lambda x: jax.nn.gelu(x, approximate=False), dt)),
            ("jax.nn.gelu(approximate=True)", "gelu_tanh", "one_plus_tanh",
             unary(lambda x: jax.nn.gelu(x, approximate=True), dt))]
    ]
    # XLA's log1p is off the class's 1 ulp (2.5 ulps measured) only at some
    # arguments: about one case in a hundred reaches them.
    CHECKS.append(Check("jax.nn.softplus", "softplus", dt, unary(jax.nn.softplus, dt), cases=300, weight=4,
                        conventions={"act_arith": "log1p_exp", "special_values": "ieee"}, profile="strict+ftz",
                        note="300 cases"))
    CHECKS += [
        Check("jax.nn.softmax", "softmax", dt, softmax(dt)),
        Check("jax.nn.dot_product_attention", "attention", dt, attention(dt), domain=DOMAIN,
              cases=12, weight=4, group="attention/" + dt, note="head sizes 16 (one size for keys and values); softcap cases (parameter_sensitivity) are not run"),
        Check("jax.nn.dot_product_attention", "attention", dt, attention(dt), domain=DOMAIN,
              conventions={"causal": "top_left"}, cases=12, weight=4, group="attention/" + dt),
        Check("jax.nn.dot_product_attention", "attention", dt, attention(dt), domain=DOMAIN,
              conventions={"causal": "top_left", "masked_row": "nan"}, cases=12, weight=4, group="attention/" + dt),
    ]

EXPECTED = {  # measured verdicts (docs/third_party.md): seed 1, each check's case count
    'jax.nn.sigmoid/fp32': {'within_budget': 'FAIL', 'special_values': 'FAIL', 'rounding_bias': 'PASS'},
    'jax.nn.silu/fp32': {'within_budget': 'FAIL', 'special_values': 'FAIL', 'rounding_bias': 'PASS'},
    'jax.nn.gelu(approximate=False)/fp32': {'within_budget': 'FAIL', 'special_values': 'FAIL', 'rounding_bias': 'PASS'},
    'jax.nn.gelu(approximate=True)/fp32': {'within_budget': 'FAIL', 'special_values': 'FAIL', 'rounding_bias': 'PASS'},
    'jax.nn.softplus/fp32': {'within_budget': 'FAIL', 'special_values': 'FAIL', 'rounding_bias': 'PASS'},
    'jax.nn.softmax/fp32': {'within_budget': 'FAIL', 'special_values': 'FAIL', 'shift_invariance': 'FAIL', 'masked_rows': 'FAIL', 'rounding_bias': 'PASS'},
    'jax.nn.dot_product_attention/fp32': {'within_budget': 'FAIL', 'special_values': 'FAIL', 'key_count': 'FAIL', 'parameter_sensitivity': 'FAIL', 'tile_invariance': 'FAIL', 'mask_shift_invariance': 'FAIL', 'causality': 'FAIL', 'gqa_replication': 'FAIL', 'large_values': 'FAIL', 'rounding_bias': 'PASS'},
    'jax.nn.dot_product_attention/fp32 causal=top_left': {'within_budget': 'FAIL', 'special_values': 'FAIL', 'key_count': 'FAIL', 'parameter_sensitivity': 'NOT RUN', 'tile_invariance': 'FAIL', 'mask_shift_invariance': 'FAIL', 'causality': 'FAIL', 'gqa_replication': 'FAIL', 'large_values': 'PASS', 'rounding_bias': 'PASS'},
    'jax.nn.dot_product_attention/fp32 causal=top_left,masked_row=nan': {'within_budget': 'FAIL', 'special_values': 'FAIL', 'key_count': 'FAIL', 'parameter_sensitivity': 'NOT RUN', 'tile_invariance': 'FAIL', 'mask_shift_invariance': 'FAIL', 'causality': 'FAIL', 'gqa_replication': 'FAIL', 'large_values': 'PASS', 'rounding_bias': 'PASS'},
    'jax.nn.sigmoid/bf16': {'within_budget': 'FAIL', 'special_values': 'PASS', 'rounding_bias': 'PASS'},
    'jax.nn.silu/bf16': {'within_budget': 'FAIL', 'special_values': 'FAIL', 'rounding_bias': 'PASS'},
    'jax.nn.gelu(approximate=False)/bf16': {'within_budget': 'FAIL', 'special_values': 'FAIL', 'rounding_bias': 'PASS'},
    'jax.nn.gelu(approximate=True)/bf16': {'within_budget': 'FAIL', 'special_values': 'FAIL', 'rounding_bias': 'PASS'},
    'jax.nn.softplus/bf16': {'within_budget': 'PASS', 'special_values': 'PASS', 'rounding_bias': 'FAIL'},
    'jax.nn.softmax/bf16': {'within_budget': 'FAIL', 'special_values': 'FAIL', 'shift_invariance': 'FAIL', 'masked_rows': 'FAIL', 'rounding_bias': 'PASS'},
    'jax.nn.dot_product_attention/bf16': {'within_budget': 'FAIL', 'special_values': 'FAIL', 'key_count': 'FAIL', 'parameter_sensitivity': 'FAIL', 'tile_invariance': 'FAIL', 'mask_shift_invariance': 'FAIL', 'causality': 'FAIL', 'gqa_replication': 'PASS', 'large_values': 'FAIL', 'rounding_bias': 'PASS'},
    'jax.nn.dot_product_attention/bf16 causal=top_left': {'within_budget': 'FAIL', 'special_values': 'FAIL', 'key_count': 'FAIL', 'parameter_sensitivity': 'FAIL', 'tile_invariance': 'FAIL', 'mask_shift_invariance': 'FAIL', 'causality': 'FAIL', 'gqa_replication': 'PASS', 'large_values': 'FAIL', 'rounding_bias': 'PASS'},
    'jax.nn.dot_product_attention/bf16 causal=top_left,masked_row=nan': {'within_budget': 'FAIL', 'special_values': 'FAIL', 'key_count': 'FAIL', 'parameter_sensitivity': 'FAIL', 'tile_invariance': 'FAIL', 'mask_shift_invariance': 'FAIL', 'causality': 'FAIL', 'gqa_replication': 'PASS', 'large_values': 'FAIL', 'rounding_bias': 'PASS'},
    'jax.nn.silu/fp32 act_arith=quotient,special_values=ieee,profile=strict+ftz': {'within_budget': 'PASS', 'special_values': 'PASS', 'rounding_bias': 'PASS'},
    'jax.nn.sigmoid/bf16 act_arith=quotient,special_values=ieee,profile=strict+ftz': {'within_budget': 'FAIL', 'special_values': 'PASS', 'rounding_bias': 'PASS'},
    'jax.nn.gelu(approximate=True)/bf16 act_arith=one_plus_tanh,special_values=ieee,profile=strict+ftz': {'within_budget': 'FAIL', 'special_values': 'FAIL', 'rounding_bias': 'PASS'},
    'jax.nn.gelu(approximate=False)/fp32 act_arith=one_plus_erf,special_values=ieee,profile=strict+ftz': {'within_budget': 'PASS', 'special_values': 'PASS', 'rounding_bias': 'FAIL'},
    'jax.nn.silu/bf16 act_arith=quotient,special_values=ieee,profile=strict+ftz': {'within_budget': 'FAIL', 'special_values': 'FAIL', 'rounding_bias': 'PASS'},
    'jax.nn.sigmoid/fp32 act_arith=quotient,special_values=ieee,profile=strict+ftz': {'within_budget': 'PASS', 'special_values': 'PASS', 'rounding_bias': 'PASS'},
    'jax.nn.gelu(approximate=True)/fp32 act_arith=one_plus_tanh,special_values=ieee,profile=strict+ftz': {'within_budget': 'FAIL', 'special_values': 'PASS', 'rounding_bias': 'PASS'},
    'jax.nn.gelu(approximate=False)/bf16 act_arith=one_plus_erf,special_values=ieee,profile=strict+ftz': {'within_budget': 'FAIL', 'special_values': 'FAIL', 'rounding_bias': 'PASS'},
    'jax.nn.softplus/fp32 act_arith=log1p_exp,special_values=ieee,profile=strict+ftz': {'within_budget': 'FAIL', 'special_values': 'PASS', 'rounding_bias': 'FAIL'},
    'jax.nn.softplus/bf16 act_arith=log1p_exp,special_values=ieee,profile=strict+ftz': {'within_budget': 'PASS', 'special_values': 'PASS', 'rounding_bias': 'FAIL'},
}

if __name__ == "__main__":
    sys.exit(run_checks(CHECKS, EXPECTED, "jax " + jax.__version__))
