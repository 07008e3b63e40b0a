"""Write conform model dumps (model/1) from NumPy arrays or a PyTorch module.

A model dump is one safetensors file holding the implementation contract of a
decoder block stack (JSON), its weights, the model input and the activations
at named points of every layer; `conform diverge DUMP` finds the first layer
whose own computation is out of budget.  docs/dumps.md, "Model dumps
(model/1)", describes the format.

    import numpy as np
    import conform_case as cc
    import conform_model as cm

    cm.write_model_dump("model.safetensors",
                        contract={"layers": 2, "width": 64, "dtype": "bf16"},
                        weights={"layers.0.q.weight": cc.bf16(wq), ...},
                        input=cc.bf16(x),                      # [T, C]
                        activations={"layers.0.attn_norm": cc.bf16(a), ...},
                        impl="my-runtime 0.3")

Element types are those of conform_case: float64, float32, float16, int8,
int32 arrays as they are, bfloat16 through cc.bf16() (float32 values rounded
to nearest even, or uint16 bit patterns).  PyTorch tensors may be passed
directly: bf16 tensors are stored bit for bit, others through .numpy().

Recording a PyTorch model with forward hooks (PyTorch is needed only here):

    points = {"input": (embed, "output"), "layers.0.attn_norm": (norm0, "output"), ...}
    with cm.ForwardRecorder(points) as rec:   # point -> (submodule, "output" | "input")
        model(input_ids)                      # a batch of one sequence
    rec.write("model.safetensors", contract, weights, impl="my-runtime 0.3")

A Hugging Face transformers decoder (model_type llama, mistral, qwen2, qwen3,
mixtral, qwen3_moe) is recorded in one call, its contract derived from the
config, its weights exported under their contract names and every point of
the graph recorded (docs/diverge.md, "Recording Hugging Face models"):

    model = transformers.AutoModelForCausalLM.from_pretrained(NAME, dtype=torch.bfloat16).eval()
    cm.record_hf(model, input_ids, "model.safetensors")     # input_ids [1, T]: token ids to logits

`python3 conform_model.py --self-test` checks this module (NumPy only).
"""

import math
import os
import re
import struct
import tempfile

import numpy as np

import conform_case as cc

FORMAT = "model/1"
INPUT = "input"
ACTIVATION_PREFIX = "act."
MAX_NAME_BYTES = 256
_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def name_problem(name):
    """Why `name` is refused as a tensor or point name (as the C++ reader says), or None."""
    if not isinstance(name, str) or not name:
        return "empty name"
    if len(name.encode("utf-8")) > MAX_NAME_BYTES:
        return "name longer than %d bytes" % MAX_NAME_BYTES
    if not _NAME.fullmatch(name):
        return "name has a character outside [A-Za-z0-9_.-]"
    if name.startswith(".") or name.endswith(".") or ".." in name:
        return "name has an empty dot-separated part"
    return None


def _check_name(name, what):
    problem = name_problem(name)
    if problem:
        raise ValueError("%s %r: %s" % (what, name, problem))


def _is_torch(value):
    return type(value).__module__.split(".")[0] == "torch"


def as_array(value):
    """A value as conform_case stores it: NumPy arrays and cc.bf16() as they are,
    PyTorch tensors detached to the CPU (bf16 bit for bit)."""
    if not _is_torch(value):
        return value
    t = value.detach().cpu().contiguous()
    if str(t.dtype) == "torch.bfloat16":
        import torch  # only reached with a torch tensor in hand
        return cc.bf16(t.view(torch.int16).numpy().view(np.uint16))
    return t.numpy()


def _stored_tensors(weights, input, activations):
    """Stored name -> prepared tensor (conform_case's form), names checked."""
    tensors = {INPUT: cc._prepare(INPUT, as_array(input))}
    for point, value in activations.items():
        if point == "":
            raise ValueError("activation %r: point name after 'act.' is empty" % point)
        _check_name(point, "activation")
        tensors[ACTIVATION_PREFIX + point] = cc._prepare(point, as_array(value))
    for name, value in weights.items():
        _check_name(name, "weight")
        if name == INPUT or name.startswith(ACTIVATION_PREFIX):
            raise ValueError("weight %r would read back as the input or an activation" % name)
        tensors[name] = cc._prepare(name, as_array(value))
    return tensors


def write_model_dump(path, contract, weights, input, activations, impl=""):
    """Write one model dump.

    path: the .safetensors file (written beside itself and renamed over it).
    contract: the block-stack contract, a dict (JSON-serializable; model/contract.hpp's keys).
    weights: contract name -> array, e.g. "layers.0.q.weight".
    input: the model input [T, C].
    activations: point name -> array, e.g. "layers.0.attn_norm" (stored as act.<point>).
    impl: who produced the activations.
    """
    if not isinstance(contract, dict):
        raise TypeError("contract must be a dict, not %s" % type(contract).__name__)
    tensors = _stored_tensors(weights, input, activations)
    metadata = {"conform.format": FORMAT, "conform.impl": impl,
                "conform.contract": cc._json_text(contract, separators=(",", ":"))}
    cc._write_safetensors(os.fspath(path), metadata, tensors)


class ForwardRecorder:
    """Records activations at named points of a PyTorch module with forward hooks.

    points: point name -> (submodule, "output" | "input"): the submodule's
    output (the first element when it returns a tuple) or its first
    positional input.  Use as a context manager around one forward pass; the
    hooks are removed on exit.  With squeeze_batch (the default) every
    recorded tensor must have a leading batch dimension of 1, which is
    dropped: points are stored as [T, features].  Each point is recorded once;
    a hook that fires twice (a module reused, a second forward pass) is an
    error.  The point "input" is the model input.
    """

    def __init__(self, points, squeeze_batch=True):
        self.points = dict(points)
        self.squeeze_batch = squeeze_batch
        self.activations = {}
        self._handles = []
        for name, spec in self.points.items():
            _check_name(name, "point")
            if not (isinstance(spec, tuple) and len(spec) == 2 and spec[1] in ("output", "input")):
                raise ValueError("point %r: expected (submodule, 'output' | 'input'), got %r" % (name, spec))

    def __enter__(self):
        try:
            for name, (module, where) in self.points.items():
                self._handles.append(module.register_forward_hook(self._hook(name, where)))
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(self, *exc):
        self.remove()
        return False

    def remove(self):
        while self._handles:
            self._handles.pop().remove()

    def _hook(self, name, where):
        def hook(module, args, output):
            if where == "input":
                if not args:
                    raise ValueError("point %r: the module got no positional input (called with keywords?)" % name)
                value = args[0]
            else:
                value = output[0] if isinstance(output, (tuple, list)) else output
            self._record(name, value)
        return hook

    def _record(self, name, value):
        if name in self.activations:
            raise ValueError("point %r recorded twice: record one forward pass of one sequence" % name)
        if self.squeeze_batch:
            shape = tuple(value.shape)
            if not shape or shape[0] != 1:
                raise ValueError("point %r: shape %s has no leading batch of 1 (squeeze_batch)" % (name, list(shape)))
            value = value[0]
        self.activations[name] = as_array(value)

    def missing(self):
        """Points whose hook has not fired."""
        return sorted(set(self.points) - set(self.activations))

    def write(self, path, contract, weights, impl=""):
        """write_model_dump with the recorded points; "input" is the model input."""
        if self.missing():
            raise ValueError("points not recorded: %s" % ", ".join(self.missing()))
        if INPUT not in self.activations:
            raise ValueError("no point %r recorded: map it to the model input, e.g. (embed_tokens, 'output')" % INPUT)
        acts = {k: v for k, v in self.activations.items() if k != INPUT}
        write_model_dump(path, contract, weights, self.activations[INPUT], acts, impl)


# --- Hugging Face transformers decoders ---------------------------------------------
#
# record_hf(model, input_ids, path) runs one forward pass of a transformers
# decoder on one sequence and writes its model dump: the contract derived from
# model.config (hf_contract), the weights under their contract names
# (hf_weights), the activations at the points of model/graph.hpp (hf_points,
# the rotary tap, the router hooks).  docs/diverge.md, "Recording Hugging Face
# models", lists the architectures, their point maps and what does not map.

DENSE_TYPES = ("llama", "mistral", "qwen2", "qwen3", "phi3")
SANDWICH_TYPES = ("gemma3_text", "gemma2")
MOE_TYPES = ("mixtral", "qwen3_moe")
HYBRID_TYPES = ("qwen3_next",)
MLA_TYPES = ("deepseek_v3", "deepseek_v2")
_TORCH_DTYPES = {"torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float32": "fp32"}


def _base(model):
    """The decoder stack (LlamaModel, ...) of a CausalLM, or the stack itself."""
    inner = getattr(model, "model", None)
    return inner if inner is not None and hasattr(inner, "layers") else model


def _rope_theta(config):
    params = getattr(config, "rope_parameters", None) or {}
    return float(params.get("rope_theta", getattr(config, "rope_theta", 10000.0)))


