/* A layer's kinds (its mixer and its feed-forward network), shape and tensors (bind.h), as the
 * architecture's row and the file's per-layer keys say. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/bind.h"

/* The layer's own sliding-ness, rotation, heads and FFN width. */
static bool sliding_of(const binder *b, int il) { return b->sliding && b->sliding[il]; }
static int32_t head_kv_of(const binder *b, int il) { return b->head_kv ? b->head_kv[il] : b->m->hp.n_head_kv; }
static int32_t ff_of(const binder *b, int il) { return b->ff ? b->ff[il] : b->m->hp.n_ff; }

/* Which mixer layer il has. */
static layer_mixer mixer_of(const binder *b, int il) {
    const arch_desc *a = b->a;
    switch (a->layers) {
    case LAYERS_INTERVAL: return (il + 1) % b->interval == 0 ? a->attention : a->recurrent;
    case LAYERS_KV_ZERO: return head_kv_of(b, il) == 0 ? a->recurrent : a->attention;
    case LAYERS_HYBRID:
        if (ff_of(b, il) > 0) return MIXER_NONE;
        return head_kv_of(b, il) == 0 ? a->recurrent : a->attention;
    case LAYERS_ATTENTION: break;
    }
    return a->attention;
}

/* A layer whose tensors do not fit its kind: the error says which key made it that kind. */
static int kind_refused(const binder *b, int il, const model_layer *L) {
    static const char *const name[] = {[MIXER_ATTENTION] = "an attention layer", [MIXER_NONE] = "an FFN alone",
                                       [MIXER_MLA] = "a latent attention layer", [MIXER_DELTANET] = "a gated DeltaNet",
                                       [MIXER_MAMBA2] = "a Mamba2 layer", [MIXER_SHORTCONV] = "a short convolution"};
    const char *g = b->a->gguf;
    size_t k = strlen(b->err->msg), n = sizeof b->err->msg;
    char *msg = b->err->msg + k;
    switch (b->a->layers) {
    case LAYERS_INTERVAL:
        snprintf(msg, n - k, " (layer %d is %s by %s.full_attention_interval %d)", il, name[L->mixer], g, b->interval);
        break;
    case LAYERS_KV_ZERO:
        snprintf(msg, n - k, " (layer %d is %s by its %s.attention.head_count_kv %d)", il, name[L->mixer], g, head_kv_of(b, il));
        break;
    case LAYERS_HYBRID:
        snprintf(msg, n - k, " (layer %d is %s by its %s.feed_forward_length %d and attention.head_count_kv %d)", il,
                 name[L->mixer], g, ff_of(b, il), head_kv_of(b, il));
        break;
    case LAYERS_ATTENTION: break;
    }
    return -1;
}

/* ---- attention --------------------------------------------------------------------------- */

/* The last layer before il with a cache of its own and il's kind of window: what a layer sharing
 * the cache of another reads (Gemma 4's last shared_kv_layers layers). */
static int kv_source(const binder *b, int il) {
    int first_shared = b->m->hp.n_layer - b->shared_kv_layers;
    if (b->shared_kv_layers <= 0 || il < first_shared) return il;
    for (int j = first_shared - 1; j >= 0; j--)
        if (b->m->layers[j].mixer == MIXER_ATTENTION && sliding_of(b, j) == sliding_of(b, il)) return j;
    return -1;
}

