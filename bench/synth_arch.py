#!/usr/bin/python3
"""Write a GGUF of an architecture shared/tools/synth-gguf does not make (mixtures of experts,
Gemma 3, the 2026 families: Qwen3.5 gated DeltaNet, Granite 4.0-H Mamba2 + MoE, LFM2 short
convolutions, DeepSeek-V2 latent attention) with the shapes of a real model and seeded random
weights, for benchmarks (synth-gguf's writer and weight generator are reused here).

  bench/synth_arch.py --shape qwen3-30b-a3b --layers 4 --type q8_0 -o moe.gguf
  bench/synth_arch.py --shape qwen3.5-4b --type q4_0 -o qwen35.gguf

The 2026 families are written with the tensor names, shapes and metadata keys llama.cpp's loader
asks for (those of shared/archs/<family>/<family>-f32.gguf), and the tensor types llama-quantize
would give: the 2-D weights of --type, and F32 for norms, routers (ffn_gate_inp), convolution
taps, the 1-D SSM parameters, and any row whose length is not a multiple of the block size. Their
vocabularies are the shared/archs tokenizer (1024 tokens) padded with [PADn] tokens to the real
model's size, so the output projection has its real cost. --layers N keeps the first N layers,
with the real model's pattern of layer kinds.

Output is deterministic for a given --seed. Never commit the files.
"""
import argparse, importlib.machinery, importlib.util, os, random, struct, sys

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.environ.get("SHARED") or os.path.join(HERE, "..", "..", "shared")
_spec = importlib.util.spec_from_loader("synth", importlib.machinery.SourceFileLoader(
    "synth", os.path.join(SHARED, "tools", "synth-gguf")))
synth = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(synth)

# From the models' config.json files.
SHAPES = {
    # Qwen3-30B-A3B: 128 experts, 8 used, q/k norms, head_dim 128
    "qwen3-30b-a3b": dict(arch="qwen3moe", n_embd=2048, n_layer=48, n_head=32, n_head_kv=4, head_dim=128,
                          n_expert=128, n_used=8, n_ff_exp=768, ctx=40960, rope_theta=1000000.0, eps=1e-6,
                          vocab="vocab/qwen2/ggml-vocab-qwen2.gguf"),
    # gpt-oss-20b: 32 experts, 4 used, MXFP4 experts (--type mxfp4), biases, sinks, sliding window
    # 128 on alternate layers, YaRN (its o200k vocabulary is not in shared/: Qwen2's stands in)
    "gpt-oss-20b": dict(arch="gpt-oss", n_embd=2880, n_layer=24, n_head=64, n_head_kv=8, head_dim=64,
                        n_expert=32, n_used=4, n_ff_exp=2880, ctx=131072, rope_theta=150000.0, eps=1e-5,
                        swa=128, yarn=(32.0, 4096, 32.0, 1.0), vocab="vocab/qwen2/ggml-vocab-qwen2.gguf"),
    # Gemma 3 1B: q/k norms, norms around both blocks, GeGLU, 5 sliding layers (window 512, their
    # own rope base) per global one (its 262k vocabulary is not in shared/: Llama 2's stands in)
    "gemma3-1b": dict(arch="gemma3", n_embd=1152, n_layer=26, n_head=4, n_head_kv=1, head_dim=256, n_ff=6912,
                      ctx=32768, rope_theta=1000000.0, rope_swa=10000.0, eps=1e-6, swa=512,
                      vocab="vocab/llama-spm/ggml-vocab-llama-spm.gguf"),
    # Mixtral-8x7B: 8 experts, 2 used
    "mixtral-8x7b": dict(arch="llama", n_embd=4096, n_layer=32, n_head=32, n_head_kv=8, head_dim=128,
                         n_expert=8, n_used=2, n_ff_exp=14336, ctx=32768, rope_theta=1000000.0, eps=1e-5,
                         vocab="vocab/llama-spm/ggml-vocab-llama-spm.gguf"),
}