def _rotary_dim(config, head_dim):
    """The rotated dims: all of head_dim, or Phi-3's partial_rotary_factor of
    them (its rotation passes the rest through; Llama's cannot)."""
    params = getattr(config, "rope_parameters", None) or {}
    factor = params.get("partial_rotary_factor", getattr(config, "partial_rotary_factor", None) or 1.0)
    if factor != 1.0 and config.model_type != "phi3":
        raise ValueError("partial_rotary_factor != 1 is not mapped for %s" % config.model_type)
    return int(head_dim * factor)


def _yarn_mscale(scale, mscale=1.0):
    """YaRN's 0.1 mscale ln(scale) + 1 (1 for scale <= 1), as transformers."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _fp32(v):
    """v as the FP32 scalar PyTorch multiplies an FP32 tensor by."""
    return struct.unpack("f", struct.pack("f", v))[0]


def _dynamic_base(config, params, tokens):
    """Dynamic NTK's base for one pass of `tokens` tokens from position 0:
    past max_position_embeddings transformers' dynamic_rope_update recomputes
    the frequencies with seq_len = tokens, base * (factor * seq_len / max_pos
    - (factor - 1)) ** (r / (r - 2)), in FP32 tensor arithmetic (seq_len is a
    tensor); evaluated here by the same torch expression, so the contract's
    base is that FP32 value.  At or below max_pos the frequencies stay the
    default ones."""
    base, max_pos = float(params["rope_theta"]), config.max_position_embeddings
    if tokens <= max_pos:
        return base
    import torch  # only here: a dynamic rope is mapped from a torch model
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    dim = int(head_dim * params.get("partial_rotary_factor", 1.0))
    factor = params["factor"]
    seq_len = torch.maximum(torch.tensor(int(tokens)), torch.tensor(max_pos))
    return float(base * ((factor * seq_len / max_pos) - (factor - 1)) ** (dim / (dim - 2)))


def _rope_keys(config, params=None, tokens=None):
    """The contract's frequency-scaling keys for the config's rope_type
    (docs/rope.md, "Frequency scaling"): default, linear, llama3 and yarn as
    transformers' modeling_rope_utils computes them; dynamic as the base it
    takes for `tokens` tokens; longrope (per-pair factor lists) is refused.
    params: one layer type's rope parameters (Gemma 3's), else the config's."""
    params = dict(params if params is not None else getattr(config, "rope_parameters", None) or {})
    kind = params.get("rope_type", "default")
    if kind == "default":
        return {}
    if kind == "dynamic" and tokens is not None:
        return {"rope_base": _dynamic_base(config, params, tokens)}
    if kind not in ("linear", "llama3", "yarn"):
        raise ValueError("rope_type %r does not map (mapped: default, linear, llama3, yarn, dynamic)" % kind)
    factor = params.get("factor")
    if kind == "linear":
        return {"rope_scaling": "linear", "rope_factor": float(factor)}
    if kind == "llama3":
        return {"rope_scaling": "llama3", "rope_factor": float(factor),
                "rope_low_freq_factor": float(params["low_freq_factor"]),
                "rope_high_freq_factor": float(params["high_freq_factor"]),
                "rope_original_max_pos": float(params["original_max_position_embeddings"])}
    L0 = params["original_max_position_embeddings"]
    if factor is None:  # DeepSeek-V3's configs: the ratio of the two lengths
        factor = config.max_position_embeddings / L0
    af, mscale, mscale_all = params.get("attention_factor"), params.get("mscale"), params.get("mscale_all_dim")
    if af is None:
        af = _yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all) if mscale and mscale_all else _yarn_mscale(factor)
    return {"rope_scaling": "yarn", "rope_factor": float(factor), "rope_original_max_pos": float(L0),
            "rope_beta_fast": float(params.get("beta_fast") or 32), "rope_beta_slow": float(params.get("beta_slow") or 1),
            "rope_truncate": bool(params.get("truncate", True)),
            "rope_attention_factor": _fp32(float(af))}  # cos * attention_scaling in FP32


def hf_contract(config, tokens, dtype, cached=0):
    """The conform contract (a dict) of a transformers decoder config, for one
    forward pass of `tokens` tokens in `dtype` ("bf16" | "fp16" | "fp32")
    after `cached` tokens (a decode step: a dynamic rope takes its base for
    cached + tokens positions, as dynamic_rope_update does; the caller sets
    cache_tokens).  Under the eager attention implementation the logits are
    computed in the model's dtype (attention_logits: dtype)."""
    c = _contract_of_type(config, cached + tokens, dtype)  # the length only sets a dynamic rope's base
    c["tokens"] = int(tokens)
    if getattr(config, "_attn_implementation", None) == "eager":
        c["conventions"]["attention_logits"] = "dtype"
    return c


def _contract_of_type(config, tokens, dtype):
    kind = config.model_type
    if kind in HYBRID_TYPES:
        return dict(_qwen3_next_contract(config, tokens, dtype), **_rope_keys(config, tokens=tokens))
    if kind in MLA_TYPES:
        return dict(_deepseek_contract(config, tokens, dtype), **_rope_keys(config, tokens=tokens), **_mla_scale(config))
    if kind in SANDWICH_TYPES:
        return _gemma_contract(config, tokens, dtype)
    if kind not in DENSE_TYPES + MOE_TYPES:
        raise ValueError("model_type %r has no point map (mapped: %s)"
                         % (kind, ", ".join(DENSE_TYPES + MOE_TYPES + HYBRID_TYPES + MLA_TYPES + SANDWICH_TYPES)))
    if getattr(config, "hidden_act", "silu") != "silu":
        raise ValueError("hidden_act %r does not map (swiglu is silu(gate) * up)" % config.hidden_act)
    heads = config.num_attention_heads
    bias = bool(getattr(config, "attention_bias", False))
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    c = {
        "layers": config.num_hidden_layers, "width": config.hidden_size, "heads": heads,
        "kv_heads": getattr(config, "num_key_value_heads", None) or heads,
        "head_dim": head_dim, "rotary_dim": _rotary_dim(config, head_dim),
        "ffn": config.intermediate_size, "tokens": int(tokens), "norm": "rms_norm",
        "eps": float(config.rms_norm_eps), "placement": "pre", "rope_base": _rope_theta(config),
        "qkv_bias": kind == "qwen2" or bias, "o_bias": bias, "qk_norm": kind in ("qwen3", "qwen3_moe"),
        **_window(config),
        "mlp": "swiglu", "dtype": dtype, "residual_format": dtype,  # the residual stream in the model's dtype
        # rotate_half; RMSNorm's weight * (x / rms).to(dtype); gate before up;
        # q * cos + rotate_half(q) * sin in the model's dtype (cos, sin from
        # FP32 angles rounded to it); SDPA's CPU flash kernel rounds the
        # weights to it before P V; the router's logits (and Qwen3-MoE's
        # weights) in it.  The last two change nothing in fp32.
        "conventions": {"rope_pairing": "half", "norm_cast": "before_weight", "gate_order": "gate_up",
                        "rope_arith": "dtype", "attention_probs": "dtype", "router_arith": "dtype",
                        "glu_arith": "separate"},  # act_fn(gate) * up: silu stored, then the product rounded
    }
    c.update(_rope_keys(config, tokens=tokens))
    if kind in MOE_TYPES:
        experts = getattr(config, "num_local_experts", None) or config.num_experts
        c.update({"mlp": "moe", "experts": experts, "top_k": config.num_experts_per_tok, "shared_experts": 0,
                  "expert_ffn": getattr(config, "moe_intermediate_size", config.intermediate_size),
                  "router_score": "softmax", "renormalize": bool(getattr(config, "norm_topk_prob", True)),
                  "selection_bias": False, "mlp_pattern": _mlp_pattern(config)})
    return c


_LAYER_KINDS = {"sliding_attention": "L", "full_attention": "G"}


def _window(config):
    """The sliding window: transformers' mask keeps the keys j > i - W, the
    W keys (p - W, p] of the contract (window_keys: w).  Where the config
    lists layer_types (Qwen2/3: layers from max_window_layers on, Gemma),
    they give the pattern; otherwise (Mistral, Mixtral, Qwen3-MoE) every
    layer is local once sliding_window is set."""
    window = getattr(config, "sliding_window", None) if getattr(config, "use_sliding_window", True) else None
    types = getattr(config, "layer_types", None)
    if not window or (types and "sliding_attention" not in types):
        return {"window": 0}
    return {"window": int(window), "window_pattern": "".join(_LAYER_KINDS[t] for t in types) if types else "L"}


# --- Gemma 2 and Gemma 3 (text): sandwich norms, a scaled embedding, local and global layers ---
#
# Gemma 3 adds q_norm / k_norm and a RoPE base of its own on the local
# layers; Gemma 2 caps its attention logits (attn_logit_softcapping), which
# only its eager attention computes (transformers refuses sdpa for it).