static int bind_attention(binder *b, int il, model_layer *L) {
    const arch_desc *a = b->a;
    int64_t E = b->m->hp.n_embd, Q = (int64_t)L->n_head * L->head_dim, KV = (int64_t)L->n_head_kv * L->head_dim;
    model_weight qkv;
    if (bind_matrix(b, L_QKV, il, E, Q + 2 * KV, false, &qkv)) return -1;
    bool own_kv = L->kv_layer == il;
    if (qkv.data) {
        L->wq = bind_view(&qkv, 0, (int)Q, 1);
        L->wk = bind_view(&qkv, (int)Q, (int)KV, 1);
        L->wv = bind_view(&qkv, (int)(Q + KV), (int)KV, 1);
    } else if (bind_matrix(b, L_Q, il, E, L->q_gate ? 2 * Q : Q, true, &L->wq) ||
               (own_kv && (bind_matrix(b, L_K, il, E, KV, true, &L->wk) ||
                           bind_matrix(b, L_V, il, E, KV, !a->v_norm, &L->wv)))) {
        return -1;
    }
    if (own_kv && !L->wv.data) L->wv = L->wk; /* Gemma 4's full layers: V is the keys' projection, normalised apart */
    bool need_bias = a->qkv_bias || a->attn_bias;
    if (bind_matrix(b, L_O, il, Q, E, true, &L->wo) || bind_vector(b, L_Q_BIAS, il, Q, need_bias, &L->bq) ||
        (own_kv && (bind_vector(b, L_K_BIAS, il, KV, need_bias, &L->bk) ||
                    bind_vector(b, L_V_BIAS, il, KV, need_bias, &L->bv))) ||
        bind_vector(b, L_O_BIAS, il, E, a->attn_bias, &L->bo) ||
        bind_vector(b, L_SINKS, il, L->n_head, a->sinks, &L->sinks))
        return -1;
    if (a->qk_norm != QK_NORM_NONE) {
        bool all = a->qk_norm == QK_NORM_ALL;
        if (bind_vector(b, L_Q_NORM, il, all ? Q : L->head_dim, true, &L->q_norm) ||
            (own_kv && bind_vector(b, L_K_NORM, il, all ? KV : L->head_dim, true, &L->k_norm)))
            return -1;
    }
    return 0;
}

/* Multi-head latent attention: its query (through a low-rank pair when q_lora is set), the latent
 * and rotated key part, and the per-head matrices in and out of the latent. */
static int bind_mla(binder *b, int il, model_layer *L) {
    const model_hparams *hp = &b->m->hp;
    int64_t E = hp->n_embd, H = L->n_head, R = hp->n_rot, NOPE = hp->mla_nope, LAT = hp->mla_kv_lora, VD = hp->mla_v;
    model_mla *x = &L->mla;
    if (NOPE <= 0 || LAT <= 0 || VD <= 0)
        return nc_fail(b->err, "%s: layer %d: latent attention needs %s.attention.key_length_mla above the rotated %lld "
                               "dims, kv_lora_rank and value_length_mla (have %lld, %lld, %lld)", b->path, il, b->a->gguf,
                       (long long)R, (long long)(NOPE + R), (long long)LAT, (long long)VD);
    if (hp->mla_q_lora > 0) {
        if (bind_matrix(b, L_Q_A, il, E, hp->mla_q_lora, true, &x->q_a) ||
            bind_vector(b, L_Q_A_NORM, il, hp->mla_q_lora, true, &x->q_a_norm) ||
            bind_matrix(b, L_Q_B, il, hp->mla_q_lora, H * (NOPE + R), true, &x->q_b))
            return -1;
    } else if (bind_matrix(b, L_Q, il, E, H * (NOPE + R), true, &L->wq)) {
        return -1;
    }
    return bind_matrix(b, L_KV_A, il, E, LAT + R, true, &x->kv_a) || bind_vector(b, L_KV_A_NORM, il, LAT, true, &x->kv_a_norm) ||
                   bind_stack(b, L_K_B, il, NOPE, LAT, H, &x->k_b) || bind_stack(b, L_V_B, il, LAT, VD, H, &x->v_b) ||
                   bind_matrix(b, L_O, il, H * VD, E, true, &L->wo)
               ? -1
               : 0;
}

/* ---- recurrent mixers ---------------------------------------------------------------------- */

static int ssm_fail(binder *b, int il, const char *what) {
    return nc_fail(b->err, "%s: layer %d: %s (%s.ssm.*: conv_kernel, state_size, group_count, inner_size, "
                           "time_step_rank)", b->path, il, what, b->a->gguf);
}

