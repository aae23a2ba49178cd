#!/usr/bin/python3
"""Write the F32 GGUF of a Llama whose weights come as a Hugging Face directory and whose GGUF is
only a quantized one (shared/models/tinystories-656k): the GGUF's metadata and tokenizer, with every
tensor replaced by the directory's F32 weights, named and laid out as llama.cpp's converter would
(attn_q / attn_k rows permuted from Hugging Face's rotate-half order to GGML's interleaved pairs).
llama-perplexity needs a GGUF; nucleus reads the directory itself.

Each replaced tensor is checked against the quantized one it replaces (dequantized by gguf-py,
llama.cpp's Python package): a wrong name or permutation is caught, not written.

  f32_gguf.py QUANT.gguf HF_DIR OUT.gguf [GGUF_PY_DIR]
"""
import json, struct, sys

import numpy as np


def safetensors(path):
    with open(path, "rb") as f:
        n, = struct.unpack("<Q", f.read(8))
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in head.items():
        if name == "__metadata__": continue
        if t["dtype"] != "F32": sys.exit("%s: %s is %s, expected F32" % (path, name, t["dtype"]))
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype="<f4").reshape(t["shape"])
    return out


def permute(w, n_head):  # llama.cpp convert_hf_to_gguf.py LlamaModel.permute
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def main():
    if len(sys.argv) < 4: sys.exit(__doc__)
    quant, hf, out = sys.argv[1:4]
    sys.path.insert(0, sys.argv[4] if len(sys.argv) > 4 else "/work/peers/mesh/gguf-py")
    import gguf
    cfg = json.load(open(hf + "/config.json"))
    w = safetensors(hf + "/model.safetensors")
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    names = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
             "output.weight": "lm_head.weight"}
    per = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm", "attn_q": "self_attn.q_proj",
           "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
           "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
    for i in range(cfg["num_hidden_layers"]):
        for g, h in per.items(): names["blk.%d.%s.weight" % (i, g)] = "model.layers.%d.%s.weight" % (i, h)

    r = gguf.GGUFReader(quant)
    arch = r.fields["general.architecture"].contents()
    wr = gguf.GGUFWriter(out, arch)
    for f in r.fields.values():
        if f.name == "general.architecture" or f.name.startswith("GGUF."): continue
        if f.name == "general.file_type": continue
        vt = f.types[0]
        wr.add_key_value(f.name, f.contents(), vt, sub_type=f.types[-1] if vt == gguf.GGUFValueType.ARRAY else None)
    wr.add_file_type(gguf.LlamaFileType.ALL_F32)
    tensors = []
    for t in r.tensors:
        hn = names.get(t.name)
        if hn not in w and t.name == "token_embd.weight": hn = "lm_head.weight"  # tied: saved once
        if hn not in w: sys.exit("%s: no Hugging Face tensor for %s" % (quant, t.name))
        a = np.ascontiguousarray(w[hn], dtype=np.float32)
        if t.name.endswith("attn_q.weight"): a = permute(a, nh)
        if t.name.endswith("attn_k.weight"): a = permute(a, nkv)
        ref = gguf.quants.dequantize(t.data, t.tensor_type).reshape(a.shape)
        err = float(np.max(np.abs(ref - a)))
        scale = float(np.max(np.abs(a))) or 1.0
        # Q8_0 rounds to 1/254 of a block's largest weight; F32/F16 norms are near exact
        if err > scale / 100: sys.exit("%s does not match %s (max difference %g of %g)" % (hn, t.name, err, scale))
        tensors.append((t.name, a))
    for name, a in tensors: wr.add_tensor(name, a)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    print("%s: %d F32 tensors" % (out, len(tensors)))


main()
