#!/usr/bin/env python3
"""Hugging Face transformers decoders recorded by conform_model.record_hf and
judged by `conform diverge` (docs/diverge.md, "Recording Hugging Face models").

Small random-weight models, built from configs (no download), recorded
from the token ids to the logits, in BF16:
- a Llama-style dense stack passes; the same model with one planted defect
  fails first at that layer and the report names the convention:
  epsilon outside the root in layer 1's attention norm, or in the final
  norm (eps_placement=outside), the interleaved RoPE pairing in layer 1
  (rope_pairing=interleaved);
- Qwen3 (QK-norm) and Qwen2 (q, k, v biases; recorded without the ends
  too, and with its head tied to the embedding) dense stacks pass;
- Mixtral and Qwen3-MoE stacks pass;
- a Qwen3-Next hybrid (Gated DeltaNet with grouped value heads, gated
  attention, a MoE with a gated shared expert) passes in BF16 and FP32;
  declared with its gated norm cast like the others it fails there naming
  norm_cast, with a 1-ulp SiLU at its FP32 output gate naming act_arith;
  layer 1's delta
  rule with tiled query/key heads fails at layers.1.attn, its decay without
  dt_bias at layers.1.g;
- a DeepSeek-V3 stack (MLA with a low-rank query and latent norms, a first
  dense layer, grouped sigmoid routing with a selection bias and routed
  scaling, a shared expert) passes in BF16 and FP32; declared with the
  half-split rope pairing it fails at layers.0.q_rope naming the interleaved
  one; its latent norm without weight fails at layers.1.kv_norm, its router
  without the group limit at layers.2.router;
- Gemma 2 (attention and output logits capped, eager attention: the
  attention logits in BF16 at every stage) and Llama in eager attention
  pass; Gemma 2 declared with FP32 attention logits fails at the first
  attention naming attention_logits=dtype, declared with a 1-ulp final
  softcap at the logits naming softcap_arith=dtype, and with layer 1's
  attention softcap dropped fails there;
- every mapped architecture passes in FP16 too;
- Phi-3 (fused qkv and gate_up projections, with and without a partial
  rotation) passes in BF16 and FP32; rotating layer 1's last dims fails there;
- Gemma 3 with the erf GELU (hidden_activation "gelu") passes in BF16 and
  FP32; declared with a fused GeGLU it fails at layer 0's h, named
  glu_arith=separate;
- what does not map (dynamic RoPE, a GELU Llama, a SiLU Gemma) is refused naming why;
- declared without the conventions of BF16 arithmetic (rope_arith,
  attention_probs, router_arith, logits_format = fp32), the clean models
  fail at the first step that needs one, which the report names;
and in FP32: Llama, Qwen2, Qwen3, Mixtral and Qwen3-MoE pass; declared with
a fused SwiGLU (glu_arith=fused) Llama fails at layer 0's h, named
glu_arith=separate.

    hf_model_test.py --conform build/conform [--keep DIR]

Exits 77 (a CTest skip) when torch or transformers cannot be imported.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import types

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

try:
    import torch
    import transformers
except ImportError as e:
    print("SKIP: %s (pip install torch transformers numpy)" % e)
    sys.exit(77)

import conform_model as cm

TOKENS = 32
SHAPE = dict(vocab_size=256, hidden_size=128, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
             max_position_embeddings=2 * TOKENS,
             rms_norm_eps=0.05)  # large enough for the epsilon's placement to show in BF16 (docs/model.md)


def randomized(config, seed=1, dtype=torch.bfloat16, attn="sdpa"):
    """The model in `dtype` as from_pretrained(dtype=...) makes it (RoPE's
    inverse frequencies stay FP32), with O(1) activations: embeddings N(0, 1),
    projections N(0, 1 / fan_in), norm weights 1 + 0.1 N (so that where the
    weight is applied shows); attention by `attn` (sdpa or eager)."""
    config._attn_implementation = attn
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            elif "embed" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[-1]))
    return model


def ids(seed=2):
    return torch.randint(0, SHAPE["vocab_size"], (1, TOKENS), generator=torch.Generator().manual_seed(seed))


def llama(dtype=torch.bfloat16):
    return randomized(transformers.LlamaConfig(intermediate_size=256, **SHAPE), dtype=dtype)


# Frequency scaling with short trained lengths, so that 32 tokens of 32-dim
# heads meet every band: llama3 keeps pair 0, blends 1-2, divides 3-15 by 8;
# yarn (untruncated, L0 256) ramps pairs 0-6 with attention factor 1.139.
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 32, "rope_theta": 1e4}
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256, "truncate": False,
        "rope_theta": 1e4}


# Dynamic NTK past a trained length of 16: at 32 tokens the base becomes
# 1e4 (2 * 32 / 16 - 1)^(32 / 30) (max_position_embeddings is that length).
DYNAMIC = {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4}


def llama_dynamic(dtype=torch.bfloat16):
    shape = dict(SHAPE, max_position_embeddings=16)
    return randomized(transformers.LlamaConfig(intermediate_size=256, rope_parameters=dict(DYNAMIC), **shape), dtype=dtype)


def stale_dynamic(model):
    """A defect: the dynamic rope believes its frequencies already cover any
    length, so they are never recomputed past the trained one."""
    cm._base(model).rotary_emb.max_seq_len_cached = 1 << 30
    return model


def llama3(dtype=torch.bfloat16):
    return randomized(transformers.LlamaConfig(intermediate_size=256, rope_parameters=dict(LLAMA3), **SHAPE), dtype=dtype)


def qwen2_yarn(dtype=torch.bfloat16):
    shape = dict(SHAPE, max_position_embeddings=1024)  # L0 times the factor
    return randomized(transformers.Qwen2Config(intermediate_size=256, rope_parameters=dict(YARN), **shape), dtype=dtype)


def unscaled_rope(model):
    """A defect: the rotary embedding's frequencies reset to the unscaled
    ones and its attention factor to 1 (rope scaling silently dropped)."""
    rotary = cm._base(model).rotary_emb
    dim = rotary.inv_freq.shape[0] * 2
    with torch.no_grad():
        rotary.inv_freq.copy_(1.0 / (1e4 ** (torch.arange(0, dim, 2, dtype=torch.float) / dim)))
    rotary.attention_scaling = 1.0
    return model


def qwen3(dtype=torch.bfloat16):  # QK-norm, head_dim set apart from the width
    return randomized(transformers.Qwen3Config(intermediate_size=256, head_dim=32, **SHAPE), dtype=dtype)


def qwen2(dtype=torch.bfloat16, tied=False):  # q, k, v biases
    return randomized(transformers.Qwen2Config(intermediate_size=256, tie_word_embeddings=tied, **SHAPE), dtype=dtype)


def qwen3_moe(dtype=torch.bfloat16, **extra):  # QK-norm; the router returns its weights rounded to bf16
    return randomized(transformers.Qwen3MoeConfig(intermediate_size=256, moe_intermediate_size=128, num_experts=4,
                                                  num_experts_per_tok=2, head_dim=32, norm_topk_prob=True,
                                                  **SHAPE, **extra),
                      dtype=dtype)


def qwen3_next(dtype=torch.bfloat16, **extra):
    """3 Gated DeltaNet : 1 gated attention, 2 value heads per key head, MoE with a gated shared expert."""
    shape = dict(SHAPE, num_hidden_layers=4, **extra)
    return randomized(transformers.Qwen3NextConfig(
        intermediate_size=256, head_dim=32, moe_intermediate_size=64, shared_expert_intermediate_size=96, num_experts=4,
        num_experts_per_tok=2, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=32,
        linear_value_head_dim=32, linear_conv_kernel_dim=4, full_attention_interval=4, **shape), dtype=dtype)


def rope_scaling_checks(conform, tmp):
    """Llama 3.1's llama3, Qwen's YaRN and dynamic NTK frequencies pass in
    BF16 and FP32; the same models with the scaling dropped (for dynamic
    NTK: never recomputed past the trained length) fail at their first
    rotation."""
    check("llama3", conform, tmp, llama3())
    check("llama3_f32", conform, tmp, llama3(torch.float32))
    check("llama3_unscaled", conform, tmp, unscaled_rope(llama3()), (0, "layers.0.q_rope", None))
    check("qwen2_yarn", conform, tmp, qwen2_yarn())
    check("qwen2_yarn_f32", conform, tmp, qwen2_yarn(torch.float32))
    check("qwen2_yarn_unscaled", conform, tmp, unscaled_rope(qwen2_yarn()), (0, "layers.0.q_rope", None))
    check("llama_dynamic", conform, tmp, llama_dynamic())
    check("llama_dynamic_f32", conform, tmp, llama_dynamic(torch.float32))
    check("llama_dynamic_stale", conform, tmp, stale_dynamic(llama_dynamic()), (0, "layers.0.q_rope", None))


def deepseek_v3(dtype=torch.bfloat16, **extra):
    """MLA (low-rank query 48, latent 32, rope dims 8 interleaved, value dim 16),
    a first dense layer, then MoE: 8 experts in 4 groups, top 2 groups, top 2,
    sigmoid scores with a selection bias, routed scaling 2.5, one shared
    expert.  The latent norms' epsilon is 1e-6 whatever rms_norm_eps says:
    the model takes that one."""
    shape = dict(SHAPE, rms_norm_eps=1e-6, num_key_value_heads=4, **extra)
    model = randomized(transformers.DeepseekV3Config(
        intermediate_size=256, moe_intermediate_size=64, n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2,
        n_group=4, topk_group=2, routed_scaling_factor=2.5, first_k_dense_replace=1, q_lora_rank=48,
        kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, rope_interleave=True, **shape),
        dtype=dtype)
    with torch.no_grad():  # a selection bias that matters (randomized set every 1-D parameter to 1 + 0.1 N)
        for layer in cm._base(model).layers:
            if hasattr(layer.mlp, "gate"):
                layer.mlp.gate.e_score_correction_bias.copy_(0.05 * torch.randn(8, generator=torch.Generator().manual_seed(3)))
    return model


def deepseek_v2(dtype=torch.bfloat16, **extra):
    """DeepSeek-V2's MLA with a low-rank query (as deepseek_v3 above) and its
    own router: softmax scores, 8 experts in 4 groups ranked by their largest
    score, top 2 groups, top 2, no renormalization, routed scaling 2.5; its
    rotation the complex product of the interleaved pairs in FP32."""
    shape = dict(SHAPE, rms_norm_eps=1e-6, num_key_value_heads=4, **extra)
    return randomized(transformers.DeepseekV2Config(
        intermediate_size=256, moe_intermediate_size=64, n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2,
        n_group=4, topk_group=2, topk_method="group_limited_greedy", routed_scaling_factor=2.5, first_k_dense_replace=1,
        q_lora_rank=48, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, **shape), dtype=dtype)


def gemma3(dtype=torch.bfloat16, window=64, **extra):
    """Gemma 3 (text): sandwich norms (1 + w), QK-norm, GeGLU with the tanh
    GELU, sliding (L) and full (G) layers alternating, the local ones at base
    1e4, the global ones at 1e6 with linear scaling 8, the embedding times
    sqrt(C), softmax scale query_pre_attn_scalar^-1/2 = 24^-1/2, tied head."""
    shape = dict(SHAPE, num_hidden_layers=4, **extra)
    rope = {"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}}
    return randomized(transformers.Gemma3TextConfig(
        intermediate_size=256, head_dim=32, query_pre_attn_scalar=24, sliding_window=window, sliding_window_pattern=2,
        rope_parameters=rope, **shape), dtype=dtype)


def gemma2(dtype=torch.bfloat16, window=64, **extra):
    """Gemma 2: as Gemma 3 without QK-norm, one RoPE base (1e4) for every
    layer, the attention logits capped at 2 and the output logits at 5 (low
    enough to act on these O(1) logits), in eager attention (transformers
    refuses sdpa with a softcap)."""
    shape = dict(SHAPE, num_hidden_layers=4, **extra)
    return randomized(transformers.Gemma2Config(
        intermediate_size=256, head_dim=32, query_pre_attn_scalar=24, sliding_window=window, attn_logit_softcapping=2.0,
        final_logit_softcapping=5.0, **shape), dtype=dtype, attn="eager")


def phi3(dtype=torch.bfloat16, **extra):
    """Phi-3: Llama with one fused qkv_proj and one gate_up_proj; extra, e.g.
    partial_rotary_factor (Phi-4-mini's 0.75: the rotation passes the last
    quarter of each head through)."""
    return randomized(transformers.Phi3Config(intermediate_size=256, pad_token_id=0, eos_token_id=1, bos_token_id=1,
                                              **dict(SHAPE, **extra)), dtype=dtype)


WINDOW = 8  # a sliding window below TOKENS


def mistral(dtype=torch.bfloat16, attn="sdpa"):
    """Mistral: Llama with every layer local (sliding_window keys)."""
    return randomized(transformers.MistralConfig(intermediate_size=256, sliding_window=WINDOW, **SHAPE),
                      dtype=dtype, attn=attn)


def qwen2_window(dtype=torch.bfloat16):
    """Qwen2 with use_sliding_window: the layers from max_window_layers (1)
    on are local, layer 0 global (layer_types LL... after a G)."""
    return randomized(transformers.Qwen2Config(intermediate_size=256, use_sliding_window=True, sliding_window=WINDOW,
                                               max_window_layers=1, **SHAPE), dtype=dtype)


def mixtral(dtype=torch.bfloat16):
    return randomized(transformers.MixtralConfig(intermediate_size=128, num_local_experts=4, num_experts_per_tok=2,
                                                 **SHAPE), dtype=dtype)


# --- planted defects ------------------------------------------------------------------


def eps_outside(norm):
    """This RMSNorm divides by sqrt(mean x^2) + eps (one module instance)."""
    def forward(self, x):
        h = x.float()
        h = h / (h.pow(2).mean(-1, keepdim=True).sqrt() + self.variance_epsilon)
        return self.weight * h.to(x.dtype)
    norm.forward = types.MethodType(forward, norm)


def top2_groups(router):
    """This DeepSeek-V2 router ranks its groups by the sum of their two
    largest scores (DeepSeek-V3's rule) instead of their largest (one module
    instance)."""
    def forward(self, hidden_states):
        logits = torch.nn.functional.linear(hidden_states.view(-1, self.hidden_dim).float(), self.weight.float())
        scores = logits.softmax(dim=-1, dtype=torch.float32)
        grouped = scores.view(-1, self.num_group, self.num_experts // self.num_group)
        group_scores = grouped.topk(2, dim=-1).values.sum(dim=-1)
        group_idx = torch.topk(group_scores, k=self.topk_group, dim=-1, sorted=False)[1]
        mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
        mask = mask.unsqueeze(-1).expand(-1, self.num_group, self.num_experts // self.num_group).reshape(-1, self.num_experts)
        weights, ids = torch.topk(scores.masked_fill(~mask.bool(), 0.0), k=self.top_k, dim=-1, sorted=False)
        return logits, weights * self.routed_scaling_factor, ids
    router.forward = types.MethodType(forward, router)


def unit_offset_dropped(norm):
    """This Gemma RMSNorm applies its weight as w, not 1 + w (one module instance)."""
    def forward(self, x):
        return (self._norm(x.float()) * self.weight.float()).type_as(x)
    norm.forward = types.MethodType(forward, norm)


def ungrouped(router):
    """This DeepSeek router chooses its top k over every expert (the group
    limit dropped), otherwise as the module does (one module instance)."""
    def forward(self, hidden_states):
        logits = torch.nn.functional.linear(hidden_states.view(-1, self.hidden_dim).float(), self.weight.float())
        scores = logits.sigmoid()
        ids = torch.topk(scores + self.e_score_correction_bias, k=self.top_k, dim=-1, sorted=False)[1]
        weights = scores.gather(1, ids)
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20) * self.routed_scaling_factor
        return logits, weights, ids
    router.forward = types.MethodType(forward, router)


def unweighted(norm):
    """This RMSNorm forgets its weight (one module instance)."""
    def forward(self, x):
        h = x.float()
        return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)).to(x.dtype)
    norm.forward = types.MethodType(forward, norm)


class OneHook:
    """A planted defect held by one hook handle, removed on exit."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.handle.remove()