def _gemma_contract(config, tokens, dtype):
    act = getattr(config, "hidden_activation", "gelu_pytorch_tanh")
    if act not in ("gelu_pytorch_tanh", "gelu"):
        raise ValueError("hidden_activation %r does not map (geglu: gelu_pytorch_tanh or gelu)" % act)
    if getattr(config, "use_bidirectional_attention", False) or getattr(config, "attention_bias", False):
        raise ValueError("use_bidirectional_attention and attention_bias do not map")
    gemma3 = config.model_type == "gemma3_text"
    rope = dict(config.rope_parameters)
    if gemma3:
        local, full = dict(rope.get("sliding_attention") or {}), dict(rope.get("full_attention") or {})
    else:  # one RoPE for every layer
        local, full = {}, rope
    if local.get("rope_type", "default") != "default":
        raise ValueError("a scaled rope on the sliding layers (%r) does not map" % local["rope_type"])
    c = {
        "layers": config.num_hidden_layers, "width": config.hidden_size, "heads": config.num_attention_heads,
        "kv_heads": config.num_key_value_heads, "head_dim": config.head_dim, "ffn": config.intermediate_size,
        "tokens": int(tokens), "norm": "rms_norm", "eps": float(config.rms_norm_eps), "placement": "sandwich",
        "zero_centered": True, "qk_norm": gemma3, "mlp": "geglu",
        **_window(config),
        "rope_base": float(full.get("rope_theta", 1e6 if gemma3 else 1e4)),
        "rope_local_base": float(local.get("rope_theta", 1e4)) if gemma3 else 0.0,
        "attention_scale": float(config.query_pre_attn_scalar) ** -0.5,
        "attention_softcap": float(getattr(config, "attn_logit_softcapping", None) or 0),
        "dtype": dtype, "residual_format": dtype,
        # Gemma3RMSNorm: (x / rms * (1 + w)) in FP32, rounded once; rotate_half
        # in the dtype.  act_fn(gate) * up: PyTorch's FP32 GELU (tanh, or
        # erf with its erf within 2^-20) stored, then the product rounded.
        "conventions": {"rope_pairing": "half", "norm_cast": "after_weight", "gate_order": "gate_up",
                        "gelu": "tanh" if act == "gelu_pytorch_tanh" else "erf", "rope_arith": "dtype",
                        "attention_probs": "dtype", "glu_arith": "separate"},
    }
    c.update(_rope_keys(config, full, tokens))
    if getattr(config, "final_logit_softcapping", None):
        # logits / c, tanh, times c: each in the model's dtype
        c["logit_softcap"] = float(config.final_logit_softcapping)
        c["conventions"]["softcap_arith"] = "dtype"
    return c


def _gemma_points(m):
    points, joined = {INPUT: (m.embed_tokens, "output")}, {}
    for l, layer in enumerate(m.layers):
        p, attn, mlp = "layers.%d." % l, layer.self_attn, layer.mlp
        points.update({
            p + "attn_norm": (layer.input_layernorm, "output"),
            p + "q": (attn.q_proj, "output"), p + "k": (attn.k_proj, "output"), p + "v": (attn.v_proj, "output"),
            p + "attn": (attn.o_proj, "input"), p + "attn_out": (attn.o_proj, "output"),  # q_norm, k_norm: _GemmaTaps
            p + "attn_post_norm": (layer.post_attention_layernorm, "output"),
            p + "mid": (layer.pre_feedforward_layernorm, "input"),    # x + attn_post_norm
            p + "mlp_norm": (layer.pre_feedforward_layernorm, "output"),
            p + "gate": (mlp.gate_proj, "output"), p + "up": (mlp.up_proj, "output"),
            p + "h": (mlp.down_proj, "input"), p + "mlp_out": (mlp, "output"),
            p + "mlp_post_norm": (layer.post_feedforward_layernorm, "output"),
            p + "output": (layer, "output"),
        })
        joined[p + "gate_up"] = (p + "gate", p + "up")
    return points, joined


def _gemma_weights(m):
    import torch
    w = {}
    names = {"attn_norm": "input_layernorm", "attn_post_norm": "post_attention_layernorm",
             "mlp_norm": "pre_feedforward_layernorm", "mlp_post_norm": "post_feedforward_layernorm"}
    for l, layer in enumerate(m.layers):
        p, a, f = "layers.%d." % l, layer.self_attn, layer.mlp
        for point, module in names.items():
            w[p + point + ".weight"] = getattr(layer, module).weight
        for n in "qkvo":
            w[p + n + ".weight"] = getattr(a, n + "_proj").weight
        if hasattr(a, "q_norm"):  # Gemma 3
            w[p + "q_norm.weight"], w[p + "k_norm.weight"] = a.q_norm.weight, a.k_norm.weight
        w[p + "gate_up.weight"] = torch.cat([f.gate_proj.weight, f.up_proj.weight])
        w[p + "down.weight"] = f.down_proj.weight
    return w


def _mlp_pattern(config):
    """One letter per layer: M a MoE layer, D a dense MLP (Qwen-MoE's
    mlp_only_layers and decoder_sparse_step, as its decoder layer decides)."""
    dense, step = set(getattr(config, "mlp_only_layers", None) or ()), getattr(config, "decoder_sparse_step", 1) or 1
    return "".join("M" if l not in dense and (l + 1) % step == 0 else "D" for l in range(config.num_hidden_layers))


def hf_points(model):
    """The hooks' points (name -> (submodule, "output" | "input")) and the
    points joined from two of them (name -> (first, second), concatenated along
    the features: gate_up = [gate_proj | up_proj]).  q_rope / k_rope come from
    the rotary tap, router points from the router hook (record_hf)."""
    m = _base(model)
    if model.config.model_type in HYBRID_TYPES:
        return _qwen3_next_points(m)
    if model.config.model_type in MLA_TYPES:
        return _deepseek_points(m)
    if model.config.model_type in SANDWICH_TYPES:
        return _gemma_points(m)
    points, joined = {INPUT: (m.embed_tokens, "output")}, {}
    for l, layer in enumerate(m.layers):
        p = "layers.%d." % l
        attn, mlp = layer.self_attn, layer.mlp
        if hasattr(attn, "qkv_proj"):  # Phi-3: one fused projection, split by record_hf (_split_qkv)
            points[p + "qkv"] = (attn.qkv_proj, "output")
        else:
            points.update({p + "q": (attn.q_proj, "output"), p + "k": (attn.k_proj, "output"),
                           p + "v": (attn.v_proj, "output")})
        points.update({
            p + "attn_norm": (layer.input_layernorm, "output"),
            p + "attn": (attn.o_proj, "input"),            # attention before the output projection
            p + "attn_out": (attn.o_proj, "output"),
            p + "mid": (layer.post_attention_layernorm, "input"),   # x + attn_out
            p + "mlp_norm": (layer.post_attention_layernorm, "output"),
            p + "mlp_out": (mlp, "output"),
            p + "output": (layer, "output"),
        })
        if hasattr(attn, "q_norm"):  # Qwen3: RMSNorm over head_dim before RoPE
            points[p + "q_norm"] = (attn.q_norm, "output")
            points[p + "k_norm"] = (attn.k_norm, "output")
        if _fused_gate_up(mlp):  # Phi-3: [gate | up] from one projection
            points.update({p + "gate_up": (mlp.gate_up_proj, "output"), p + "h": (mlp.down_proj, "input")})
        elif hasattr(mlp, "gate_proj"):
            points.update({p + "gate": (mlp.gate_proj, "output"), p + "up": (mlp.up_proj, "output"),
                           p + "h": (mlp.down_proj, "input")})  # silu(gate) * up
            joined[p + "gate_up"] = (p + "gate", p + "up")
    return points, joined


def _part(a, index):
    """a[index] of a recorded point (BF16 ones sliced by their bits)."""
    return cc.bf16(a.bits[index]) if isinstance(a, cc.BF16) else a[index]


def _fused_gate_up(mlp):
    """Phi-3's dense MLP: one gate_up_proj ([gate | up] rows), no experts."""
    return hasattr(mlp, "gate_up_proj") and not hasattr(mlp, "experts")


def _split_qkv(acts, config):
    """Phi-3's fused qkv_proj output [T, (H + 2 G) D] as the points q, k, v."""
    H, G = config.num_attention_heads, config.num_key_value_heads
    D = getattr(config, "head_dim", None) or config.hidden_size // H
    for l in range(config.num_hidden_layers):
        p = "layers.%d." % l
        qkv = acts.pop(p + "qkv")
        acts[p + "q"], acts[p + "k"] = _part(qkv, np.s_[:, :H * D]), _part(qkv, np.s_[:, H * D:(H + G) * D])
        acts[p + "v"] = _part(qkv, np.s_[:, (H + G) * D:(H + 2 * G) * D])