# The 2026 families (from the models' config.json files, or their llama.cpp GGUF metadata).
FAMILY_SHAPES = {
    # Qwen3.5-4B: 32 layers, 3 gated DeltaNet per full-attention layer (interval 4); DeltaNet 16 key
    # heads and 32 value heads of 128, conv 4; attention 16 heads (q with its output gate), 4 KV heads
    # of 256, q/k norms, IMRoPE on 64 of 256 dims (sections 11/11/10), base 1e7; SwiGLU 9216; tied
    "qwen3.5-4b": dict(arch="qwen35", n_embd=2560, n_layer=32, n_head=16, n_head_kv=4, head_dim=256, n_ff=9216,
                       lin_k_heads=16, lin_v_heads=32, lin_dim=128, conv=4, interval=4, rope_dim=64,
                       sections=[11, 11, 10, 0], rope_theta=1e7, eps=1e-6, ctx=262144, n_vocab=248320, tied=True),
    # Qwen3.5-35B-A3B: as above with hidden 2048, 40 layers, 2 KV heads, and on every layer 256 experts
    # of 512 (8 used, softmax, merged gate/up) plus a sigmoid-gated shared expert of 512; untied
    "qwen3.5-35b-a3b": dict(arch="qwen35moe", n_embd=2048, n_layer=40, n_head=16, n_head_kv=2, head_dim=256,
                            n_ff=512, n_expert=256, n_used=8, n_ff_exp=512, n_ff_shexp=512,
                            lin_k_heads=16, lin_v_heads=32, lin_dim=128, conv=4, interval=4, rope_dim=64,
                            sections=[11, 11, 10, 0], rope_theta=1e7, eps=1e-6, ctx=262144, n_vocab=248320,
                            tied=False),
    # Granite-4.0-H-Tiny: 40 layers, attention (12 heads, 4 KV heads of 128, no RoPE) on layers 5, 15,
    # 25, 35, Mamba2 elsewhere (d_inner 3072 = 48 heads of 64, state 128, 1 group, conv 4 + bias);
    # every layer 64 experts of 512 (6 used) + a shared expert of 1024; muP multipliers; tied
    "granite-4.0-h-tiny": dict(arch="granitehybrid", n_embd=1536, n_layer=40, n_head=12, n_head_kv=4, head_dim=128,
                               attn_every=10, attn_at=5, d_inner=3072, ssm_heads=48, d_state=128, groups=1, conv=4,
                               n_expert=64, n_used=6, n_ff_exp=512, n_ff_shexp=1024, attn_scale=0.0078125,
                               emb_scale=12.0, res_scale=0.22, logit_scale=6.0, rope_theta=10000.0, eps=1e-5,
                               ctx=1048576, n_vocab=100352, tied=True),
    # LFM2-1.2B: 16 layers, attention (32 heads, 8 KV heads of 64, q/k norms, RoPE 1e6) on layers
    # 2, 5, 8, 10, 12, 14, gated short convolutions of 3 taps elsewhere; SwiGLU 8192; tied
    "lfm2-1.2b": dict(arch="lfm2", n_embd=2048, n_layer=16, n_head=32, n_head_kv=8, head_dim=64, n_ff=8192,
                      attn_layers=[2, 5, 8, 10, 12, 14], l_cache=3, rope_theta=1e6, eps=1e-5, ctx=128000,
                      n_vocab=65536, tied=True),
    # DeepSeek-V2-Lite: 27 layers, MLA without a q low-rank (wq directly), kv_lora 512, 16 heads of
    # 128 nope + 64 rope, v 128 (split k_b/v_b: the absorbed form); YaRN factor 40 over 4096, mscale
    # 0.707; layer 0 dense (10944), then 64 experts of 1408 (6 used, softmax, not renormalised) + 2
    # shared; untied
    "deepseek-v2-lite": dict(arch="deepseek2", n_embd=2048, n_layer=27, n_head=16, kv_lora=512, nope=128, rope=64,
                             v_dim=128, n_ff=10944, n_dense=1, n_expert=64, n_used=6, n_ff_exp=1408, n_shared=2,
                             rope_theta=10000.0, yarn=(40.0, 4096, 32.0, 1.0, 0.707), eps=1e-6, ctx=163840,
                             n_vocab=102400, tied=False),
}