class WiderWindow(OneHook):
    """Layer `layer` sees W + 1 keys, [p - W, p] (a `j >= i - W` window): a
    pre-hook of that layer's attention unhides the key W before each query
    in the mask transformers passes it (boolean for sdpa, additive for eager)."""

    def __init__(self, model, layer, window):
        attn = cm._base(model).layers[layer].self_attn
        self.handle = attn.register_forward_pre_hook(lambda m, a, kw: (a, self._wider(kw, window)), with_kwargs=True)

    @staticmethod
    def _wider(kwargs, window):
        mask = kwargs["attention_mask"]
        t, s = mask.shape[-2:]
        edge = torch.arange(s)[None, :] == torch.arange(t)[:, None] + (s - t) - window
        kwargs["attention_mask"] = mask | edge if mask.dtype == torch.bool else mask.masked_fill(edge, 0.0)
        return kwargs


class TopLeftCausal(OneHook):
    """Layer `layer` aligns its causal mask to the top-left corner in a decode
    step: new query i sees keys j <= i, not j <= P + i (a pre-hook replaces
    the mask transformers passes it)."""

    def __init__(self, model, layer):
        attn = cm._base(model).layers[layer].self_attn
        self.handle = attn.register_forward_pre_hook(lambda m, a, kw: (a, self._top_left(kw)), with_kwargs=True)

    @staticmethod
    def _top_left(kwargs):
        mask = kwargs["attention_mask"]
        if mask is None:  # the prefill: square, is_causal (both corners agree)
            return kwargs
        t, s = mask.shape[-2:]
        seen = torch.ones(t, s, dtype=torch.bool).tril()
        kwargs["attention_mask"] = seen.expand_as(mask) if mask.dtype == torch.bool else \
            torch.zeros_like(mask).masked_fill(~seen, torch.finfo(mask.dtype).min)
        return kwargs