def hf_weights(model):
    """Contract name -> tensor for every layer (nn.Linear's [out, in] layout;
    MoE weights in the moe ops' layouts, docs/moe.md)."""
    import torch
    m, w = _base(model), {}
    if model.config.model_type in HYBRID_TYPES:
        return _qwen3_next_weights(m)
    if model.config.model_type in MLA_TYPES:
        return _deepseek_weights(m)
    if model.config.model_type in SANDWICH_TYPES:
        return _gemma_weights(m)
    for l, layer in enumerate(m.layers):
        p, a, f = "layers.%d." % l, layer.self_attn, layer.mlp
        w[p + "attn_norm.weight"] = layer.input_layernorm.weight
        if hasattr(a, "qkv_proj"):  # Phi-3: [q | k | v] rows of one weight
            H, G, D = a.config.num_attention_heads, a.num_key_value_heads, a.head_dim
            w[p + "q.weight"], w[p + "k.weight"], w[p + "v.weight"] = a.qkv_proj.weight.split([H * D, G * D, G * D])
        for n in "o" if hasattr(a, "qkv_proj") else "qkvo":
            proj = getattr(a, n + "_proj")
            w[p + n + ".weight"] = proj.weight
            if proj.bias is not None:
                w[p + n + ".bias"] = proj.bias
        if hasattr(a, "q_norm"):
            w[p + "q_norm.weight"] = a.q_norm.weight
            w[p + "k_norm.weight"] = a.k_norm.weight
        w[p + "mlp_norm.weight"] = layer.post_attention_layernorm.weight
        if _fused_gate_up(f):  # Phi-3: gate rows, then up rows
            w[p + "gate_up.weight"], w[p + "down.weight"] = f.gate_up_proj.weight, f.down_proj.weight
        elif hasattr(f, "gate_proj"):
            w[p + "gate_up.weight"] = torch.cat([f.gate_proj.weight, f.up_proj.weight])
            w[p + "down.weight"] = f.down_proj.weight
        else:  # router [E, C], 3-D experts gate_up [E, 2F, C] (gate rows first), down [E, C, F]
            if not hasattr(f.experts, "gate_up_proj"):
                raise ValueError("layer %d: per-expert modules (transformers < 5) are not mapped" % l)
            w[p + "router.weight"] = f.gate.weight.t()                           # [C, E]
            w[p + "experts.gate_up.weight"] = f.experts.gate_up_proj.transpose(1, 2)  # [E, C, 2F]
            w[p + "experts.down.weight"] = f.experts.down_proj.transpose(1, 2)        # [E, F, C]
    return w


class _HfTaps:
    """What no module hook sees: q_rope / k_rope, returned by the modeling
    module's apply_rotary_pos_emb (a function; wrapped while recording, the
    layer told by a pre-hook on its attention), and each MoE router's
    selection (its gate returns logits, weights, ids: the router point is
    [T, 2k] FP32, the ids then the weights)."""

    def __init__(self, m):
        import sys
        self.module = sys.modules[type(m.layers[0]).__module__]
        self.layer, self.activations, self._handles = None, {}, []
        for l, layer in enumerate(m.layers):
            if hasattr(layer, "self_attn"):  # Qwen3-Next's linear layers have none
                self._handles.append(layer.self_attn.register_forward_pre_hook(self._enter(l)))
            if hasattr(layer.mlp, "experts"):  # a MoE block: its router
                self._handles.append(layer.mlp.gate.register_forward_hook(self._router("layers.%d.router" % l)))
        # DeepSeek-V2's rotary function is apply_rotary_emb(xq, xk, freqs_cis)
        self._rotary_name = "apply_rotary_pos_emb" if hasattr(self.module, "apply_rotary_pos_emb") else "apply_rotary_emb"
        self._inner = getattr(self.module, self._rotary_name)
        setattr(self.module, self._rotary_name, self._rotary)

    def _hook(self, module, when, fn):
        """A hook that only records: whatever fn returns, the module's output stands."""
        def hook(*args):
            fn(*args)
        reg = module.register_forward_pre_hook if when == "pre" else module.register_forward_hook
        self._handles.append(reg(hook))

    def _enter(self, l):
        def pre_hook(module, args):
            self.layer = l
        return pre_hook

    def _put(self, name, value):
        if name in self.activations:
            raise ValueError("point %r recorded twice: record one forward pass of one sequence" % name)
        self.activations[name] = as_array(value)

    def _rotary(self, q, k, *args, **kwargs):
        q_embed, k_embed = self._inner(q, k, *args, **kwargs)
        for name, t in (("q_rope", q_embed), ("k_rope", k_embed)):  # [1, H, T, D] -> [T, H D]
            self._put("layers.%d.%s" % (self.layer, name), t[0].transpose(0, 1).reshape(t.shape[2], -1))
        return q_embed, k_embed

    def _router(self, name):
        def hook(module, args, output):
            import torch
            logits, weights, ids = output
            ids, weights = self._ordered(module, logits, ids, weights)
            self._put(name, torch.cat([ids.float(), weights.float()], dim=-1))
        return hook

    @staticmethod
    def _ordered(module, logits, ids, weights):
        """Each token's experts in conform's order (their routers sort them)."""
        return ids, weights

    def remove(self):
        setattr(self.module, self._rotary_name, self._inner)
        while self._handles:
            self._handles.pop().remove()


class _GemmaTaps(_HfTaps):
    """_HfTaps and Gemma's own: q_norm / k_norm, which normalize the heads
    after the transpose ([1, H, T, D] -> [T, H D]), and with the ends the
    unscaled embedding rows (Gemma3TextScaledWordEmbedding returns them times
    its scale): the same lookup, in a hook."""

    def __init__(self, m, logits):
        super().__init__(m)
        import torch
        for l, layer in enumerate(m.layers):
            for name in ("q_norm", "k_norm") if hasattr(layer.self_attn, "q_norm") else ():
                self._hook(getattr(layer.self_attn, name), "out", lambda mod, args, out, n="layers.%d.%s" % (l, name):
                           self._put(n, out[0].transpose(0, 1).reshape(out.shape[2], -1)))
        if logits:
            self._hook(m.embed_tokens, "out",
                       lambda mod, args, out: self._put("embed", torch.nn.functional.embedding(args[0], mod.weight)[0]))


def _per_token(a):
    """A recorded point as [T, features]: per-head points (Qwen3's q_norm,
    [T, H, D]) flattened to [T, H D]."""
    if isinstance(a, cc.BF16):
        return cc.bf16(_per_token(a.bits))
    return a.reshape(a.shape[0], -1) if a.ndim == 3 else a


def _joined(a, b):
    """Two points concatenated along the features (gate_up)."""
    if isinstance(a, cc.BF16):
        return cc.bf16(np.concatenate([a.bits, b.bits], axis=-1))
    return np.concatenate([a, b], axis=-1)


def hf_ends(model):
    """The ends of a *ForCausalLM (logits: true): its points embed (the
    embedding's output), final_norm and logits (lm_head's output, as
    returned: in the model's dtype; logits_raw under a final softcap), its weights embed.weight,
    final_norm.weight and lm_head.weight (untied only), and whether the
    head is tied to the embedding."""
    m, head = _base(model), getattr(model, "lm_head", None)
    if head is None or m is model:
        raise ValueError("logits=True records a *ForCausalLM (a decoder with an lm_head), not %s" % type(model).__name__)
    tied = head.weight is m.embed_tokens.weight
    if tied != bool(getattr(model.config, "tie_word_embeddings", False)):
        raise ValueError("lm_head.weight %s the embedding, config.tie_word_embeddings says otherwise" % ("is" if tied else "is not"))
    # With a final softcap (Gemma 2) lm_head's output is logits_raw; the
    # capped logits are the model's output (record_hf).
    capped = bool(getattr(model.config, "final_logit_softcapping", None))
    points = {"embed": (m.embed_tokens, "output"), "final_norm": (m.norm, "output"),
              "logits_raw" if capped else "logits": (head, "output")}
    weights = {"embed.weight": m.embed_tokens.weight, "final_norm.weight": m.norm.weight}
    if not tied:
        weights["lm_head.weight"] = head.weight
    return points, weights, tied


def _prefilled_cache(model, cache_ids):
    """Run `model` on cache_ids [1, P] with a cache: the cache, the
    contract's weights layers.<l>.cache.k / .v [P, G D] (the keys as cached:
    rotated), copied before the recorded pass appends to them, and the
    contract's kv_cache: "rolling" where a local layer kept only its last
    W - 1 keys (P >= W: its cache as conform's ring of W slots, _ring)."""
    import torch
    kind, config = model.config.model_type, model.config
    if kind in MLA_TYPES:
        return _prefilled_mla_cache(model, cache_ids)
    window = _window(config)["window"]
    P = int(cache_ids.shape[-1])
    with torch.no_grad():
        out = model(input_ids=cache_ids, use_cache=True)
    cache = getattr(out, "cache", None) or out.past_key_values  # transformers >= 5.25 names it cache
    weights, kv_cache = {}, "full"
    for l, layer in enumerate(cache.layers):
        if hasattr(layer, "conv_states"):  # a linear attention layer (Qwen3-Next)
            weights.update(_linear_cache(model, cache, l))
            continue
        for name, t in (("k", layer.keys), ("v", layer.values)):  # [1, G, rows, D] -> [rows, G D]
            rows = t[0].transpose(0, 1).reshape(t.shape[2], -1)
            if t.shape[2] < P:  # a local layer keeps the last W - 1
                rows, kv_cache = _ring(rows, P, window), "rolling"
            weights["layers.%d.cache.%s" % (l, name)] = rows.clone()
    return cache, weights, kv_cache


def _ring(rows, P, W):
    """A local layer's last W - 1 cached rows (positions P - W + 1 ... P - 1,
    in order) as conform's rolling cache holds them: W slots, position p in
    slot p mod W.  The slot of position P - W, which transformers dropped and
    no new query sees (query P + i sees keys after P + i - W), is zeros."""
    import torch
    if rows.shape[0] != W - 1:
        raise ValueError("cache_ids: a local layer kept %d of the %d cached keys; transformers keeps W - 1 = %d"
                         % (rows.shape[0], P, W - 1))
    ring = torch.zeros((W,) + tuple(rows.shape[1:]), dtype=rows.dtype)
    for j in range(W - 1):
        ring[(P - W + 1 + j) % W] = rows[j]
    return ring


