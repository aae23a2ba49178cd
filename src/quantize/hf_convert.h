/* A Hugging Face model directory (config.json, *.safetensors in F32, F16 or BF16, tokenizer.json
 * or tokenizer.model, tokenizer_config.json) as the GGUF file llama.cpp's convert_hf_to_gguf.py
 * writes of it, for the architectures the HF loader binds (model/arch.h): the same tensor names,
 * shapes and layouts, the general.* / <arch>.* hyper-parameter keys, the tokenizer.ggml.* keys
 * (vocab_write_gguf) and tokenizer.chat_template.
 *
 * Tensors keep the checkpoint's element type where the converter's --outtype would keep a float
 * type (every matrix); the ones the converter always writes as F32 (1-D tensors, norms, biases,
 * the MoE router ffn_gate_inp, attention sinks) are F32. `nucleus quantize` then writes this file
 * in the type asked for, as it would the converter's F32/F16/BF16 file, so both routes give the
 * same tensors. general.file_type is left to the quantizer. */
#ifndef NC_HF_CONVERT_H
#define NC_HF_CONVERT_H

#include "common.h"

/* Reported before each tensor is converted (index 1-based). */
typedef void (*hfc_progress)(void *ud, int index, int n_tensors, const char *name);

/* Write dir's GGUF at out_path. 0, or -1 with err saying why (out_path may then hold a partial
 * file: the caller removes it). */
int hfc_convert(const char *dir, const char *out_path, hfc_progress progress, void *ud, nc_err *err);

#endif