class UnshiftedPositions(OneHook):
    """The rotary embedding of a decode step takes positions from 0, not
    from the P cached tokens (the cache's length never added)."""

    def __init__(self, model, cached):
        def shift(pos):  # the recorded pass only: the prefill's positions start at 0
            return pos - cached if int(pos.min()) >= cached else pos

        def hook(module, args, kwargs):
            if "position_ids" in kwargs:
                kwargs["position_ids"] = shift(kwargs["position_ids"])
            else:
                args = (args[0], shift(args[1])) + tuple(args[2:])
            return args, kwargs
        self.handle = cm._base(model).rotary_emb.register_forward_pre_hook(hook, with_kwargs=True)


class PrefillFrequencies(OneHook):
    """A dynamic rope that keeps the prefill's frequencies in the decode
    step (not recomputed for the longer length): a pre-hook on the rotary
    embedding marks them current once the positions pass the cache."""

    def __init__(self, model, cached):
        rotary = cm._base(model).rotary_emb

        def hook(module, args, kwargs):
            pos = kwargs.get("position_ids", args[1] if len(args) > 1 else None)
            if int(pos.min()) >= cached:
                module.max_seq_len_cached = 1 << 30
        self.handle = rotary.register_forward_pre_hook(hook, with_kwargs=True)