def _linear_cache(model, cache, l):
    """A Gated DeltaNet layer's cache: its recurrent state [1, Hv, d_k, d_v]
    (FP32, rows = key channels) as cache.state, and of the conv state
    [1, q | k | v channels, K] (the last K inputs) the K - 1 that the new
    tokens' windows reach, as cache.q_conv, .k_conv, .v_conv [K - 1, F]."""
    g = _base(model).layers[l].linear_attn
    conv = cache.get_conv_state(l)[0, :, 1:].transpose(0, 1)
    p = "layers.%d.cache." % l
    return {p + "state": cache.get_recurrent_state(l)[0].clone(), p + "q_conv": conv[:, :g.key_dim].clone(),
            p + "k_conv": conv[:, g.key_dim:2 * g.key_dim].clone(), p + "v_conv": conv[:, 2 * g.key_dim:].clone()}


def _prefilled_mla_cache(model, cache_ids):
    """DeepSeek's MLA: Hugging Face (transformers >= 5.25) caches the latents
    as conform's contract does, the normalized c_kv [1, 1, P, d_c] as keys
    and the rotated rope keys [1, 1, P, d_r] as values (cache.c_kv,
    cache.k_r; with rope_interleave its rotation returns the pairs
    de-interleaved, [even | odd], put back in place here as _DeepseekTaps
    does for the points); the decode step expands them with the new ones by one
    kv_b_proj over P + T rows, which _split_kv_b cuts into kv_b_cache and kv_b."""
    import torch
    config = model.config
    with torch.no_grad():
        out = model(input_ids=cache_ids, use_cache=True)
    cache = getattr(out, "cache", None) or out.past_key_values
    P, weights = int(cache_ids.shape[-1]), {}
    for l, layer in enumerate(cache.layers):
        latent = (1, 1, P, config.kv_lora_rank), (1, 1, P, config.qk_rope_head_dim)
        if (tuple(layer.keys.shape), tuple(layer.values.shape)) != latent:
            raise ValueError("cache_ids: this transformers caches %s's keys and values as %s and %s, not the "
                             "latents (not mapped: transformers >= 5.25 caches them)"
                             % (config.model_type, list(layer.keys.shape), list(layer.values.shape)))
        k_r = layer.values[0, 0]
        if getattr(config, "rope_interleave", False):  # cached as the rotation returned it: [even | odd]
            half = k_r.shape[-1] // 2
            k_r = torch.stack((k_r[..., :half], k_r[..., half:]), dim=-1).flatten(-2)  # pairs in place
        weights["layers.%d.cache.c_kv" % l] = layer.keys[0, 0].clone()
        weights["layers.%d.cache.k_r" % l] = k_r.clone()
    return cache, weights, "full"


def _split_kv_b(acts, layers, P):
    """A decode step's kv_b covers the P cached rows, then the new ones."""
    for l in range(layers):
        p = "layers.%d." % l
        both = acts.pop(p + "kv_b")
        acts[p + "kv_b_cache"], acts[p + "kv_b"] = _part(both, np.s_[:P]), _part(both, np.s_[P:])


def _cache_kwarg(model, cache):
    """The forward's cache argument: `cache` (transformers >= 5.25), else past_key_values."""
    import inspect
    if cache is None:
        return {}
    return {"cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values": cache}


def record_hf(model, input_ids, path, impl=None, conventions=None, logits=True, cache_ids=None):
    """Run `model` (a transformers decoder in eval mode, weights in bf16, fp16
    or fp32) on input_ids [1, T] and write its model dump to `path`.
    logits: record the whole model, token ids to logits (a *ForCausalLM;
    contract logits: true); else from the embedding's output to the last
    layer's.  conventions: overrides of the derived contract's.
    cache_ids [1, P]: first run the model on these with a cache, then record
    the pass of input_ids after them (a decode step: contract cache_tokens P,
    the K/V caches as weights; DeepSeek's MLA: its latent caches).  Returns
    the contract."""
    import torch
    import transformers
    m = _base(model)
    dtype = _TORCH_DTYPES[str(next(m.parameters()).dtype)]
    P = 0 if cache_ids is None else int(cache_ids.shape[-1])
    contract = hf_contract(model.config, int(input_ids.shape[-1]), dtype, cached=P)
    points, joined = hf_points(model)
    weights = hf_weights(model)
    cache = None
    if cache_ids is not None:
        cache, cache_weights, kv_cache = _prefilled_cache(model, cache_ids)
        weights.update(cache_weights)
        contract.update({"cache_tokens": int(cache_ids.shape[-1]), "kv_cache": kv_cache})
    if logits:
        ends, end_weights, tied = hf_ends(model)
        # lm_head is an nn.Linear in the model's dtype: the logits come rounded to it.
        head = ends.get("logits", ends.get("logits_raw"))[0]
        contract.update({"logits": True, "vocab": int(head.weight.shape[0]), "tied_embeddings": tied})
        contract["conventions"]["logits_format"] = "dtype"
        points = dict(points, **ends)
        del points[INPUT]  # the model input is the token ids
        weights.update(end_weights)
        if model.config.model_type in SANDWICH_TYPES:  # embed_tokens returns the rows times its scale
            contract["embed_scale"] = True
            points["embed_scaled"] = points.pop("embed")  # the unscaled rows: _GemmaTaps
            weights["embed_scale"] = m.embed_tokens.embed_scale.to(m.embed_tokens.weight.dtype).reshape(1)
    contract["conventions"].update(conventions or {})
    kind = model.config.model_type
    taps = (_GemmaTaps(m, logits) if kind in SANDWICH_TYPES
            else _Qwen3NextTaps(m, int(input_ids.shape[-1])) if kind in HYBRID_TYPES
            else _DeepseekTaps(m) if kind in MLA_TYPES else _HfTaps(m))
    try:
        with ForwardRecorder(points) as rec, torch.no_grad():
            out = model(input_ids=input_ids, use_cache=cache is not None, **_cache_kwarg(model, cache))
    finally:
        taps.remove()
    acts = dict(rec.activations, **taps.activations)
    if cache is not None and kind in MLA_TYPES:
        _split_kv_b(acts, len(m.layers), contract["cache_tokens"])
    if any(name.endswith(".qkv") for name in acts):
        _split_qkv(acts, model.config)
    if "logits_raw" in points:  # the capped logits: the model's output
        acts["logits"] = as_array(out.logits[0])
    acts = {name: _per_token(a) for name, a in acts.items()}
    for name, (a, b) in joined.items():
        acts[name] = _joined(acts.pop(a), acts.pop(b))
    if impl is None:
        impl = "transformers %s, torch %s, %s" % (transformers.__version__, torch.__version__,
                                                 model.config._attn_implementation)
    model_input = input_ids[0].to(torch.float32) if logits else acts.pop(INPUT)  # ids: exact FP32 values
    write_model_dump(path, contract, weights, model_input, acts, impl)
    return contract


# --- Qwen3-Next (hybrid: Gated DeltaNet and gated attention, MoE with a gated shared expert) ---
#
# docs/diverge.md, "Recording Hugging Face models", lists what each point is.
# Points no module returns are taken by wrapping the modeling module's
# functions while recording (the short convolution, the chunked delta rule,
# the attention function) or recomputed in a hook from the module's own
# inputs by the same operations (the gated norm's halves, the attention
# gate's sigmoid, the shared expert's gate): bit for bit what the module
# computes in between, since CPU PyTorch is deterministic.


def _qwen3_next_contract(config, tokens, dtype):
    if getattr(config, "hidden_act", "silu") != "silu":
        raise ValueError("hidden_act %r does not map (swiglu is silu(gate) * up)" % config.hidden_act)
    if getattr(config, "attention_bias", False):
        raise ValueError("attention_bias does not map (the linear layers' projections have none)")
    if config.linear_key_head_dim != config.linear_value_head_dim:
        raise ValueError("linear_key_head_dim != linear_value_head_dim is not mapped (d_k = d_v)")
    if not config.num_experts:
        raise ValueError("num_experts 0 (every MLP dense) is not mapped")
    params = dict(getattr(config, "rope_parameters", None) or {})
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kinds = {"linear_attention": "D", "full_attention": "G"}
    pattern = "".join(kinds[t] for t in config.layer_types)
    return {
        "layers": config.num_hidden_layers, "pattern": pattern, "attention_kind": "gated", "linear_kind": "gdn",
        "width": config.hidden_size, "heads": config.num_attention_heads, "kv_heads": config.num_key_value_heads,
        "head_dim": head_dim, "rotary_dim": int(head_dim * params.get("partial_rotary_factor", 1.0)),
        "rope_base": float(params.get("rope_theta", 10000.0)), "tokens": int(tokens), "norm": "rms_norm",
        "eps": float(config.rms_norm_eps), "placement": "pre", "zero_centered": True, "qk_norm": True,
        "linear_heads": config.linear_num_key_heads, "linear_v_heads": config.linear_num_value_heads,
        "linear_head_dim": config.linear_key_head_dim, "short_conv": config.linear_conv_kernel_dim,
        "decay": "exp_softplus", "l2_format": "fp32", "linear_output_gate": True, "linear_gate_act": "silu",
        "o_norm_zero_centered": False,
        "ffn": config.intermediate_size, "mlp_pattern": _mlp_pattern(config),
        "mlp": "moe", "experts": config.num_experts, "top_k": config.num_experts_per_tok, "shared_experts": 1,
        "shared_gate": True, "expert_ffn": config.moe_intermediate_size,
        "shared_ffn": config.shared_expert_intermediate_size, "router_score": "softmax",
        "renormalize": bool(config.norm_topk_prob), "selection_bias": False,
        "dtype": dtype, "residual_format": dtype,
        # Qwen3NextRMSNorm: (x / rms * (1 + w)) in FP32, rounded once; its
        # gated norm: x / rms rounded to dtype, then * w (Llama's order);
        # PyTorch's SiLU (the short convolution's, the gate's in FP32, the
        # shared expert's): the FP32 quotient x / (1 + exp(-x)).
        "conventions": {"rope_pairing": "half", "norm_cast": "after_weight", "o_norm:norm_cast": "before_weight",
                        "gate_order": "gate_up", "rope_arith": "dtype", "attention_probs": "dtype",
                        "router_arith": "dtype", "glu_arith": "separate", "act_arith": "quotient"},
    }