def mxfp4_bytes(rng, n):
    """Random MXFP4 blocks: an E8M0 scale of 2^-8 (values within +-0.024), then 16 random bytes of
    E2M1 nibbles."""
    nb = n // 32
    buf = bytearray(rng.randbytes(nb * 17))
    buf[0::17] = bytes([119]) * nb
    return bytes(buf)


def family_vocab(arch, n_vocab):
    """The tokenizer keys of shared/archs/<arch>/<arch>-f32.gguf (a 1024-token BPE), its token list
    padded with [PADn] tokens to n_vocab: the embedding and output matrices get the real size."""
    kv = synth.read_gguf_tokenizer(os.path.join(SHARED, "archs", arch, arch + "-f32.gguf"))
    out = []
    for k, t, v, e in kv:
        if k == "tokenizer.ggml.tokens":
            v = list(v) + ["[PAD%d]" % i for i in range(len(v), n_vocab)]
        elif k == "tokenizer.ggml.token_type":
            v = list(v) + [1] * (n_vocab - len(v))
        out.append((k, t, v, e))
    return out


def quantised_type(name, dims, qt):
    """The type llama-quantize gives a tensor of a --type qt file: norms, routers, convolution taps
    and parameters that are not `*.weight` (ssm_a, ssm_d, biases) stay F32, as do 1-D tensors and
    rows that do not hold whole blocks."""
    if len(dims) < 2 or not name.endswith("weight") or "_norm.weight" in name or "ffn_gate_inp" in name \
            or "ssm_conv1d" in name or "shortconv.conv" in name or dims[0] % synth.GGML[qt][1]:
        return "f32"
    return qt


def ramp(n, lo, hi):
    """n values from lo to hi (SSM decay rates and time-step biases: deterministic, in a trained
    model's range)."""
    return tuple(lo + (hi - lo) * i / max(n - 1, 1) for i in range(n))