class InterleavedRope:
    """Layer `layer` rotates the pairs (2j, 2j+1) with HF's cos/sin tables:
    the modeling module's apply_rotary_pos_emb, replaced while the block is
    in use, switches on a pre-hook of that layer's attention."""

    def __init__(self, model, layer):
        m = cm._base(model)
        self.module = sys.modules[type(m.layers[0].self_attn).__module__]
        self.inner, self.on = self.module.apply_rotary_pos_emb, False
        attn = m.layers[layer].self_attn
        self.handles = [attn.register_forward_pre_hook(lambda *a: self._set(True)),
                        attn.register_forward_hook(lambda *a: self._set(False))]

    def _set(self, on):
        self.on = on

    def __enter__(self):
        self.module.apply_rotary_pos_emb = self.apply
        return self

    def __exit__(self, *exc):
        self.module.apply_rotary_pos_emb = self.inner
        for h in self.handles:
            h.remove()

    def apply(self, q, k, cos, sin, *args, **kwargs):
        if not self.on:
            return self.inner(q, k, cos, sin, *args, **kwargs)
        half = cos.shape[-1] // 2
        c = cos[..., :half].repeat_interleave(2, -1).unsqueeze(1)
        s = sin[..., :half].repeat_interleave(2, -1).unsqueeze(1)

        def rotate(x):
            return torch.stack((-x[..., 1::2], x[..., 0::2]), -1).flatten(-2)
        return q * c + rotate(q) * s, k * c + rotate(k) * s


class RotatedTail(InterleavedRope):
    """Layer `layer` of a partial rotary model rotates the last r dims of
    each head, not the first (HF's rotation of the head reversed, reversed
    back: the pass-through dims first)."""

    def apply(self, q, k, cos, sin, *args, **kwargs):
        if not self.on:
            return self.inner(q, k, cos, sin, *args, **kwargs)
        flip = lambda x: torch.flip(x, dims=[-1])  # noqa: E731 (the tail first, in reverse, and back)
        qe, ke = self.inner(flip(q), flip(k), cos, sin, *args, **kwargs)
        return flip(qe), flip(ke)


class DeltaRuleDefect:
    """Layer `layer`'s Gated DeltaNet with one defect, its modeling module's
    functions replaced while the block is in use: "tile" repeats the
    query/key heads as a tile (value head h reads h mod H_k, the GQA-by-modulo
    bug) instead of repeat_interleave; "no_dt_bias" forms the decay without
    dt_bias; in a decode step "no_initial_state" starts the delta rule from
    zeros, not the cached state, and "no_conv_state" convolves the new
    tokens with zeros on their left, not the cached inputs."""

    def __init__(self, model, layer, kind):
        m = cm._base(model)
        self.module = sys.modules[type(m.layers[0]).__module__]
        self.kind, self.on, self.gdn = kind, False, m.layers[layer].linear_attn
        self.handles = [self.gdn.register_forward_pre_hook(lambda *a: self._set(True)),
                        self.gdn.register_forward_hook(lambda *a: self._set(False))]

    def _set(self, on):
        self.on = on

    def __enter__(self):
        self.inner, self.softplus = self.module.torch_chunk_gated_delta_rule, self.module.F.softplus
        self.conv = self.module.causal_conv1d_fn
        self.module.torch_chunk_gated_delta_rule, self.module.causal_conv1d_fn = self.delta, self.conv_fn
        self.module.F = types.SimpleNamespace(**{**vars(torch.nn.functional), "softplus": self.softplus_fn})
        return self

    def __exit__(self, *exc):
        self.module.torch_chunk_gated_delta_rule, self.module.F = self.inner, torch.nn.functional
        self.module.causal_conv1d_fn = self.conv
        for h in self.handles:
            h.remove()

    def conv_fn(self, x, weight, *args, **kwargs):
        K = weight.shape[-1]
        if self.on and self.kind == "no_conv_state" and x.shape[-1] == K + TOKENS - CACHED:  # the decode: K cached, T new
            x = torch.cat([torch.zeros_like(x[..., :K]), x[..., K:]], dim=-1)
        return self.conv(x, weight, *args, **kwargs)

    def softplus_fn(self, x, *args, **kwargs):
        if self.on and self.kind == "no_dt_bias":
            x = x - self.gdn.dt_bias  # softplus(a) in place of softplus(a + dt_bias)
        return self.softplus(x, *args, **kwargs)

    def delta(self, query, key, value, g, beta, **kwargs):
        r = value.shape[2] // query.shape[2]
        if self.on and self.kind == "tile" and r > 1:
            query, key = query.repeat(1, 1, r, 1), key.repeat(1, 1, r, 1)
        if self.on and self.kind == "no_initial_state":
            kwargs["initial_state"] = None
        return self.inner(query, key, value, g, beta, **kwargs)