/* Gated DeltaNet: q and k of ssm_groups key heads of ssm_state dims, v of ssm_heads value heads of
 * ssm_inner / ssm_heads dims, mixed by a convolution; per value head a write strength (beta) and a
 * decay (alpha, dt_bias, A); the output normalised per value head and gated by z. */
static int bind_deltanet(binder *b, int il, model_ssm *x) {
    const model_hparams *hp = &b->m->hp;
    int64_t E = hp->n_embd, HK = hp->ssm_groups, S = hp->ssm_state, HV = hp->ssm_heads, IN = hp->ssm_inner, K = hp->ssm_conv;
    if (HK <= 0 || S <= 0 || HV <= 0 || IN <= 0 || K <= 0) return ssm_fail(b, il, "a gated DeltaNet needs every size");
    if (IN % HV || HV % HK || IN / HV != S)
        return ssm_fail(b, il, "the value heads must divide inner_size into heads of state_size, a multiple of the key heads");
    x->channels = (int32_t)(2 * HK * S + IN);
    return bind_matrix(b, L_SSM_IN, il, E, x->channels, true, &x->in) || bind_matrix(b, L_SSM_GATE, il, E, IN, true, &x->gate) ||
                   bind_matrix(b, L_SSM_BETA, il, E, HV, true, &x->beta) ||
                   bind_matrix(b, L_SSM_ALPHA, il, E, HV, true, &x->alpha) ||
                   bind_floats(b, L_SSM_CONV, il, 2, (int64_t[]){K, x->channels}, true, &x->conv) ||
                   bind_vector(b, L_SSM_DT, il, HV, true, &x->dt_bias) || bind_vector(b, L_SSM_A, il, HV, true, &x->a) ||
                   bind_vector(b, L_SSM_NORM, il, IN / HV, true, &x->norm) ||
                   bind_matrix(b, L_SSM_OUT, il, IN, E, true, &x->out)
               ? -1
               : 0;
}

/* Mamba2: one projection to z, x (ssm_inner), B and C (ssm_groups x ssm_state each) and dt
 * (ssm_heads); x, B, C mixed by a convolution with a bias; A and D per head; the output gated by
 * silu(z), then normalised per group. */
static int bind_mamba2(binder *b, int il, model_ssm *x) {
    const model_hparams *hp = &b->m->hp;
    int64_t E = hp->n_embd, NG = hp->ssm_groups, DS = hp->ssm_state, NH = hp->ssm_heads, IN = hp->ssm_inner, K = hp->ssm_conv;
    if (NG <= 0 || DS <= 0 || NH <= 0 || IN <= 0 || K <= 0) return ssm_fail(b, il, "Mamba2 needs every size");
    if (IN % NH || NH % NG || IN % NG) return ssm_fail(b, il, "the heads and the groups must divide inner_size, the groups the heads");
    x->channels = (int32_t)(IN + 2 * NG * DS);
    return bind_matrix(b, L_SSM_IN, il, E, 2 * IN + 2 * NG * DS + NH, true, &x->in) ||
                   bind_floats(b, L_SSM_CONV, il, 2, (int64_t[]){K, x->channels}, true, &x->conv) ||
                   bind_vector(b, L_SSM_CONV_BIAS, il, x->channels, true, &x->conv_bias) ||
                   bind_vector(b, L_SSM_DT, il, NH, true, &x->dt_bias) ||
                   bind_floats(b, L_SSM_A, il, 2, (int64_t[]){1, NH}, true, &x->a) ||
                   bind_floats(b, L_SSM_D, il, 2, (int64_t[]){1, NH}, true, &x->d) ||
                   bind_floats(b, L_SSM_NORM, il, 2, (int64_t[]){IN / NG, NG}, true, &x->norm) ||
                   bind_matrix(b, L_SSM_OUT, il, IN, E, true, &x->out)
               ? -1
               : 0;
}

