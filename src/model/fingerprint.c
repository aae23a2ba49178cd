/* A model's fingerprint: what a saved KV cache records to be refused by any other model. */
#include <string.h>

#include "model/model.h"
#include "tensor/quant.h"

static void hash_int(nc_hasher *h, int64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)v >> 8 * i);
    nc_hash_update(h, b, 8);
}

static void hash_double(nc_hasher *h, double d) {
    int64_t bits;
    memcpy(&bits, &d, sizeof bits);
    hash_int(h, bits);
}

static void hash_floats(nc_hasher *h, const float *x, int32_t n) {
    hash_int(h, x ? n : -1);
    for (int32_t i = 0; x && i < n; i++) hash_double(h, x[i]);
}

static void hash_rope(nc_hasher *h, const model_rope *r, int32_t n_rot) {
    hash_double(h, r->base);
    hash_int(h, r->kind);
    hash_double(h, r->factor);
    hash_double(h, r->orig_ctx);
    hash_double(h, r->low_freq_factor);
    hash_double(h, r->high_freq_factor);
    hash_double(h, r->beta_fast);
    hash_double(h, r->beta_slow);
    hash_int(h, r->exact_range);
    hash_double(h, r->attn_factor);
    hash_floats(h, r->freq_factors, n_rot / 2);
    hash_floats(h, r->long_factors, n_rot / 2);
}

/* A weight's type and shape, and the first bytes of eight of its stored rows spread over it
 * (first and last included): two checkpoints that differ differ there, and reading them costs a
 * few page faults, not the whole file. The weights' other bytes are not read: two checkpoints
 * identical in those samples and in everything else hashed here share a fingerprint. */
static void hash_weight(nc_hasher *h, const model_weight *w) {
    hash_int(h, w->data ? (int64_t)w->type : -1);
    if (!w->data) return;
    hash_int(h, w->rows);
    hash_int(h, w->cols);
    hash_int(h, w->transposed);
    int64_t n = w->transposed ? w->cols : w->rows;  /* stored rows, row_bytes apart */
    size_t bytes = w->transposed ? (size_t)w->rows * quant_row_bytes(w->type, 1) : quant_row_bytes(w->type, w->cols);
    if (bytes > 64) bytes = 64;
    for (int i = 0; i < 8 && n > 0; i++)
        nc_hash_update(h, (const uint8_t *)w->data + (size_t)(i * (n - 1) / 7) * w->row_bytes, bytes);
    for (const model_lora *l = w->lora; l; l = l->next) { /* an adapter's pairs, whole (they are small) */
        hash_int(h, l->rank);
        hash_double(h, l->scale);
        nc_hash_update(h, l->a, (size_t)l->rank * (size_t)w->cols * sizeof *l->a);
        for (int32_t r = 0; r < w->rows; r++) nc_hash_update(h, l->b + (size_t)r * l->ldb, (size_t)l->rank * sizeof *l->b);
    }
}

uint64_t model_fingerprint(const model *m) {
    const model_hparams *hp = &m->hp;
    nc_hasher h;
    nc_hash_init(&h);
    const char *arch = model_arch_name(m);
    nc_hash_update(&h, arch, strlen(arch) + 1);
    const int64_t ints[] = {hp->n_vocab,    hp->n_embd,      hp->n_layer,  hp->n_head,      hp->n_head_kv,
                            hp->head_dim,   hp->n_ff,        hp->n_rot,    hp->n_ctx_train, hp->n_expert,
                            hp->n_expert_used, hp->n_ff_exp, hp->expert_norm, hp->gate_up,  hp->rope_neox,
                            hp->swa_window, hp->n_ff_shexp,  hp->gating,   hp->n_group,     hp->n_group_used,
                            hp->expert_weight_input, hp->ssm_conv, hp->ssm_state, hp->ssm_groups, hp->ssm_inner,
                            hp->ssm_heads,  hp->mla_q_lora,  hp->mla_kv_lora, hp->mla_nope, hp->mla_v,
                            hp->n_embd_per_layer};
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++) hash_int(&h, ints[i]);
    const double reals[] = {hp->norm_eps,         hp->attn_scale,        hp->attn_softcap,     hp->final_softcap,
                            hp->embd_scale,       hp->residual_scale,    hp->logit_scale,      hp->expert_scale,
                            hp->temperature_scale, hp->temperature_floor, hp->temperature_offset};
    for (size_t i = 0; i < sizeof reals / sizeof *reals; i++) hash_double(&h, reals[i]);
    hash_rope(&h, &hp->rope[0], hp->n_rot);
    hash_rope(&h, &hp->rope[1], hp->n_rot);
    hash_weight(&h, &m->tok_embd);
    hash_weight(&h, &m->output);
    hash_floats(&h, m->output_norm, hp->n_embd);
    for (int il = 0; il < hp->n_layer; il++) {
        const model_layer *L = &m->layers[il];
        const int64_t shape[] = {L->mixer, L->ffn,  L->n_head,   L->n_head_kv, L->head_dim, L->head_dim_v,
                                 L->n_rot, L->n_ff, L->rope_table, L->kv_layer, L->sliding,  L->rope,
                                 L->q_gate, L->v_norm, L->qk_norm_plain, L->temperature, L->chunk};
        for (size_t i = 0; i < sizeof shape / sizeof *shape; i++) hash_int(&h, shape[i]);
        hash_floats(&h, L->attn_norm, hp->n_embd);
        hash_floats(&h, L->ffn_norm, hp->n_embd);
        hash_floats(&h, L->q_norm, L->head_dim);
        hash_floats(&h, L->k_norm, L->head_dim);
        hash_floats(&h, L->ssm.norm, hp->ssm_heads ? hp->ssm_inner / hp->ssm_heads : 0);
        hash_floats(&h, L->ssm.a, hp->ssm_heads);
        hash_double(&h, L->out_scale);
        const model_weight *ws[MODEL_LAYER_WEIGHTS + 2 * L->n_head];
        for (int i = 0, k = model_layer_weights(L, ws); i < k; i++) hash_weight(&h, ws[i]);
        /* the first and the last expert (every expert would cost page faults across the file) */
        for (int e = 0, last = hp->n_expert - 1; e <= last; e = e < last ? last : last + 1) {
            const model_weight *ex[] = {L->exp_gate ? &L->exp_gate[e] : NULL, L->exp_up ? &L->exp_up[e] : NULL,
                                        L->exp_gate_up ? &L->exp_gate_up[e] : NULL, L->exp_down ? &L->exp_down[e] : NULL};
            for (size_t i = 0; i < sizeof ex / sizeof *ex; i++)
                if (ex[i]) hash_weight(&h, ex[i]);
        }
    }
    return nc_hash_final(&h);
}