# --- the checks -----------------------------------------------------------------------


def diverge(conform, dump, out):
    t = time.time()
    r = subprocess.run([conform, "diverge", dump, "--out", out], capture_output=True, text=True)
    if r.returncode not in (0, 1):
        raise AssertionError("conform diverge %s: exit %d\n%s" % (dump, r.returncode, r.stderr))
    with open(os.path.join(out, "diverge.json")) as f:
        report = json.load(f)
    return r.returncode, report, time.time() - t


def check(name, conform, tmp, model, expect=None, conventions=None, wrap=None, logits=True, cached=0):
    """Record `model` (token ids to logits unless logits=False), judge it;
    expect None (a pass) or (layer, point, convention).  cached: the first
    that many of the TOKENS ids go to the KV cache first (a decode step of
    the rest)."""
    t = time.time()
    dump = os.path.join(tmp, name + ".safetensors")
    seq = ids()
    new, prefix = seq[:, cached:], (seq[:, :cached] if cached else None)
    if wrap:
        with wrap:
            cm.record_hf(model, new, dump, conventions=conventions, logits=logits, cache_ids=prefix)
    else:
        cm.record_hf(model, new, dump, conventions=conventions, logits=logits, cache_ids=prefix)
    recorded = time.time() - t
    rc, report, judged = diverge(conform, dump, os.path.join(tmp, name))
    first = report["first_failing"]
    worst = max((float(p["local"]["utilization"]) for p in report["points"] if p["status"] == "pass"), default=0)
    lm = report["points"][-1].get("logit_metrics")
    print("%-22s exit %d, first failing %s, largest passing local utilization %.3g, recorded %.2f s, judged %.2f s%s"
          % (name, rc, first and "%s (%s)" % (first["point"], first["convention_match"]), worst, recorded, judged,
             lm and "; logits: top-1 %.3g, top-%d %.3g, KL %.2g" % (lm["top1_agreement"], lm["k"], lm["topk_overlap"], lm["kl"]) or ""))
    assert (report["points"][-1]["point"] == "logits") == logits, name
    if expect is None:
        assert rc == 0 and first is None, "%s: expected a pass, got %s" % (name, first)
        assert all(p["status"] == "pass" for p in report["points"]), name
        if logits:  # a reading, not a verdict: MoE routing may differ from the FP64 run's at ambiguous tokens
            assert lm["tokens"] == TOKENS - cached and math.isfinite(lm["kl"]), (name, lm)
        return report
    layer, point, convention = expect
    assert rc == 1 and first is not None, "%s: expected a failure at %s" % (name, point)
    assert (first["layer"], first["point"], first["convention_match"]) == (layer, point, convention), (name, first)
    names = [p["point"] for p in report["points"]]
    assert all(p["status"] == "pass" for p in report["points"][:names.index(point)]), "%s: a point before %s fails" % (name, point)
    return report


def refusals():
    """What does not map is refused naming why (docs/diverge.md, "What does not map")."""
    longrope = {"rope_type": "longrope", "rope_theta": 1e4, "short_factor": [1.0] * 16, "long_factor": [2.0] * 16,
                "original_max_position_embeddings": 16}
    cases = [(transformers.LlamaConfig(rope_parameters=longrope, **SHAPE), "rope_type 'longrope'"),
             (transformers.LlamaConfig(hidden_act="gelu", **SHAPE), "hidden_act 'gelu'")]
    if hasattr(transformers, "DeepseekV2Config"):  # a router method of neither V2 nor V3
        cases.append((transformers.DeepseekV2Config(topk_method="noaux_tc", **dict(SHAPE, rms_norm_eps=1e-6)),
                      "topk_method 'noaux_tc'"))
    if hasattr(transformers, "Gemma3TextConfig"):
        cases.append((transformers.Gemma3TextConfig(hidden_activation="silu", **SHAPE), "hidden_activation 'silu'"))
    for config, text in cases:
        try:
            cm.hf_contract(config, TOKENS, "bf16")
        except ValueError as e:
            assert text in str(e), (text, str(e))
            continue
        raise AssertionError("not refused: " + text)
    print("refused: %s" % "; ".join(text for _, text in cases))


def fp16_checks(conform, tmp):
    """Every mapped architecture in FP16 passes (its contract the BF16 one's,
    the format aside)."""
    h = torch.float16
    cases = [("llama", llama), ("qwen2", qwen2), ("qwen3", qwen3), ("mistral", mistral), ("mixtral", mixtral),
             ("qwen3_moe", qwen3_moe), ("phi3", phi3)]
    for name, config in (("qwen3_next", "Qwen3NextConfig"), ("deepseek_v3", "DeepseekV3Config"),
                         ("deepseek_v2", "DeepseekV2Config"), ("gemma3", "Gemma3TextConfig"), ("gemma2", "Gemma2Config")):
        if hasattr(transformers, config):
            cases.append((name, globals()[name]))
    for name, make in cases:
        check(name + "_f16", conform, tmp, make(h))
    if hasattr(transformers, "Gemma3TextConfig"):
        check("gemma3_erf_f16", conform, tmp, gemma3(h, hidden_activation="gelu"))