/* A gated short convolution (LFM2): B, C, x from one projection; C * conv(B * x). */
static int bind_shortconv(binder *b, int il, model_ssm *x) {
    const model_hparams *hp = &b->m->hp;
    int64_t E = hp->n_embd, K = hp->ssm_conv;
    if (K <= 1)
        return nc_fail(b->err, "%s: layer %d: a short convolution needs %s.shortconv.l_cache of 2 or more (have %lld)",
                       b->path, il, b->a->gguf, (long long)K);
    x->channels = (int32_t)E;
    return bind_matrix(b, L_SSM_IN, il, E, 3 * E, true, &x->in) ||
                   bind_floats(b, L_SSM_CONV, il, 2, (int64_t[]){K, E}, true, &x->conv) ||
                   bind_matrix(b, L_SSM_OUT, il, E, E, true, &x->out)
               ? -1
               : 0;
}

/* ---- feed-forward networks ------------------------------------------------------------------ */

static int bind_dense_ffn(binder *b, int il, model_layer *L) {
    int64_t E = b->m->hp.n_embd, F = L->n_ff;
    if (F <= 0) return nc_fail(b->err, "%s: layer %d has a dense FFN but the feed-forward length is 0", b->path, il);
    model_weight gate_up;
    if (bind_matrix(b, L_GATE_UP, il, E, 2 * F, false, &gate_up)) return -1;
    if (gate_up.data) { /* gate rows first (Phi-3) */
        L->ffn_gate = bind_view(&gate_up, 0, (int)F, 1);
        L->ffn_up = bind_view(&gate_up, (int)F, (int)F, 1);
    } else if (bind_matrix(b, L_GATE, il, E, F, true, &L->ffn_gate) || bind_matrix(b, L_UP, il, E, F, true, &L->ffn_up))
        return -1;
    return bind_matrix(b, L_DOWN, il, F, E, true, &L->ffn_down);
}

/* Per-expert biases, [n_expert][n] f32. */
static int bind_expert_bias(binder *b, tensor_role r, int il, int64_t n, const float **out) {
    *out = NULL;
    if (!b->a->expert_bias) return 0;
    return bind_floats(b, r, il, 2, (int64_t[]){n, b->m->hp.n_expert}, true, out);
}

/* The shared expert, where the layer has one: its width from the file's key, else from its tensor. */
static int bind_shared(binder *b, int il, model_layer *L) {
    model_hparams *hp = &b->m->hp;
    char name[BIND_NAME_MAX];
    const fmt_tensor *t = bind_find(b, L_SH_GATE, il, 0, name);
    if (!t) return 0;
    int64_t E = hp->n_embd, F = hp->n_ff_shexp > 0 ? hp->n_ff_shexp : (int64_t)t->ne[1];
    if (F <= 0 || F > (1 << 24)) return nc_fail(b->err, "%s: tensor '%s': a shared expert of width %lld", b->path, name, (long long)F);
    if (hp->n_ff_shexp == 0) hp->n_ff_shexp = (int32_t)F;
    return bind_matrix(b, L_SH_GATE, il, E, F, true, &L->sh_gate) || bind_matrix(b, L_SH_UP, il, E, F, true, &L->sh_up) ||
                   bind_matrix(b, L_SH_DOWN, il, F, E, true, &L->sh_down) ||
                   bind_vector(b, L_SH_GATE_INP, il, E, false, &L->sh_gate_inp)
               ? -1
               : 0;
}