def _qwen3_next_points(m):
    """The module points (the rest: _Qwen3NextTaps)."""
    points, joined = {INPUT: (m.embed_tokens, "output")}, {}
    for l, layer in enumerate(m.layers):
        p = "layers.%d." % l
        if hasattr(layer.mlp, "gate_proj"):  # a dense MLP layer (mlp_only_layers, decoder_sparse_step)
            f = layer.mlp
            # joined into gate_up (not "gate": the attention gate's point)
            points.update({p + "gate_proj": (f.gate_proj, "output"), p + "up_proj": (f.up_proj, "output"),
                           p + "h": (f.down_proj, "input")})
            joined[p + "gate_up"] = (p + "gate_proj", p + "up_proj")
        out_proj = layer.linear_attn.out_proj if hasattr(layer, "linear_attn") else layer.self_attn.o_proj
        points.update({
            p + "attn_norm": (layer.input_layernorm, "output"),
            p + "attn_gated": (out_proj, "input"), p + "attn_out": (out_proj, "output"),
            p + "mid": (layer.post_attention_layernorm, "input"),
            p + "mlp_norm": (layer.post_attention_layernorm, "output"),
            p + "mlp_out": (layer.mlp, "output"), p + "output": (layer, "output"),
        })
        if hasattr(layer, "self_attn"):
            a = layer.self_attn
            points.update({p + "k": (a.k_proj, "output"), p + "v": (a.v_proj, "output"),
                           p + "q_norm": (a.q_norm, "output"), p + "k_norm": (a.k_norm, "output")})
    return points, joined


def _qwen3_next_weights(m):
    import torch
    w = {}
    for l, layer in enumerate(m.layers):
        p, f = "layers.%d." % l, layer.mlp
        w[p + "attn_norm.weight"] = layer.input_layernorm.weight
        w[p + "mlp_norm.weight"] = layer.post_attention_layernorm.weight
        if hasattr(layer, "linear_attn"):
            w.update(_gdn_weights(p, layer.linear_attn))
        else:
            a, H, D = layer.self_attn, m.config.num_attention_heads, layer.self_attn.head_dim
            qg = a.q_proj.weight.view(H, 2 * D, -1)  # per head: D query rows, then D gate rows
            w[p + "q.weight"], w[p + "gate.weight"] = qg[:, :D].reshape(H * D, -1), qg[:, D:].reshape(H * D, -1)
            w[p + "k.weight"], w[p + "v.weight"], w[p + "o.weight"] = a.k_proj.weight, a.v_proj.weight, a.o_proj.weight
            w[p + "q_norm.weight"], w[p + "k_norm.weight"] = a.q_norm.weight, a.k_norm.weight
        if hasattr(f, "gate_proj"):  # a dense MLP layer
            w[p + "gate_up.weight"] = torch.cat([f.gate_proj.weight, f.up_proj.weight])
            w[p + "down.weight"] = f.down_proj.weight
            continue
        w[p + "router.weight"] = f.gate.weight.t()
        w[p + "experts.gate_up.weight"] = f.experts.gate_up_proj.transpose(1, 2)
        w[p + "experts.down.weight"] = f.experts.down_proj.transpose(1, 2)
        s = f.shared_expert
        w[p + "shared_mlp.gate_up.weight"] = torch.cat([s.gate_proj.weight, s.up_proj.weight])
        w[p + "shared_mlp.down.weight"] = s.down_proj.weight
        w[p + "shared_gate.weight"] = f.shared_expert_gate.weight
    return w


def _gdn_weights(p, g):
    """Qwen3NextGatedDeltaNet's fused, per-key-head interleaved projections
    split into the contract's q, k, v, gate (z), b and g (a) rows."""
    Hk, Hv, dk, dv = g.num_k_heads, g.num_v_heads, g.head_k_dim, g.head_v_dim
    r, C = Hv // Hk, g.in_proj_qkvz.weight.shape[-1]
    qkvz = g.in_proj_qkvz.weight.view(Hk, 2 * dk + 2 * r * dv, C)
    q, k, v, z = qkvz.split([dk, dk, r * dv, r * dv], dim=1)
    b, a = g.in_proj_ba.weight.view(Hk, 2 * r, C).split([r, r], dim=1)
    conv = g.conv1d.weight.squeeze(1)  # [q | k | v channels, K]
    return {p + "q.weight": q.reshape(-1, C), p + "k.weight": k.reshape(-1, C), p + "v.weight": v.reshape(-1, C),
            p + "gate.weight": z.reshape(-1, C), p + "b.weight": b.reshape(-1, C), p + "g.weight": a.reshape(-1, C),
            p + "q_conv.weight": conv[:g.key_dim], p + "k_conv.weight": conv[g.key_dim:2 * g.key_dim],
            p + "v_conv.weight": conv[2 * g.key_dim:], p + "decay_a.weight": g.A_log, p + "decay_dt.bias": g.dt_bias,
            p + "o_norm.weight": g.norm.weight, p + "o.weight": g.out_proj.weight}


class _AttentionTap:
    """The modeling module's ALL_ATTENTION_FUNCTIONS, its functions wrapped to
    record their output (the attention before the output gate)."""

    def __init__(self, inner, record):
        self._inner, self._record = inner, record

    def get_interface(self, name, default):
        fn = self._inner.get_interface(name, default)

        def wrapped(*args, **kwargs):
            out = fn(*args, **kwargs)
            self._record(out[0])
            return out
        return wrapped

    def __getattr__(self, name):
        return getattr(self._inner, name)