def phi3_checks(conform, tmp):
    """Phi-3's fused projections split into the points q, k, v (and the
    weights by rows): it passes in BF16 and FP32, with a partial rotation
    (rotary_dim 24 of 32) too; layer 1 rotating the heads' last 24 dims fails
    at its rotation."""
    check("phi3", conform, tmp, phi3())
    check("phi3_f32", conform, tmp, phi3(torch.float32))
    check("phi3_partial", conform, tmp, phi3(partial_rotary_factor=0.75))
    check("phi3_partial_f32", conform, tmp, phi3(torch.float32, partial_rotary_factor=0.75))
    defect = phi3(partial_rotary_factor=0.75)
    check("phi3_partial_tail", conform, tmp, defect, (1, "layers.1.q_rope", None), wrap=RotatedTail(defect, 1))


def qwen3_next_checks(conform, tmp):
    check("qwen3_next", conform, tmp, qwen3_next())
    # Declared as the other norms (cast after the weight), the gated output
    # norm fails at its first step, named; planted defects in layer 1's
    # delta rule fail there.
    check("qwen3_next_o_norm_cast", conform, tmp, qwen3_next(), (0, "layers.0.o_norm", "norm_cast=before_weight"),
          conventions={"o_norm:norm_cast": "after_weight"})
    # PyTorch's FP32 SiLU (the output gate's, kept in FP32) is no 1-ulp one.
    check("qwen3_next_silu_ulp", conform, tmp, qwen3_next(), (0, "layers.0.gate_act", "act_arith=quotient"),
          conventions={"act_arith": "ulp"})
    check("qwen3_next_f32", conform, tmp, qwen3_next(torch.float32))
    check("qwen3_next_dense_layer", conform, tmp, qwen3_next(mlp_only_layers=[0]))
    defect = qwen3_next()
    check("qwen3_next_tiled_heads", conform, tmp, defect, (1, "layers.1.attn", None),
          wrap=DeltaRuleDefect(defect, 1, "tile"))
    defect = qwen3_next()
    check("qwen3_next_no_dt_bias", conform, tmp, defect, (1, "layers.1.g", None),
          wrap=DeltaRuleDefect(defect, 1, "no_dt_bias"))