static int bind_moe(binder *b, int il, model_layer *L) {
    const model_hparams *hp = &b->m->hp;
    const arch_desc *a = b->a;
    int64_t E = hp->n_embd, F = hp->n_ff_exp, N = hp->n_expert;
    bool tr = b->hf_names && a->hf_experts_transposed;
    if (F <= 0) return nc_fail(b->err, "%s: the experts' feed-forward length is 0", b->path);
    if (bind_matrix(b, L_ROUTER, il, E, N, true, &L->router) ||
        bind_vector(b, L_ROUTER_BIAS, il, N, a->expert_bias, &L->router_bias) ||
        bind_vector(b, L_EXP_PROBS_B, il, N, false, &L->exp_probs_b) ||
        bind_vector(b, L_ROUTER_SCALE, il, E, false, &L->router_scale) ||
        bind_vector(b, L_DOWN_EXPS_SCALE, il, N, false, &L->exp_down_scale))
        return -1;
    char name[BIND_NAME_MAX];
    int got = bind_experts(b, L_GATE_EXPS, il, E, F, tr, &L->exp_gate);
    if (got < 0) return -1;
    if (got) {
        got = bind_experts(b, L_UP_EXPS, il, E, F, tr, &L->exp_up);
        if (got <= 0) return got < 0 ? -1 : bind_missing(b, (bind_find(b, L_UP_EXPS, il, 0, name), name));
        if (bind_expert_bias(b, L_GATE_EXPS_BIAS, il, F, &L->exp_gate_b) ||
            bind_expert_bias(b, L_UP_EXPS_BIAS, il, F, &L->exp_up_b))
            return -1;
    } else {
        got = bind_experts(b, L_GATE_UP_EXPS, il, E, 2 * F, tr, &L->exp_gate_up);
        if (got < 0) return -1;
        if (got == 0) { /* neither form: name the one this format uses */
            bind_find(b, L_GATE_UP_EXPS, il, 0, name);
            if (!name[0]) bind_find(b, L_GATE_EXPS, il, 0, name);
            return bind_missing(b, name);
        }
        if (bind_expert_bias(b, L_GATE_UP_EXPS_BIAS, il, 2 * F, &L->exp_gate_up_b)) return -1;
    }
    got = bind_experts(b, L_DOWN_EXPS, il, F, E, tr, &L->exp_down);
    if (got <= 0) return got < 0 ? -1 : bind_missing(b, (bind_find(b, L_DOWN_EXPS, il, 0, name), name));
    if (bind_expert_bias(b, L_DOWN_EXPS_BIAS, il, E, &L->exp_down_b) || bind_shared(b, il, L)) return -1;
    /* Gemma 4: a dense FFN beside the experts, each normalised before and after on its own */
    if (bind_find(b, L_GATE, il, 0, name) && (bind_dense_ffn(b, il, L) ||
                                              bind_vector(b, L_FFN_POST_NORM_1, il, E, true, &L->ffn_post_norm_1) ||
                                              bind_vector(b, L_FFN_PRE_NORM_2, il, E, true, &L->ffn_pre_norm_2) ||
                                              bind_vector(b, L_FFN_POST_NORM_2, il, E, true, &L->ffn_post_norm_2)))
        return -1;
    return 0;
}

/* ---- a layer ------------------------------------------------------------------------------- */