class _Qwen3NextTaps(_HfTaps):
    """_HfTaps (RoPE, routers) and Qwen3-Next's own points: the split fused
    projections, the short convolution (before and after SiLU), the delta
    rule's inputs and output, the gated norm's halves, the gated attention,
    the routed sum and the gated shared expert."""

    def __init__(self, m, tokens):
        super().__init__(m)
        import torch
        self._torch, self._pending, self._layers, self._tokens = torch, {}, m.layers, tokens
        mod = self.module
        self._saved = {n: getattr(mod, n) for n in ("causal_conv1d_fn", "torch_chunk_gated_delta_rule",
                                                      "ALL_ATTENTION_FUNCTIONS")}
        mod.causal_conv1d_fn = self._conv
        mod.torch_chunk_gated_delta_rule = self._delta
        mod.ALL_ATTENTION_FUNCTIONS = _AttentionTap(self._saved["ALL_ATTENTION_FUNCTIONS"],
                                                    lambda o: self._put(self._p("attn"), self._rows(o)))
        for l, layer in enumerate(m.layers):
            self._hook(layer, "pre", lambda mod_, args, l=l: setattr(self, "layer", l))
            if hasattr(layer, "linear_attn"):
                g = layer.linear_attn
                self._hook(g.in_proj_qkvz, "out", lambda mod_, a, o, l=l: self._pending.__setitem__(l, o))
                self._hook(g.in_proj_ba, "out", lambda mod_, a, o, l=l, g=g: self._projections(l, g, o))
                self._hook(g.norm, "out", lambda mod_, a, o, l=l, g=g: self._gated_norm(l, g, *a))
            else:
                a = layer.self_attn
                self._hook(a.q_proj, "out", lambda mod_, args, o, l=l, a=a: self._query_gate(l, a, o))
            f = layer.mlp
            if hasattr(f, "gate_proj"):  # a dense MLP layer: its points are module hooks
                continue
            self._hook(f.experts, "out", lambda mod_, a, o, l=l: self._put("layers.%d.experts" % l, o))
            s, p = f.shared_expert, "layers.%d." % l
            self._hook(s.gate_proj, "out", lambda mod_, a, o, p=p: self._pending.__setitem__(p, o))
            self._hook(s.up_proj, "out", lambda mod_, a, o, p=p: self._put(
                p + "shared_gate_up", self._torch.cat([self._pending.pop(p), o], dim=-1)))
            self._hook(s.down_proj, "out", lambda mod_, a, o, p=p: self._shared_down(p, a[0], o))
            self._hook(f.shared_expert_gate, "out", lambda mod_, a, o, p=p: self._shared_gate(p, o))

    def _p(self, name):
        return "layers.%d.%s" % (self.layer, name)

    @staticmethod
    def _rows(t):
        """[1, T, ...] -> [T, features]."""
        return t[0].reshape(t.shape[1], -1)

    def _projections(self, l, g, ba):
        q, k, v, z, b, a = g.fix_query_key_value_ordering(self._pending.pop(l), ba)
        for name, t in (("q", q), ("k", k), ("v", v), ("gate", z), ("b_logit", b), ("g_logit", a)):
            self._put("layers.%d.%s" % (l, name), self._rows(t))

    def _conv(self, hidden_states, weight, bias=None, activation=None, **kwargs):
        """causal_conv1d_fn with its activation applied here, as it applies it
        (in a decode step over the cached inputs, then the new ones: the
        points are the new tokens' rows)."""
        from transformers.activations import ACT2FN
        out = self._saved["causal_conv1d_fn"](hidden_states, weight, bias, activation=None, **kwargs)
        y = ACT2FN[activation](out).to(hidden_states.dtype) if activation is not None else out
        g = self._layer_gdn()
        for stage, t in (("conv", out), ("act", y)):
            parts = t[0, :, -self._tokens:].transpose(0, 1).split([g.key_dim, g.key_dim, g.value_dim], dim=-1)
            for name, part in zip("qkv", parts):
                self._put(self._p(name + "_" + stage), part)
        return y

    def _layer_gdn(self):
        return self._layers[self.layer].linear_attn

    def _delta(self, query, key, value, g, beta, **kwargs):
        """The chunked delta rule: q, k L2-normalized in FP32 as it does
        (before its repeat to the value heads, which copies rows), the decay,
        beta and the output."""
        f32 = self._torch.float32
        for name, t in (("q_l2", query), ("k_l2", key)):
            self._put(self._p(name), self._rows(self.module.l2norm(t.to(f32), dim=-1, eps=1e-6)))
        self._put(self._p("g"), self._rows(g))
        self._put(self._p("beta"), self._rows(beta))
        out = self._saved["torch_chunk_gated_delta_rule"](query, key, value, g, beta, **kwargs)
        self._put(self._p("attn"), self._rows(out[0]))
        return out

    def _gated_norm(self, l, g, x, gate):
        """RMSNormGated's two halves ([T Hv, d] rows): w * (x / rms).to(dtype), silu(gate) in FP32."""
        from transformers.activations import ACT2FN
        t, norm = self._torch, g.norm
        h = x.to(t.float32)
        h = h * t.rsqrt(h.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
        T = x.shape[0] // g.num_v_heads
        self._put("layers.%d.o_norm" % l, (norm.weight * h.to(x.dtype)).reshape(T, -1))
        self._put("layers.%d.gate_act" % l, ACT2FN[norm.activation](gate.to(t.float32)).reshape(T, -1))

    def _query_gate(self, l, a, out):
        """q_proj's output per head: D query values, then D gate values."""
        T, H = out.shape[1], a.config.num_attention_heads
        q, gate = self._torch.chunk(out[0].view(T, H, 2 * a.head_dim), 2, dim=-1)
        self._put("layers.%d.q" % l, q.reshape(T, -1))
        self._put("layers.%d.gate" % l, gate.reshape(T, -1))
        self._put("layers.%d.gate_sig" % l, self._torch.sigmoid(gate).reshape(T, -1))

    def _shared_down(self, p, h, out):
        self._put(p + "shared_h", h)
        self._put(p + "shared_out", out)
        self._pending[p + "out"] = out

    def _shared_gate(self, p, logit):
        """The shared expert's gate: sigmoid(x w_sg) * shared_out, as the MoE block computes it."""
        sig = self._torch.nn.functional.sigmoid(logit)
        self._put(p + "shared_logit", logit)
        self._put(p + "shared_sig", sig)
        self._put(p + "shared_gated", sig * self._pending.pop(p + "out"))

    def remove(self):
        for name, fn in self._saved.items():
            setattr(self.module, name, fn)
        super().remove()


# --- DeepSeek-V3 (MLA with a low-rank query and latent norms, grouped sigmoid routing) ---


def _deepseek_contract(config, tokens, dtype):
    if getattr(config, "hidden_act", "silu") != "silu":
        raise ValueError("hidden_act %r does not map (swiglu is silu(gate) * up)" % config.hidden_act)
    if getattr(config, "attention_bias", False):
        raise ValueError("attention_bias does not map")
    params = dict(getattr(config, "rope_parameters", None) or {})
    if config.rms_norm_eps != 1e-6:  # q_a_layernorm and kv_a_layernorm are built with eps 1e-6
        raise ValueError("rms_norm_eps %g does not map: the latent norms use 1e-6, the contract one eps"
                         % config.rms_norm_eps)
    v2 = config.model_type == "deepseek_v2"
    method = getattr(config, "topk_method", None)
    if method not in ((None, "greedy", "group_limited_greedy") if v2 else ("noaux_tc", None)):
        raise ValueError("topk_method %r does not map (DeepSeek-V3's noaux_tc; DeepSeek-V2's greedy, group_limited_greedy)"
                         % method)
    H, L = config.num_attention_heads, config.num_hidden_layers
    dense = min(getattr(config, "first_k_dense_replace", 0) or 0, L)
    grouped = method == "group_limited_greedy" or (not v2 and (config.n_group or 1) > 1)
    c = {
        "layers": L, "pattern": "dense", "attention_kind": "mla", "width": config.hidden_size,
        "heads": H, "kv_heads": H, "head_dim": config.qk_rope_head_dim, "tokens": int(tokens),
        "mla_latent": config.kv_lora_rank, "mla_nope_dim": config.qk_nope_head_dim,
        "mla_rope_dim": config.qk_rope_head_dim, "mla_v_dim": config.v_head_dim,
        "mla_q_rank": config.q_lora_rank or 0, "mla_latent_norm": True,
        "norm": "rms_norm", "eps": float(config.rms_norm_eps), "placement": "pre",
        "rope_base": float(params.get("rope_theta", 10000.0)), "ffn": config.intermediate_size,
        "mlp": "moe", "mlp_pattern": "D" * dense + "M" * (L - dense), "experts": config.n_routed_experts,
        "top_k": config.num_experts_per_tok, "expert_ffn": config.moe_intermediate_size,
        "shared_experts": 1, "shared_dense": True,
        "shared_ffn": config.moe_intermediate_size * config.n_shared_experts,
        "router_score": "sigmoid", "selection_bias": True, "renormalize": bool(config.norm_topk_prob),
        "router_groups": (config.n_group or 1) if grouped else 1, "router_topk_groups": (config.topk_group or 0) if grouped else 0,
        "routed_scaling": float(config.routed_scaling_factor),
        "dtype": dtype, "residual_format": dtype,
        # DeepseekV3RMSNorm casts x / rms to the dtype before its weight; the
        # rope parts pair (2j, 2j+1) with rope_interleave; the router runs in
        # FP32 (its weight and bias are kept FP32).
        "conventions": {"rope_pairing": "interleaved" if getattr(config, "rope_interleave", False) else "half",
                        "norm_cast": "before_weight", "gate_order": "gate_up", "rope_arith": "dtype",
                        "attention_probs": "dtype", "router_arith": "fp32", "glu_arith": "separate"},
    }
    if v2:
        # DeepseekV2TopkRouter: FP32 softmax scores, no bias, no
        # renormalization (the weights times routed_scaling_factor), groups
        # ranked by their largest score; apply_rotary_emb: the pairs (2j,
        # 2j+1) as complex numbers times FP32 polar(1, m theta), one rounding
        # back to the dtype.
        c.update({"router_score": "softmax", "selection_bias": False, "renormalize": False, "router_group_top": 1})
        c["conventions"].update({"rope_pairing": "interleaved", "rope_arith": "fp32_angles"})
    return c


def _mla_scale(config):
    """DeepSeek's softmax scale under YaRN: qk_head_dim^-1/2 times
    mscale(factor, mscale_all_dim)^2 (transformers' yarn_apply_mscale); none
    (1/sqrt(d_qk), the contract's default) otherwise."""
    params = dict(getattr(config, "rope_parameters", None) or {})
    if params.get("rope_type", "default") == "default" or not params.get("mscale_all_dim"):
        return {}
    m = _yarn_mscale(params["factor"], params["mscale_all_dim"])
    return {"attention_scale": (config.qk_nope_head_dim + config.qk_rope_head_dim) ** -0.5 * m * m}


def _deepseek_points(m):
    points, joined = {INPUT: (m.embed_tokens, "output")}, {}
    for l, layer in enumerate(m.layers):
        p, a, f = "layers.%d." % l, layer.self_attn, layer.mlp
        points.update({
            p + "attn_norm": (layer.input_layernorm, "output"),
            p + "q": (a.q_b_proj if a.q_lora_rank else a.q_proj, "output"),
            p + "kv_a": (a.kv_a_proj_with_mqa, "output"), p + "kv_norm": (a.kv_a_layernorm, "output"),
            p + "attn": (a.o_proj, "input"), p + "attn_out": (a.o_proj, "output"),
            p + "mid": (layer.post_attention_layernorm, "input"),
            p + "mlp_norm": (layer.post_attention_layernorm, "output"),
            p + "mlp_out": (f, "output"), p + "output": (layer, "output"),
        })
        if a.q_lora_rank:
            points.update({p + "q_a": (a.q_a_proj, "output"), p + "q_a_norm": (a.q_a_layernorm, "output")})
        mlp, pre = (f, "") if hasattr(f, "gate_proj") else (f.shared_experts, "shared_")
        points.update({p + pre + "gate_proj": (mlp.gate_proj, "output"), p + pre + "up_proj": (mlp.up_proj, "output"),
                       p + pre + "h": (mlp.down_proj, "input")})
        joined[p + pre + "gate_up"] = (p + pre + "gate_proj", p + pre + "up_proj")
        if pre:
            points[p + "shared_out"] = (mlp.down_proj, "output")
    return points, joined


def _deepseek_weights(m):
    import torch
    w = {}
    for l, layer in enumerate(m.layers):
        p, a, f = "layers.%d." % l, layer.self_attn, layer.mlp
        w[p + "attn_norm.weight"] = layer.input_layernorm.weight
        w[p + "mlp_norm.weight"] = layer.post_attention_layernorm.weight
        if a.q_lora_rank:
            w[p + "q_a.weight"], w[p + "q_a_norm.weight"] = a.q_a_proj.weight, a.q_a_layernorm.weight
            w[p + "q_b.weight"] = a.q_b_proj.weight
        else:
            w[p + "q.weight"] = a.q_proj.weight
        w[p + "kv_a.weight"], w[p + "kv_norm.weight"] = a.kv_a_proj_with_mqa.weight, a.kv_a_layernorm.weight
        w[p + "kv_b.weight"], w[p + "o.weight"] = a.kv_b_proj.weight, a.o_proj.weight
        mlp, pre = (f, "") if hasattr(f, "gate_proj") else (f.shared_experts, "shared_mlp.")
        w[p + pre + "gate_up.weight"] = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])
        w[p + pre + "down.weight"] = mlp.down_proj.weight
        if pre:
            w[p + "router.weight"] = f.gate.weight.t()                # [C, E], FP32
            if hasattr(f.gate, "e_score_correction_bias"):  # V3's; V2's router has none
                w[p + "router.bias"] = f.gate.e_score_correction_bias  # [E], FP32: chooses, never weighs
            w[p + "experts.gate_up.weight"] = f.experts.gate_up_proj.transpose(1, 2)
            w[p + "experts.down.weight"] = f.experts.down_proj.transpose(1, 2)
    return w