def family_model(name, sh, qt):
    """(metadata, tensors) of a 2026-family shape; tensors as (name, dims in ggml order, kind)."""
    U32, I32, F32, STR, BOOL, ARR = synth.T_U32, synth.T_I32, synth.T_F32, synth.T_STR, synth.T_BOOL, synth.T_ARR
    arch, E, L = sh["arch"], sh["n_embd"], sh["n_layer"]
    p = arch + "."
    kv = [("general.architecture", STR, arch, None),
          ("general.name", STR, "synthetic %s (random weights)" % name, None),
          ("general.file_type", U32, synth.FILE_TYPE[qt], None),
          ("general.alignment", U32, 32, None),
          (p + "context_length", U32, sh["ctx"], None),
          (p + "embedding_length", U32, E, None),
          (p + "block_count", U32, L, None),
          (p + "attention.layer_norm_rms_epsilon", F32, sh["eps"], None),
          (p + "rope.freq_base", F32, sh["rope_theta"], None),
          (p + "vocab_size", U32, sh["n_vocab"], None)]
    t = [("token_embd.weight", (E, sh["n_vocab"]), "emb")]
    t.append(("token_embd_norm.weight" if arch == "lfm2" else "output_norm.weight", (E,), "norm"))
    if not sh["tied"]:
        t.append(("output.weight", (E, sh["n_vocab"]), "emb"))

    def attention(b, H, HKV, hd, q_gate=False, qk_norm=False):
        out = [(b + "attn_q.weight", (E, H * hd * (2 if q_gate else 1)), "w"),
               (b + "attn_k.weight", (E, HKV * hd), "w"), (b + "attn_v.weight", (E, HKV * hd), "w"),
               (b + "attn_output.weight", (H * hd, E), "w")]
        if qk_norm:
            out += [(b + "attn_q_norm.weight", (hd,), "norm"), (b + "attn_k_norm.weight", (hd,), "norm")]
        return out

    def dense_ffn(b, F):
        return [(b + "ffn_gate.weight", (E, F), "w"), (b + "ffn_up.weight", (E, F), "w"),
                (b + "ffn_down.weight", (F, E), "w")]

    def shared_expert(b, F):
        return [(b + "ffn_gate_shexp.weight", (E, F), "w"), (b + "ffn_up_shexp.weight", (E, F), "w"),
                (b + "ffn_down_shexp.weight", (F, E), "w")]

    if arch in ("qwen35", "qwen35moe"):
        H, HKV, hd = sh["n_head"], sh["n_head_kv"], sh["head_dim"]
        KH, VH, D = sh["lin_k_heads"], sh["lin_v_heads"], sh["lin_dim"]
        kv += [(p + "feed_forward_length", U32, sh["n_ff"], None),
               (p + "attention.head_count", U32, H, None), (p + "attention.head_count_kv", U32, HKV, None),
               (p + "attention.key_length", U32, hd, None), (p + "attention.value_length", U32, hd, None),
               (p + "rope.dimension_count", U32, sh["rope_dim"], None),
               (p + "rope.dimension_sections", ARR, sh["sections"], I32),
               # DeltaNet: key heads of state_size (llama.cpp takes the value heads to be as wide)
               (p + "ssm.conv_kernel", U32, sh["conv"], None), (p + "ssm.state_size", U32, D, None),
               (p + "ssm.group_count", U32, KH, None), (p + "ssm.time_step_rank", U32, VH, None),
               (p + "ssm.inner_size", U32, VH * D, None),
               (p + "full_attention_interval", U32, sh["interval"], None)]
        if arch == "qwen35moe":
            kv += [(p + "expert_count", U32, sh["n_expert"], None), (p + "expert_used_count", U32, sh["n_used"], None),
                   (p + "expert_feed_forward_length", U32, sh["n_ff_exp"], None),
                   (p + "expert_shared_feed_forward_length", U32, sh["n_ff_shexp"], None)]
        conv_dim = 2 * KH * D + VH * D
        for i in range(L):
            b = "blk.%d." % i
            t += [(b + "attn_norm.weight", (E,), "norm"), (b + "post_attention_norm.weight", (E,), "norm")]
            if (i + 1) % sh["interval"]:
                t += [(b + "attn_qkv.weight", (E, conv_dim), "w"), (b + "attn_gate.weight", (E, VH * D), "w"),
                      (b + "ssm_conv1d.weight", (sh["conv"], conv_dim), "w"),
                      (b + "ssm_dt.bias", (VH,), ramp(VH, -1.0, 1.0)),
                      (b + "ssm_a", (VH,), ramp(VH, -16.0, -1.0)),  # -exp(A_log): decays
                      (b + "ssm_beta.weight", (E, VH), "w"), (b + "ssm_alpha.weight", (E, VH), "w"),
                      (b + "ssm_norm.weight", (D,), "norm"), (b + "ssm_out.weight", (VH * D, E), "w")]
            else:
                t += attention(b, H, HKV, hd, q_gate=True, qk_norm=True)
            if arch == "qwen35":
                t += dense_ffn(b, sh["n_ff"])
            else:
                N, F = sh["n_expert"], sh["n_ff_exp"]
                t += [(b + "ffn_gate_inp.weight", (E, N), "w"),
                      (b + "ffn_gate_up_exps.weight", (E, 2 * F, N), "w"),
                      (b + "ffn_down_exps.weight", (F, E, N), "w"),
                      (b + "ffn_gate_inp_shexp.weight", (E,), "w")] + shared_expert(b, sh["n_ff_shexp"])

    elif arch == "granitehybrid":
        H, HKV, hd = sh["n_head"], sh["n_head_kv"], sh["head_dim"]
        DI, NH, DS, G = sh["d_inner"], sh["ssm_heads"], sh["d_state"], sh["groups"]
        is_attn = [i % sh["attn_every"] == sh["attn_at"] for i in range(L)]
        kv += [(p + "feed_forward_length", U32, sh["n_ff_exp"], None),
               (p + "attention.head_count", U32, H, None),
               (p + "attention.head_count_kv", ARR, [HKV if a else 0 for a in is_attn], I32),  # 0: Mamba2 layer
               (p + "rope.dimension_count", U32, hd, None),
               (p + "rope.scaling.finetuned", BOOL, False, None),  # Granite 4.0-H: no RoPE
               (p + "expert_count", U32, sh["n_expert"], None), (p + "expert_used_count", U32, sh["n_used"], None),
               (p + "expert_shared_feed_forward_length", U32, sh["n_ff_shexp"], None),
               (p + "attention.scale", F32, sh["attn_scale"], None), (p + "embedding_scale", F32, sh["emb_scale"], None),
               (p + "residual_scale", F32, sh["res_scale"], None), (p + "logit_scale", F32, sh["logit_scale"], None),
               (p + "ssm.conv_kernel", U32, sh["conv"], None), (p + "ssm.state_size", U32, DS, None),
               (p + "ssm.group_count", U32, G, None), (p + "ssm.inner_size", U32, DI, None),
               (p + "ssm.time_step_rank", U32, NH, None)]
        conv_dim = DI + 2 * G * DS
        N, F = sh["n_expert"], sh["n_ff_exp"]
        for i in range(L):
            b = "blk.%d." % i
            t.append((b + "attn_norm.weight", (E,), "norm"))
            if is_attn[i]:
                t += attention(b, H, HKV, hd)
            else:
                t += [(b + "ssm_in.weight", (E, 2 * DI + 2 * G * DS + NH), "w"),
                      (b + "ssm_conv1d.weight", (sh["conv"], conv_dim), "w"),
                      (b + "ssm_conv1d.bias", (conv_dim,), "w"),
                      (b + "ssm_dt.bias", (NH,), ramp(NH, -4.0, -2.0)),
                      (b + "ssm_a", (1, NH), ramp(NH, -16.0, -1.0)), (b + "ssm_d", (1, NH), "norm"),
                      (b + "ssm_norm.weight", (DI // G, G), "norm"), (b + "ssm_out.weight", (DI, E), "w")]
            t += [(b + "ffn_norm.weight", (E,), "norm"), (b + "ffn_gate_inp.weight", (E, N), "w"),
                  (b + "ffn_gate_exps.weight", (E, F, N), "w"), (b + "ffn_up_exps.weight", (E, F, N), "w"),
                  (b + "ffn_down_exps.weight", (F, E, N), "w")] + shared_expert(b, sh["n_ff_shexp"])

    elif arch == "lfm2":
        H, HKV, hd = sh["n_head"], sh["n_head_kv"], sh["head_dim"]
        kv += [(p + "feed_forward_length", U32, sh["n_ff"], None),
               (p + "attention.head_count", U32, H, None),
               (p + "attention.head_count_kv", ARR, [HKV if i in sh["attn_layers"] else 0 for i in range(L)], I32),
               (p + "shortconv.l_cache", U32, sh["l_cache"], None)]
        for i in range(L):
            b = "blk.%d." % i
            t += [(b + "attn_norm.weight", (E,), "norm"), (b + "ffn_norm.weight", (E,), "norm")]
            t += dense_ffn(b, sh["n_ff"])
            if i in sh["attn_layers"]:
                t += attention(b, H, HKV, hd, qk_norm=True)
            else:
                t += [(b + "shortconv.conv.weight", (sh["l_cache"], E), "w"),
                      (b + "shortconv.in_proj.weight", (E, 3 * E), "w"),
                      (b + "shortconv.out_proj.weight", (E, E), "w")]

    elif arch == "deepseek2":
        H, R, NOPE, RD, VD = sh["n_head"], sh["kv_lora"], sh["nope"], sh["rope"], sh["v_dim"]
        N, F, S = sh["n_expert"], sh["n_ff_exp"], sh["n_shared"]
        factor, orig, fast, slow, mscale_all = sh["yarn"]
        kv += [(p + "feed_forward_length", U32, sh["n_ff"], None),
               (p + "attention.head_count", U32, H, None), (p + "attention.head_count_kv", U32, 1, None),
               (p + "rope.dimension_count", U32, RD, None),
               (p + "rope.scaling.type", STR, "yarn", None), (p + "rope.scaling.factor", F32, factor, None),
               (p + "rope.scaling.original_context_length", U32, orig, None),
               (p + "rope.scaling.yarn_beta_fast", F32, fast, None), (p + "rope.scaling.yarn_beta_slow", F32, slow, None),
               # llama.cpp's converter writes 0.1 * mscale_all_dim here (and its loader divides by 0.1)
               (p + "rope.scaling.yarn_log_multiplier", F32, 0.1 * mscale_all, None),
               (p + "expert_count", U32, N, None), (p + "expert_used_count", U32, sh["n_used"], None),
               (p + "expert_gating_func", U32, 1, None),  # softmax
               (p + "expert_weights_scale", F32, 1.0, None), (p + "expert_weights_norm", BOOL, False, None),
               (p + "leading_dense_block_count", U32, sh["n_dense"], None),
               (p + "expert_feed_forward_length", U32, F, None), (p + "expert_shared_count", U32, S, None),
               # no q low-rank: q_lora_rank 0 (llama.cpp reads the key unless the layer count is Lite's 27)
               (p + "attention.q_lora_rank", U32, 0, None), (p + "attention.kv_lora_rank", U32, R, None),
               (p + "attention.key_length", U32, R + RD, None), (p + "attention.value_length", U32, R, None),
               (p + "attention.key_length_mla", U32, NOPE + RD, None),
               (p + "attention.value_length_mla", U32, VD, None)]
        for i in range(L):
            b = "blk.%d." % i
            t += [(b + "attn_norm.weight", (E,), "norm"), (b + "attn_kv_a_norm.weight", (R,), "norm"),
                  (b + "attn_q.weight", (E, H * (NOPE + RD)), "w"),
                  (b + "attn_kv_a_mqa.weight", (E, R + RD), "w"),
                  (b + "attn_k_b.weight", (NOPE, R, H), "w"), (b + "attn_v_b.weight", (R, VD, H), "w"),
                  (b + "attn_output.weight", (H * VD, E), "w"), (b + "ffn_norm.weight", (E,), "norm")]
            if i < sh["n_dense"]:
                t += dense_ffn(b, sh["n_ff"])
            else:
                t += [(b + "ffn_gate_inp.weight", (E, N), "w"), (b + "ffn_gate_exps.weight", (E, F, N), "w"),
                      (b + "ffn_up_exps.weight", (E, F, N), "w"), (b + "ffn_down_exps.weight", (F, E, N), "w")]
                t += shared_expert(b, F * S)
    else:
        raise ValueError(arch)
    kv += family_vocab(arch, sh["n_vocab"])
    return kv, [(n, d, quantised_type(n, d, qt), k) for n, d, k in t]


def write_gguf(path, kv, tensors, seed, ggml=None):
    """Write kv and tensors (name, dims, type, kind) with seeded random data, through a .part file."""
    GGML = ggml or synth.GGML
    align = 32
    header = [b"GGUF", struct.pack("<IQQ", 3, len(tensors), len(kv))]
    for k, t, v, e in kv:
        header += [synth.s(k), struct.pack("<I", t), synth.enc_val(t, v, e)]
    offset, infos = 0, []
    for name, dims, typ, kind in tensors:
        n = 1
        for d in dims: n *= d
        _, blk, bsz = GGML[typ]
        size = n // blk * bsz
        infos.append((name, typ, kind, n, size))
        header += [synth.s(name), struct.pack("<I", len(dims)), struct.pack("<%dQ" % len(dims), *dims),
                   struct.pack("<IQ", GGML[typ][0], offset)]
        offset += (size + align - 1) // align * align
    head = b"".join(header)
    rng = random.Random(seed)
    tmp = path + ".part"
    with open(tmp, "wb") as f:
        f.write(head)
        f.write(b"\0" * ((-len(head)) % align))
        for name, typ, kind, n, size in infos:
            if isinstance(kind, tuple):  # explicit values
                f.write(struct.pack("<%df" % n, *kind))
            else:
                done = 0
                while done < n:  # in pieces: one call must stay below 2^31 random bits
                    part = min(n - done, 1 << 26)
                    f.write(mxfp4_bytes(rng, part) if typ == "mxfp4" else synth.tensor_bytes(rng, typ, part, kind))
                    done += part
            f.write(b"\0" * ((-size) % align))
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES) + sorted(FAMILY_SHAPES), required=True)
    ap.add_argument("--type", default="q8_0", choices=["f16", "q8_0", "q4_0", "q4_k", "mxfp4"],
                    help="type of the 2-D weights; mxfp4: MXFP4 experts, Q8_0 elsewhere (as gpt-oss's release)")
    ap.add_argument("--layers", type=int)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args()
    if a.shape in FAMILY_SHAPES:
        if a.type not in ("f16", "q8_0", "q4_0"):
            ap.error("the 2026 families are written with --type f16, q8_0 or q4_0")
        sh = dict(FAMILY_SHAPES[a.shape])
        if a.layers: sh["n_layer"] = a.layers
        kv, tensors = family_model(a.shape, sh, a.type)
        write_gguf(a.output, kv, tensors, a.seed)
        print("%s: %s %s, %d layers, vocab %d, %.1f MB" % (a.output, a.shape, a.type, sh["n_layer"], sh["n_vocab"],
                                                           os.path.getsize(a.output) / 1e6))
        return 0
    sh = dict(SHAPES[a.shape])
    if a.layers: sh["n_layer"] = a.layers
    arch, E, L, H, HKV, hd = sh["arch"], sh["n_embd"], sh["n_layer"], sh["n_head"], sh["n_head_kv"], sh["head_dim"]
    N, K, F = sh.get("n_expert", 0), sh.get("n_used", 0), sh.get("n_ff_exp", sh.get("n_ff"))
    tok_kv = synth.read_gguf_tokenizer(os.path.join(SHARED, sh["vocab"]))
    n_vocab = len([v for k, _, v, _ in tok_kv if k == "tokenizer.ggml.tokens"][0])
    U32, F32, STR = synth.T_U32, synth.T_F32, synth.T_STR
    kv = [("general.architecture", STR, arch, None),
          ("general.name", STR, "synthetic %s (random weights)" % a.shape, None),
          ("general.alignment", U32, 32, None),
          (arch + ".context_length", U32, sh["ctx"], None),
          (arch + ".embedding_length", U32, E, None),
          (arch + ".block_count", U32, L, None),
          (arch + ".feed_forward_length", U32, F, None),
          (arch + ".attention.head_count", U32, H, None),
          (arch + ".attention.head_count_kv", U32, HKV, None),
          (arch + ".attention.key_length", U32, hd, None),
          (arch + ".attention.value_length", U32, hd, None),
          (arch + ".rope.dimension_count", U32, hd, None),
          (arch + ".rope.freq_base", F32, sh["rope_theta"], None),
          (arch + ".attention.layer_norm_rms_epsilon", F32, sh["eps"], None)] + tok_kv
    if N: kv += [(arch + ".expert_feed_forward_length", U32, F, None), (arch + ".expert_count", U32, N, None),
                 (arch + ".expert_used_count", U32, K, None)]
    if sh.get("swa"): kv.append((arch + ".attention.sliding_window", U32, sh["swa"], None))
    if sh.get("rope_swa"): kv.append((arch + ".rope.freq_base_swa", F32, sh["rope_swa"], None))
    if sh.get("yarn"):
        factor, orig, fast, slow = sh["yarn"]
        kv += [(arch + ".rope.scaling.type", STR, "yarn", None), (arch + ".rope.scaling.factor", F32, factor, None),
               (arch + ".rope.scaling.original_context_length", U32, orig, None),
               (arch + ".rope.scaling.yarn_beta_fast", F32, fast, None),
               (arch + ".rope.scaling.yarn_beta_slow", F32, slow, None)]
    qx = a.type  # the experts
    qt = "q8_0" if qx == "mxfp4" else qx
    qe = "q6_k" if qt == "q4_k" else qt
    tensors = [("token_embd.weight", (E, n_vocab), qe, "emb"), ("output_norm.weight", (E,), "f32", "norm")]
    if arch != "gemma3": tensors.append(("output.weight", (E, n_vocab), qe, "emb"))  # Gemma ties them
    for i in range(L):
        p = "blk.%d." % i
        tensors += [(p + "attn_norm.weight", (E,), "f32", "norm"),
                    (p + "attn_q.weight", (E, H * hd), qt, "w"),
                    (p + "attn_k.weight", (E, HKV * hd), qt, "w"),
                    (p + "attn_v.weight", (E, HKV * hd), qt, "w"),
                    (p + "attn_output.weight", (H * hd, E), qt, "w"),
                    (p + ("post_attention_norm" if arch == "gpt-oss" else "ffn_norm") + ".weight", (E,), "f32", "norm")]
        if N:
            tensors += [(p + "ffn_gate_inp.weight", (E, N), "f32", "w"),
                        (p + "ffn_gate_exps.weight", (E, F, N), qx, "w"),
                        (p + "ffn_up_exps.weight", (E, F, N), qx, "w"),
                        (p + "ffn_down_exps.weight", (F, E, N), qx, "w")]
        else:
            tensors += [(p + "ffn_gate.weight", (E, F), qt, "w"), (p + "ffn_up.weight", (E, F), qt, "w"),
                        (p + "ffn_down.weight", (F, E), qt, "w")]
        if arch == "gemma3":
            tensors += [(p + "post_attention_norm.weight", (E,), "f32", "norm"),
                        (p + "post_ffw_norm.weight", (E,), "f32", "norm")]
        if arch == "gpt-oss":
            tensors += [(p + "attn_q.bias", (H * hd,), "f32", "w"), (p + "attn_k.bias", (HKV * hd,), "f32", "w"),
                        (p + "attn_v.bias", (HKV * hd,), "f32", "w"), (p + "attn_output.bias", (E,), "f32", "w"),
                        (p + "attn_sinks.weight", (H,), "f32", "w"), (p + "ffn_gate_inp.bias", (N,), "f32", "w"),
                        (p + "ffn_gate_exps.bias", (F, N), "f32", "w"), (p + "ffn_up_exps.bias", (F, N), "f32", "w"),
                        (p + "ffn_down_exps.bias", (E, N), "f32", "w")]
        if arch in ("qwen3moe", "gemma3"):
            tensors += [(p + "attn_q_norm.weight", (hd,), "f32", "norm"), (p + "attn_k_norm.weight", (hd,), "f32", "norm")]
    GGML = dict(synth.GGML, mxfp4=(39, 32, 17))
    typed = []
    for name, dims, typ, kind in tensors:
        if dims[0] % GGML[typ][1]:
            typ = "q8_0" if dims[0] % 32 == 0 else "f16"
        typed.append((name, dims, typ, kind))
    write_gguf(a.output, kv, typed, a.seed, GGML)
    print("%s: %s %s, %d layers, %d experts (%d used), %.1f MB" % (a.output, a.shape, a.type, L, N, K,
                                                                    os.path.getsize(a.output) / 1e6))
    return 0


if __name__ == "__main__":
    sys.exit(main())