int bind_layer(binder *b, int il, model_layer *L) {
    const model_hparams *hp = &b->m->hp;
    const arch_desc *a = b->a;
    int64_t E = hp->n_embd;
    char name[BIND_NAME_MAX];
    L->mixer = mixer_of(b, il);
    L->sliding = hp->swa_window > 0 && sliding_of(b, il);
    L->rope = b->rope ? b->rope[il] : true;
    L->n_head = hp->n_head;
    L->n_head_kv = head_kv_of(b, il);
    L->head_dim = L->head_dim_v = L->sliding && b->head_dim_swa ? b->head_dim_swa : hp->head_dim;
    L->rope_table = (int8_t)(!L->rope ? -1 : L->sliding && b->own_swa_rope ? 1 : 0);
    L->n_rot = L->rope_table >= 0 ? hp->rope[L->rope_table].n_rot : 0;
    L->n_ff = ff_of(b, il);
    L->out_scale = 1.0f;
    bool attends = L->mixer == MIXER_ATTENTION || L->mixer == MIXER_MLA;
    if (attends) {
        L->kv_layer = kv_source(b, il);
        if (L->kv_layer < 0)
            return nc_fail(b->err, "%s: layer %d shares an earlier layer's KV cache (%s.attention.shared_kv_layers %d) "
                                   "but no earlier layer of its kind keeps one", b->path, il, a->gguf, b->shared_kv_layers);
        if (L->kv_layer != il) L->n_head_kv = b->m->layers[L->kv_layer].n_head_kv;
        if (L->mixer == MIXER_MLA) { /* one latent row a token: a key head of [latent | rotated], values its latent */
            L->n_head_kv = 1;
            L->head_dim = hp->mla_kv_lora + hp->n_rot;
            L->head_dim_v = hp->mla_kv_lora;
        }
        if (L->n_head_kv <= 0 || L->n_head % L->n_head_kv)
            return nc_fail(b->err, "%s: layer %d attends with %d heads and %d KV heads (%s.attention.head_count_kv): the "
                                   "KV heads must be positive and divide the heads", b->path, il, L->n_head, L->n_head_kv,
                           a->gguf);
        L->q_gate = a->q_gate;
        L->v_norm = a->v_norm;
        L->qk_norm_plain = a->qk_norm_plain && L->rope;
        L->chunk = L->rope ? a->chunk : 0;
        L->temperature = hp->temperature_scale > 0 && (a->nope_temperature == 0 || !L->rope);
    } else {
        L->kv_layer = -1;
        L->n_head_kv = 0;
    }
    /* the norms the placement has, and only those (gpt-oss's file names its pre-FFN norm as
     * other architectures name a post-attention one); a layer of one block has one norm */
    bool pre = a->norms != NORMS_POST, post = a->norms != NORMS_PRE, one_block = a->layers == LAYERS_HYBRID;
    if ((pre && bind_vector(b, L_ATTN_NORM, il, E, true, &L->attn_norm)) ||
        (pre && !one_block && bind_vector(b, L_FFN_NORM, il, E, true, &L->ffn_norm)) ||
        (post && (bind_vector(b, L_ATTN_POST_NORM, il, E, true, &L->attn_post_norm) ||
                  bind_vector(b, L_FFN_POST_NORM, il, E, true, &L->ffn_post_norm))))
        return -1;
    int rc = 0;
    switch (L->mixer) {
    case MIXER_ATTENTION: rc = bind_attention(b, il, L); break;
    case MIXER_MLA: rc = bind_mla(b, il, L); break;
    case MIXER_DELTANET: rc = bind_deltanet(b, il, &L->ssm); break;
    case MIXER_MAMBA2: rc = bind_mamba2(b, il, &L->ssm); break;
    case MIXER_SHORTCONV: rc = bind_shortconv(b, il, &L->ssm); break;
    case MIXER_NONE: L->ffn_norm = L->attn_norm; L->attn_norm = NULL; break; /* the block's one norm is its FFN's */
    }
    if (rc) return kind_refused(b, il, L);
    /* A layer with a router is a mixture of experts, one without a dense FFN (Qwen3-MoE may mix
     * them); a layer of one block with a mixer has no FFN; an MLP's activation has no gate. */
    bool moe = hp->n_expert > 0 && bind_find(b, L_ROUTER, il, 0, name) != NULL;
    if (moe) L->ffn = FFN_MOE, rc = bind_moe(b, il, L);
    else if (one_block && L->mixer != MIXER_NONE) L->ffn = FFN_NONE;
    else if (a->act == ACT_RELU2) {
        L->ffn = FFN_MLP;
        rc = L->n_ff <= 0 ? nc_fail(b->err, "%s: layer %d: an MLP of width 0", b->path, il)
                          : bind_matrix(b, L_UP, il, E, L->n_ff, true, &L->ffn_up) ||
                                    bind_matrix(b, L_DOWN, il, L->n_ff, E, true, &L->ffn_down)
                                ? -1
                                : 0;
    } else L->ffn = FFN_GATED, rc = bind_dense_ffn(b, il, L);
    if (rc) return -1;
    /* Gemma 4's per-layer embedding and output scalar */
    if (hp->n_embd_per_layer > 0 &&
        (bind_matrix(b, L_PL_GATE, il, E, hp->n_embd_per_layer, true, &L->pl_gate) ||
         bind_matrix(b, L_PL_PROJ, il, hp->n_embd_per_layer, E, true, &L->pl_proj) ||
         bind_vector(b, L_PL_POST_NORM, il, E, true, &L->pl_post_norm)))
        return -1;
    const float *scale;
    if (bind_vector(b, L_OUT_SCALE, il, 1, false, &scale)) return -1;
    if (scale) L->out_scale = scale[0];
    return 0;
}