class _DeepseekTaps(_HfTaps):
    """_HfTaps (rotary, routers) and DeepSeek's own: the interleaved rotary
    function's outputs put back in place (it returns the rotated pairs
    de-interleaved: even elements, then odd), kv_b_proj's [1, 1, T, .] output
    per token, the routed sum."""

    def __init__(self, m):
        super().__init__(m)
        self._inner_interleave = getattr(self.module, "apply_rotary_pos_emb_interleave", None)
        if self._inner_interleave is not None:
            self.module.apply_rotary_pos_emb_interleave = self._interleaved
        for l, layer in enumerate(m.layers):
            self._hook(layer.self_attn.kv_b_proj, "out",
                       lambda mod_, args, out, l=l: self._put("layers.%d.kv_b" % l, out.reshape(out.shape[-2], -1)))
            if not hasattr(layer.mlp, "gate_proj"):
                self._hook(layer.mlp.experts, "out", lambda mod_, args, out, l=l: self._put("layers.%d.experts" % l, out))

    @staticmethod
    def _ordered(module, logits, ids, weights):
        """DeepSeek's router returns its top k unsorted (topk(sorted=False)):
        each token's experts by decreasing choice score (V3: sigmoid(logit) +
        bias; V2: the softmax score), conform's router point order, ties to
        the lower index, the weights with them."""
        import torch
        bias = getattr(module, "e_score_correction_bias", None)
        score = logits.softmax(dim=-1, dtype=torch.float32) if bias is None else logits.sigmoid() + bias
        choice = score.gather(1, ids)
        # decreasing score, then increasing id: sort by id first, then a stable sort by score
        by_id = torch.sort(ids, dim=-1).indices
        ids, weights, choice = ids.gather(1, by_id), weights.gather(1, by_id), choice.gather(1, by_id)
        order = torch.sort(choice, dim=-1, descending=True, stable=True).indices
        return ids.gather(1, order), weights.gather(1, order)

    def _interleaved(self, q, k, *args, **kwargs):
        import torch
        q_embed, k_embed = self._inner_interleave(q, k, *args, **kwargs)
        for name, t in (("q_rope", q_embed), ("k_rope", k_embed)):
            half = t.shape[-1] // 2  # [even | odd] -> pairs in place
            placed = torch.stack((t[..., :half], t[..., half:]), dim=-1).flatten(-2)
            self._put("layers.%d.%s" % (self.layer, name), placed[0].transpose(0, 1).reshape(t.shape[2], -1))
        return q_embed, k_embed

    def remove(self):
        if self._inner_interleave is not None:
            self.module.apply_rotary_pos_emb_interleave = self._inner_interleave
        super().remove()


# --- self-test (NumPy only) ----------------------------------------------------------


class _Handle:
    def __init__(self, hooks, hook):
        self.hooks, self.hook = hooks, hook

    def remove(self):
        self.hooks.remove(self.hook)


class _FakeModule:
    """Duck-typed stand-in for torch.nn.Module: register_forward_hook and a call."""

    def __init__(self, fn):
        self.fn, self.hooks = fn, []

    def register_forward_hook(self, hook):
        self.hooks.append(hook)
        return _Handle(self.hooks, hook)

    def __call__(self, *args):
        out = self.fn(*args)
        for hook in list(self.hooks):
            hook(self, args, out)
        return out


def _expect_error(kind, fn, text):
    try:
        fn()
    except kind as e:
        assert text in str(e), "%r not in %r" % (text, str(e))
        return
    raise AssertionError("no %s about %r" % (kind.__name__, text))


def _self_test():
    assert name_problem("layers.0.q.weight") is None and name_problem("a-b_C") is None
    for bad, why in (("", "empty"), ("a b", "character"), ("a..b", "empty dot"), (".a", "empty dot"),
                     ("x" * 257, "longer"), ("caf\u00e9", "character")):
        assert why in name_problem(bad), (bad, name_problem(bad))

    norm = _FakeModule(lambda x: x * 2)
    block = _FakeModule(lambda x: (norm(x) + 1, "extra"))
    x = np.arange(6, dtype=np.float32).reshape(1, 2, 3)
    with ForwardRecorder({"input": (block, "input"), "layers.0.attn_norm": (norm, "output"),
                          "layers.0.output": (block, "output")}) as rec:
        block(x)
    assert not norm.hooks and not block.hooks, "hooks removed on exit"
    assert rec.missing() == []
    assert np.array_equal(rec.activations["layers.0.output"], x[0] * 2 + 1)
    assert rec.activations["input"].shape == (2, 3)

    with ForwardRecorder({"p": (norm, "output")}) as twice:
        _expect_error(ValueError, lambda: (norm(x), norm(x)), "recorded twice")
    with ForwardRecorder({"p": (norm, "output")}):
        _expect_error(ValueError, lambda: norm(np.zeros((2, 3), np.float32)), "no leading batch of 1")
    _expect_error(ValueError, lambda: ForwardRecorder({"p": (norm, "inside")}), "expected (submodule")
    _expect_error(ValueError, lambda: ForwardRecorder({"a b": (norm, "output")}), "character outside")
    assert twice.missing() == [] and not norm.hooks

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.safetensors")
        rec.write(path, {"layers": 1}, {"layers.0.attn_norm.weight": cc.bf16(np.ones(3, np.float32))}, impl="self")
        header, raw = cc._read_safetensors(path)
        meta = header["__metadata__"]
        assert meta == {"conform.format": FORMAT, "conform.contract": '{"layers":1}', "conform.impl": "self"}, meta
        assert sorted(raw) == ["act.layers.0.attn_norm", "act.layers.0.output", "input", "layers.0.attn_norm.weight"]
        assert header["layers.0.attn_norm.weight"]["dtype"] == "BF16"
        assert os.listdir(tmp) == ["m.safetensors"], "no temporary file left"
        w = {}
        for bad_w, bad_a, text in (({"input": x}, {}, "read back as the input"), ({"act.x": x}, {}, "read back as"),
                                   ({"a/b": x}, {}, "character outside"), ({}, {"": x}, "after 'act.' is empty"),
                                   ({}, {"x.": x}, "empty dot")):
            _expect_error(ValueError, lambda: write_model_dump(path, {}, bad_w, x[0], bad_a), text)
        _expect_error(TypeError, lambda: write_model_dump(path, [1], w, x[0], {}), "contract must be a dict")
    print("conform_model self-test: ok")


if __name__ == "__main__":
    cc.command_line(__doc__, _self_test)