def deepseek_checks(conform, tmp):
    check("deepseek_v3", conform, tmp, deepseek_v3())
    check("deepseek_v3_f32", conform, tmp, deepseek_v3(torch.float32))
    # The released configs' YaRN (factor 40, mscale = mscale_all_dim = 1):
    # scaled frequencies and mscale^2 in the softmax scale; layer 1's
    # attention planted with the plain 1/sqrt(d) fails there.
    yarn = {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 256, "beta_fast": 32,
            "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0, "rope_theta": 1e4}
    long = dict(rope_parameters=yarn, max_position_embeddings=256 * 40)
    check("deepseek_v3_yarn", conform, tmp, deepseek_v3(**long))
    check("deepseek_v3_yarn_f32", conform, tmp, deepseek_v3(torch.float32, **long))
    defect = deepseek_v3(**long)
    cm._base(defect).layers[1].self_attn.scaling = 24 ** -0.5
    check("deepseek_v3_yarn_no_mscale", conform, tmp, defect, (1, "layers.1.attn", None))
    # Declared with the half-split pairing, the interleaved rope fails at the
    # first rotation, named; layer 1's latent norm planted without its
    # weight fails there.
    check("deepseek_v3_half_rope", conform, tmp, deepseek_v3(), (0, "layers.0.q_rope", "rope_pairing=interleaved"),
          conventions={"rope_pairing": "half"})
    defect = deepseek_v3()
    unweighted(cm._base(defect).layers[1].self_attn.kv_a_layernorm)
    check("deepseek_v3_kv_norm_unweighted", conform, tmp, defect, (1, "layers.1.kv_norm", None))
    defect = deepseek_v3()
    ungrouped(cm._base(defect).layers[2].mlp.gate)
    check("deepseek_v3_ungrouped_router", conform, tmp, defect, (2, "layers.2.router", None))


def gemma3_checks(conform, tmp):
    check("gemma3", conform, tmp, gemma3())
    check("gemma3_no_ends", conform, tmp, gemma3(), logits=False)
    # Layer 1's attention post-norm with its weight applied as w, not 1 + w,
    # fails there; declared with a fused GeGLU (1 ulp), the clean model fails
    # at its first h, named: PyTorch's tanh GELU is no 1-ulp one.
    defect = gemma3()
    unit_offset_dropped(cm._base(defect).layers[1].post_attention_layernorm)
    check("gemma3_post_norm_weight", conform, tmp, defect, (1, "layers.1.attn_post_norm", None))
    check("gemma3_fused_geglu", conform, tmp, gemma3(), (0, "layers.0.h", "glu_arith=separate"),
          conventions={"glu_arith": "fused"})
    check("gemma3_f32", conform, tmp, gemma3(torch.float32))
    # hidden_activation "gelu": PyTorch's erf GELU, whose 1 + erf cancels for
    # x << 0 (an erf within 2^-20, no relative accuracy there): it passes
    # under glu_arith separate and, declared fused, fails at its first h, named.
    for dtype in (torch.bfloat16, torch.float32):
        tag = "gemma3_erf" + ("_f32" if dtype == torch.float32 else "")
        check(tag, conform, tmp, gemma3(dtype, hidden_activation="gelu"))
        check(tag + "_fused", conform, tmp, gemma3(dtype, hidden_activation="gelu"),
              (0, "layers.0.h", "glu_arith=separate"), conventions={"glu_arith": "fused"})


def gemma2_checks(conform, tmp):
    # Eager attention in BF16: the logits rounded at every stage
    # (attention_logits: dtype), capped; declared in FP32 they fail at the
    # first attention, named.  Layer 1's attention without its softcap fails there.
    check("gemma2", conform, tmp, gemma2())
    check("gemma2_f32", conform, tmp, gemma2(torch.float32))
    check("gemma2_fp32_logits", conform, tmp, gemma2(), (0, "layers.0.attn", "attention_logits=dtype"),
          conventions={"attention_logits": "fp32"})
    # Its final softcap, three roundings in BF16, is no 1-ulp one.
    check("gemma2_ulp_softcap", conform, tmp, gemma2(), (4, "logits", "softcap_arith=dtype"),
          conventions={"softcap_arith": "ulp"})
    defect = gemma2()
    cm._base(defect).layers[1].self_attn.attn_logit_softcapping = None
    check("gemma2_uncapped_attention", conform, tmp, defect, (1, "layers.1.attn", None))
    check("llama_eager", conform, tmp, randomized(transformers.LlamaConfig(intermediate_size=256, **SHAPE), attn="eager"))


def window_checks(conform, tmp):
    """Sliding windows of WINDOW keys below TOKENS (transformers keeps the
    keys j > i - W: window_keys w).  Declared with W + 1 keys a clean model
    fails at its first local attention, named; layer 1 planted with a
    window of W + 1 keys fails there, named."""
    check("mistral_window", conform, tmp, mistral())
    check("mistral_window_f32", conform, tmp, mistral(torch.float32))
    check("mistral_window_eager", conform, tmp, mistral(attn="eager"))
    check("qwen2_window", conform, tmp, qwen2_window())
    check("mistral_window_w_plus_one", conform, tmp, mistral(), (0, "layers.0.attn", "window_keys=w"),
          conventions={"window_keys": "w_plus_one"})
    defect = mistral()
    check("mistral_wider_window", conform, tmp, defect, (1, "layers.1.attn", "window_keys=w_plus_one"),
          wrap=WiderWindow(defect, 1, WINDOW))
    if hasattr(transformers, "Gemma3TextConfig"):
        check("gemma3_window", conform, tmp, gemma3(window=WINDOW))
    if hasattr(transformers, "Gemma2Config"):
        check("gemma2_window", conform, tmp, gemma2(window=WINDOW))


CACHED = 24  # a decode step: 24 tokens to the KV cache, then the 8 recorded


def cache_checks(conform, tmp):
    """A decode step after CACHED tokens: the K/V caches (DeepSeek's: the
    latents; Qwen3-Next's linear layers: the recurrent and conv states)
    recorded as the contract's weights, RoPE from position P, the causal mask
    bottom-right.  Layer 1's mask aligned top-left fails there, named
    causal=top_left; positions not shifted by the cache fail at the first
    rotation; a delta rule or a convolution that ignores its cached state
    fails at that step."""
    check("llama_cached", conform, tmp, llama(), cached=CACHED)
    check("llama_cached_f32", conform, tmp, llama(torch.float32), cached=CACHED)
    check("llama_cached_eager", conform, tmp, randomized(transformers.LlamaConfig(intermediate_size=256, **SHAPE),
                                                         attn="eager"), cached=CACHED)
    check("qwen3_cached", conform, tmp, qwen3(), cached=CACHED)
    check("mixtral_cached", conform, tmp, mixtral(), cached=CACHED)
    if hasattr(transformers, "Gemma3TextConfig"):
        check("gemma3_cached", conform, tmp, gemma3(), cached=CACHED)
    if hasattr(transformers, "DeepseekV3Config"):  # the latent caches: c_kv, k_r, and kv_b of the cached tokens
        check("deepseek_v3_cached", conform, tmp, deepseek_v3(), cached=CACHED)
        check("deepseek_v3_cached_f32", conform, tmp, deepseek_v3(torch.float32), cached=CACHED)
        defect = deepseek_v3()
        check("deepseek_v3_cached_top_left", conform, tmp, defect, (1, "layers.1.attn", "causal=top_left"),
              wrap=TopLeftCausal(defect, 1), cached=CACHED)
    if hasattr(transformers, "DeepseekV2Config"):
        check("deepseek_v2_cached", conform, tmp, deepseek_v2(), cached=CACHED)
    if hasattr(transformers, "Qwen3NextConfig"):  # the linear layers' recurrent and conv states
        check("qwen3_next_cached", conform, tmp, qwen3_next(), cached=CACHED)
        check("qwen3_next_cached_f32", conform, tmp, qwen3_next(torch.float32), cached=CACHED)
        defect = qwen3_next()
        check("qwen3_next_cached_no_state", conform, tmp, defect, (1, "layers.1.attn", None),
              wrap=DeltaRuleDefect(defect, 1, "no_initial_state"), cached=CACHED)
        defect = qwen3_next()
        check("qwen3_next_cached_no_conv_state", conform, tmp, defect, (1, "layers.1.q_conv", None),
              wrap=DeltaRuleDefect(defect, 1, "no_conv_state"), cached=CACHED)
    # Dynamic NTK past the trained length (16): the prefill rotates at its
    # 24 tokens' base, the step at 32's; kept at the prefill's it fails at
    # the first rotation.
    check("llama_dynamic_cached", conform, tmp, llama_dynamic(), cached=CACHED)
    check("llama_dynamic_cached_f32", conform, tmp, llama_dynamic(torch.float32), cached=CACHED)
    defect = llama_dynamic()
    check("llama_dynamic_cached_prefill_base", conform, tmp, defect, (0, "layers.0.q_rope", None),
          wrap=PrefillFrequencies(defect, CACHED), cached=CACHED)
    defect = llama()
    check("llama_cached_top_left", conform, tmp, defect, (1, "layers.1.attn", "causal=top_left"),
          wrap=TopLeftCausal(defect, 1), cached=CACHED)
    defect = llama()
    check("llama_cached_unshifted", conform, tmp, defect, (0, "layers.0.q_rope", None),
          wrap=UnshiftedPositions(defect, CACHED), cached=CACHED)
    # A sliding window below the cached tokens: a local layer keeps its last
    # W - 1 keys, conform's rolling cache (kv_cache: rolling).  Layer 1's
    # window widened to W + 1 keys fails there, with no convention named:
    # its first new query cannot reach the key W before it (transformers
    # dropped it), so it is no window_keys=w_plus_one either.
    check("mistral_cached", conform, tmp, mistral(), cached=CACHED)
    check("mistral_cached_f32", conform, tmp, mistral(torch.float32), cached=CACHED)
    check("qwen2_window_cached", conform, tmp, qwen2_window(), cached=CACHED)
    if hasattr(transformers, "Gemma3TextConfig"):
        check("gemma3_window_cached", conform, tmp, gemma3(window=WINDOW), cached=CACHED)
    if hasattr(transformers, "Gemma2Config"):
        check("gemma2_window_cached", conform, tmp, gemma2(window=WINDOW), cached=CACHED)
    defect = mistral()
    check("mistral_cached_wider", conform, tmp, defect, (1, "layers.1.attn", None),
          wrap=WiderWindow(defect, 1, WINDOW), cached=CACHED)


def deepseek_v2_checks(conform, tmp):
    check("deepseek_v2", conform, tmp, deepseek_v2())
    check("deepseek_v2_f32", conform, tmp, deepseek_v2(torch.float32))
    # Its FP32 complex rotation rounds once: a BF16 rotation (Llama's, each
    # product rounded) declared as that fails at the first rotation, named;
    # layer 2's router ranking its groups by their top-2 sum fails there.
    check("llama_rope_fp32_angles", conform, tmp, llama(), (0, "layers.0.q_rope", "rope_arith=dtype"),
          conventions={"rope_arith": "fp32_angles"})
    defect = deepseek_v2()
    top2_groups(cm._base(defect).layers[2].mlp.gate)
    check("deepseek_v2_top2_groups", conform, tmp, defect, (2, "layers.2.router", None))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--conform", required=True)
    ap.add_argument("--keep", help="write the dumps and reports here (kept)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    print("transformers %s, torch %s, Python %s" % (transformers.__version__, torch.__version__, sys.version.split()[0]))
    start = time.time()
    refusals()
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.keep or scratch
        os.makedirs(tmp, exist_ok=True)
        check("llama", args.conform, tmp, llama())
        defect = llama()
        eps_outside(cm._base(defect).layers[1].input_layernorm)
        check("llama_eps_outside", args.conform, tmp, defect, (1, "layers.1.attn_norm", "eps_placement=outside"))
        defect = llama()
        eps_outside(cm._base(defect).norm)
        check("llama_final_eps_outside", args.conform, tmp, defect, (SHAPE["num_hidden_layers"], "final_norm",
                                                                     "eps_placement=outside"))
        defect = llama()
        check("llama_rope_interleaved", args.conform, tmp, defect, (1, "layers.1.q_rope", "rope_pairing=interleaved"),
              wrap=InterleavedRope(defect, 1))
        # Without a convention of BF16 arithmetic the clean model fails at its
        # first step that needs it, and the analysis names it there.
        check("llama_fp32_rope", args.conform, tmp, llama(), (0, "layers.0.q_rope", "rope_arith=dtype"),
              conventions={"rope_arith": "fp32"})
        check("llama_fp32_probs", args.conform, tmp, llama(), (0, "layers.0.attn", "attention_probs=dtype"),
              conventions={"attention_probs": "fp32"})
        check("llama_fp32_logits", args.conform, tmp, llama(), (SHAPE["num_hidden_layers"], "logits", "logits_format=dtype"),
              conventions={"logits_format": "fp32"})
        rope_scaling_checks(args.conform, tmp)
        check("qwen3", args.conform, tmp, qwen3())
        check("qwen2", args.conform, tmp, qwen2())
        check("qwen2_no_ends", args.conform, tmp, qwen2(), logits=False)
        tied = check("qwen2_tied", args.conform, tmp, qwen2(tied=True))  # lm_head is the embedding
        assert tied["contract"]["tied_embeddings"], "qwen2_tied: the contract unties the head"
        check("mixtral", args.conform, tmp, mixtral())
        check("qwen3_moe", args.conform, tmp, qwen3_moe())
        # Dense MLP layers between the MoE ones (decoder_sparse_step 2: layer 1 MoE; mlp_only_layers)
        check("qwen3_moe_sparse_step", args.conform, tmp, qwen3_moe(decoder_sparse_step=2))
        check("mixtral_fp32_router", args.conform, tmp, mixtral(), (0, "layers.0.router", "router_arith=dtype"),
              conventions={"router_arith": "fp32"})
        # FP32 models: PyTorch's SiLU and the separate product need glu_arith=separate.
        for name, make in (("llama", llama), ("qwen2", qwen2), ("qwen3", qwen3), ("mixtral", mixtral),
                           ("qwen3_moe", qwen3_moe)):
            check(name + "_f32", args.conform, tmp, make(torch.float32))
        check("llama_f32_fused_glu", args.conform, tmp, llama(torch.float32), (0, "layers.0.h", "glu_arith=separate"),
              conventions={"glu_arith": "fused"})
        if hasattr(transformers, "Phi3Config"):
            phi3_checks(args.conform, tmp)
        if hasattr(transformers, "Qwen3NextConfig"):  # the hybrid, where this transformers has it
            qwen3_next_checks(args.conform, tmp)
        if hasattr(transformers, "DeepseekV3Config"):
            deepseek_checks(args.conform, tmp)
        if hasattr(transformers, "DeepseekV2Config"):
            deepseek_v2_checks(args.conform, tmp)
        if hasattr(transformers, "Gemma3TextConfig"):
            gemma3_checks(args.conform, tmp)
        if hasattr(transformers, "Gemma2Config"):
            gemma2_checks(args.conform, tmp)
        window_checks(args.conform, tmp)
        cache_checks(args.conform, tmp)
        fp16_checks(args.conform, tmp)
    print("hf_model_test: ok (%.1f s)" % (time.time() - start))


if __name__ == "__main__":
    main()