const char *model_layer_kind(const model *m, int il, char *buf, size_t n) {
    const model_hparams *hp = &m->hp;
    const model_layer *L = &m->layers[il];
    size_t k = 0;
#define PUT(...) (k += (size_t)snprintf(buf + k, k < n ? n - k : 0, __VA_ARGS__))
    switch (L->mixer) {
    case MIXER_ATTENTION:
        PUT("%s%sattention, %d heads, %d KV heads of %d", L->q_gate ? "gated " : "", L->sliding ? "sliding " : "", L->n_head,
            L->n_head_kv, L->head_dim);
        if (L->sliding) PUT(", window %d", hp->swa_window);
        if (L->chunk) PUT(", chunks of %d", L->chunk);
        if (L->rope_table < 0) PUT(", no rotation");
        if (L->kv_layer != il) PUT(", layer %d's cache", L->kv_layer);
        break;
    case MIXER_MLA:
        PUT("latent attention, %d heads over a cached row of %d latent + %d rotated", L->n_head, hp->mla_kv_lora, hp->n_rot);
        break;
    case MIXER_DELTANET:
        PUT("gated DeltaNet, %d value heads of %d, %d key heads of %d", hp->ssm_heads, hp->ssm_inner / hp->ssm_heads,
            hp->ssm_groups, hp->ssm_state);
        break;
    case MIXER_MAMBA2:
        PUT("Mamba2, %d heads of %d, state %d, %d group%s", hp->ssm_heads, hp->ssm_inner / hp->ssm_heads, hp->ssm_state,
            hp->ssm_groups, hp->ssm_groups > 1 ? "s" : "");
        break;
    case MIXER_SHORTCONV: PUT("short convolution of %d taps", hp->ssm_conv); break;
    case MIXER_NONE: PUT("no mixer"); break;
    }
    switch (L->ffn) {
    case FFN_GATED: PUT(" | gated FFN %d", L->n_ff); break;
    case FFN_MLP: PUT(" | MLP %d", L->n_ff); break;
    case FFN_MOE:
        PUT(" | %d experts of %d, %d used (%s)", hp->n_expert, hp->n_ff_exp, hp->n_expert_used,
            hp->gating == GATING_SIGMOID ? "sigmoid" : "softmax");
        if (L->sh_gate.data) PUT(", shared expert %d%s", hp->n_ff_shexp, L->sh_gate_inp ? " gated" : "");
        if (L->ffn_post_norm_1) PUT(", beside a gated FFN %d", L->n_ff);
        break;
    case FFN_NONE: break;
    }
#undef PUT
    return buf;
}

int model_layer_weights(const model_layer *L, const model_weight **out) {
    const model_weight *all[] = {&L->wq,        &L->wk,          &L->wv,        &L->wo,         &L->ffn_gate,
                                 &L->ffn_up,    &L->ffn_down,    &L->router,    &L->sh_gate,    &L->sh_up,
                                 &L->sh_down,   &L->ssm.in,      &L->ssm.gate,  &L->ssm.beta,   &L->ssm.alpha,
                                 &L->ssm.out,   &L->mla.q_a,     &L->mla.q_b,   &L->mla.kv_a,   &L->pl_gate,
                                 &L->pl_proj};
    int n = 0;
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (all[i]->data && !(i == 2 && L->wv.data == L->wk.data)) /* V may be the keys' own projection */
            out[n++] = all[i];
    for (int h = 0; L->mla.k_b && h < L->n_head; h++) out[n++] = &L->mla.k_b[h];
    for (int h = 0; L->mla.v_b && h < L->n_head; h++) out[n++] = &L->mla.v_b[h];
    return n;
}
