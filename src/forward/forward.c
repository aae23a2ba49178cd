/* The forward pass, written once: the walk over a model's layers (forward.h), calling the
 * operations of the backend each layer runs on (backend.h). The host's part is here too: the
 * embedding lookup, the rotary tables, the cache's cells, the experts' routing, the logits. */
#include "forward/forward.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/quant.h"

static bool int_weight(const model_weight *w) { return w->data && kernels_int_type(w->type) != 0; }

static fwd_view whole(const fwd_state *s, fwd_buf b) { return (fwd_view){b, 0, s->width[b]}; }
/* Rows of n floats, one after the other: what products read. */
static fwd_view rows_of(fwd_buf b, int32_t n) { return (fwd_view){b, 0, n}; }

/* ---- the mixers ---------------------------------------------------------------------------- */

/* The residual stream after a block: x += residual scale * post_norm(W in + bias). Without a
 * post-norm the product adds itself to x. ready: `in` was quantised by the operation that wrote it. */
static void project(fwd_state *s, const fwd_backend *be, const model_weight *w, fwd_view in, int32_t cols, bool ready,
                    const float *bias, const float *post_norm, int T) {
    const model_hparams *hp = &s->m->hp;
    fwd_in src = {.x = in, .cols = cols, .T = T, .ready = ready};
    if (!post_norm) {
        be->mul(s, &src, &(fwd_out){.w = w, .y = whole(s, FB_X), .bias = bias, .add = true, .scale = hp->residual_scale}, 1);
        return;
    }
    be->mul(s, &src, &(fwd_out){.w = w, .y = whole(s, FB_O), .bias = bias}, 1);
    be->add(s, whole(s, FB_X), whole(s, FB_O), hp->n_embd, post_norm, hp->residual_scale, T);
}

/* The input of a mixer: the stream, RMS-normalised with the layer's norm. */
static fwd_in mixer_in(const fwd_state *s, const model_layer *L, int T) {
    return (fwd_in){.x = whole(s, FB_X), .cols = s->m->hp.n_embd, .T = T, .norm = L->attn_norm};
}

/* Attention (Vaswani et al. 2017): queries, keys and values projected from the normalised
 * stream (with their biases, per-head RMS norms and rotary embedding, Su et al. 2021), the keys
 * and values appended to the cache; each query attends to its sequence's cached positions (all
 * of them, a sliding window or a chunk; grouped-query heads, Ainslie et al. 2023; soft-capped
 * scores, attention sinks as the architecture says); the heads' outputs, gated where the model
 * gates them (Qwen3.5: sigmoid of a second half of each query head), projected back. A layer
 * sharing an earlier layer's cache (Gemma 4) projects its queries alone. */
static void attention(fwd_state *s, const fwd_backend *be, int il, int T) {
    const model_hparams *hp = &s->m->hp;
    const model_layer *L = &s->m->layers[il];
    fwd_in in = mixer_in(s, L, T);
    int hd = L->head_dim, nq = L->n_head, nkv = L->n_head_kv, rope = fwd_rope_of(s, L), qs = L->q_gate ? 2 * hd : hd;
    bool all = hp->arch->qk_norm == QK_NORM_ALL, per_head = hp->arch->qk_norm == QK_NORM_HEAD, own = L->kv_layer == il;
    fwd_view q = rows_of(FB_Q, nq * qs), k = rows_of(FB_K, nkv * hd), v = rows_of(FB_V, nkv * hd), out = rows_of(FB_ATTN, nq * hd);
    /* OLMo 2 normalises each token's queries and keys over all heads at once: rotated and stored after */
    fwd_heads hq = {FWD_QUERY, nq, hd, qs, .norm = per_head ? L->q_norm : NULL, .plain = L->qk_norm_plain,
                    .norm_last = L->qk_norm_plain, .rope = all ? -1 : rope, .n_rot = L->n_rot,
                    .temperature = L->temperature, .layer = -1};
    fwd_heads hk = {FWD_KEY, nkv, hd, hd, .norm = per_head ? L->k_norm : NULL, .plain = L->qk_norm_plain,
                    .norm_last = L->qk_norm_plain, .rope = all ? -1 : rope, .n_rot = L->n_rot, .layer = all ? -1 : il};
    fwd_heads hv = {FWD_VALUE, nkv, hd, hd, .plain = L->v_norm, .rope = -1, .layer = il};
    be->mul(s, &in,
            (fwd_out[]){{.w = &L->wq, .y = q, .bias = L->bq, .heads = &hq},
                        {.w = &L->wk, .y = k, .bias = L->bk, .heads = &hk},
                        {.w = &L->wv, .y = v, .bias = L->bv, .heads = &hv}},
            own ? 3 : 1);
    if (all) {
        be->norm(s, q, q, NULL, nq * hd, 1, L->q_norm, T, false);
        be->norm(s, k, k, NULL, nkv * hd, 1, L->k_norm, T, false);
        be->heads(s, q, &(fwd_heads){FWD_QUERY, nq, hd, hd, .rope = rope, .n_rot = L->n_rot, .layer = -1}, T);
        be->heads(s, k, &(fwd_heads){FWD_KEY, nkv, hd, hd, .rope = rope, .n_rot = L->n_rot, .layer = il}, T);
    }
    bool ready = be->attend(s,
                            &(fwd_attn){.layer = L->kv_layer, .q = q, .out = out, .n_head = nq, .n_head_kv = nkv, .dim = hd,
                                        .q_stride = qs, .scale = hp->attn_scale, .softcap = hp->attn_softcap,
                                        .sinks = L->sinks, .window = L->sliding ? hp->swa_window : 0, .chunk = L->chunk,
                                        .quant = int_weight(&L->wo) && !L->q_gate},
                            T);
    if (L->q_gate) {
        be->ew(s, &(fwd_ew){.kind = FWD_SIGMOID_MUL, .y = out, .a = out, .b = {FB_Q, hd, q.ld}, .n = hd, .groups = nq, .b_stride = qs}, T);
        ready = false;
    }
    project(s, be, &L->wo, out, nq * hd, ready, L->bo, L->attn_post_norm, T);
}

/* Multi-head latent attention (DeepSeek-V2), absorbed: the cache holds per token one row [latent |
 * rotated key], the latent RMS-normalised; each query head's non-rotated part goes into the
 * latent space through k_b, so every head attends over the one cached row (the values are its
 * latent), and each head's output comes out of the latent through v_b. Decode and prefill are
 * the same products, so a token's result does not depend on which computed it. */
static void latent_attention(fwd_state *s, const fwd_backend *be, int il, int T) {
    const model_hparams *hp = &s->m->hp;
    const model_layer *L = &s->m->layers[il];
    fwd_in in = mixer_in(s, L, T);
    const model_mla *x = &L->mla;
    int H = L->n_head, R = hp->n_rot, NOPE = hp->mla_nope, LAT = hp->mla_kv_lora, VD = hp->mla_v, rope = fwd_rope_of(s, L);
    int QH = NOPE + R, KH = LAT + R;
    fwd_view q = rows_of(FB_Q, H * QH), kv = rows_of(FB_K, KH), qa = rows_of(FB_T1, hp->mla_q_lora);
    if (x->q_a.data) { /* the query through its low-rank pair */
        be->mul(s, &in, (fwd_out[]){{.w = &x->q_a, .y = qa}, {.w = &x->kv_a, .y = kv}}, 2);
        bool ready = be->norm(s, qa, qa, NULL, hp->mla_q_lora, 1, x->q_a_norm, T, int_weight(&x->q_b));
        be->mul(s, &(fwd_in){.x = qa, .cols = hp->mla_q_lora, .T = T, .ready = ready}, &(fwd_out){.w = &x->q_b, .y = q}, 1);
    } else {
        be->mul(s, &in, (fwd_out[]){{.w = &L->wq, .y = q}, {.w = &x->kv_a, .y = kv}}, 2);
    }
    /* the cached row: the latent normalised, the key part rotated */
    be->heads(s, kv, &(fwd_heads){FWD_KEY, 1, LAT, KH, .norm = x->kv_a_norm, .rope = -1, .layer = il}, T);
    be->heads(s, (fwd_view){FB_K, LAT, KH}, &(fwd_heads){FWD_KEY, 1, R, KH, .rope = rope, .n_rot = R, .layer = il, .offset = LAT},
              T);
    /* each query head: [k_b q_nope | rotated q_rope] */
    fwd_view qabs = rows_of(FB_T1, H * KH), lat = rows_of(FB_T2, H * LAT), out = rows_of(FB_ATTN, H * VD);
    be->heads(s, (fwd_view){FB_Q, NOPE, q.ld}, &(fwd_heads){FWD_QUERY, H, R, QH, .rope = rope, .n_rot = R, .layer = -1}, T);
    be->mul_heads(s, x->k_b, H, q, QH, qabs, KH, T);
    be->ew(s, &(fwd_ew){.kind = FWD_SCALE, .y = {FB_T1, LAT, qabs.ld}, .a = {FB_Q, NOPE, q.ld}, .n = R, .groups = H, .y_stride = KH,
                        .a_stride = QH, .scale = 1.0f},
           T);
    be->attend(s,
               &(fwd_attn){.layer = il, .q = qabs, .out = lat, .n_head = H, .n_head_kv = 1, .dim = KH, .q_stride = KH,
                           .dim_v = LAT, .scale = hp->attn_scale},
               T);
    be->mul_heads(s, x->v_b, H, lat, LAT, out, VD, T);
    project(s, be, &L->wo, out, H * VD, false, NULL, L->attn_post_norm, T);
}

/* Gated DeltaNet (Yang, Kautz and Hatamizadeh 2024; Qwen3.5): q, k, v mixed over time by a short
 * causal convolution, then a delta-rule recurrence per value head (the state decays, then takes
 * beta times the difference between v and what it recalls for k); its output RMS-normalised per
 * head and gated by silu(z). */
static void deltanet(fwd_state *s, const fwd_backend *be, int il, int T) {
    const model_hparams *hp = &s->m->hp;
    const model_layer *L = &s->m->layers[il];
    fwd_in in = mixer_in(s, L, T);
    const model_ssm *x = &L->ssm;
    int HV = hp->ssm_heads, DV = hp->ssm_inner / HV, C = x->channels;
    fwd_view qkv = rows_of(FB_T1, C), z = rows_of(FB_Q, hp->ssm_inner), beta = rows_of(FB_K, HV), alpha = rows_of(FB_V, HV);
    fwd_view mixed = rows_of(FB_T2, C), out = rows_of(FB_ATTN, hp->ssm_inner);
    be->mul(s, &in,
            (fwd_out[]){{.w = &x->in, .y = qkv}, {.w = &x->gate, .y = z}, {.w = &x->beta, .y = beta}, {.w = &x->alpha, .y = alpha}},
            4);
    be->conv(s, &(fwd_conv){.layer = il, .channels = C, .k = hp->ssm_conv, .in = qkv, .out = mixed, .w = x->conv, .silu = true},
             T);
    be->scan(s,
             &(fwd_scan){FWD_DELTANET, il, HV, hp->ssm_groups, DV, hp->ssm_state, .x = mixed, .gate = alpha, .beta = beta,
                         .y = out, .dt_bias = x->dt_bias, .a = x->a},
             T);
    be->norm(s, out, out, NULL, DV, HV, x->norm, T, false);
    be->ew(s, &(fwd_ew){.kind = FWD_SILU_MUL, .y = out, .a = out, .b = z, .n = hp->ssm_inner, .groups = 1}, T);
    project(s, be, &x->out, out, hp->ssm_inner, false, NULL, L->attn_post_norm, T);
}

/* Mamba2 (Dao and Gu 2024): one projection to z, x, B, C and the time steps; x, B, C mixed by a
 * short causal convolution; the selective state-space recurrence per head (B and C shared by the
 * heads of a group), plus D x; gated by silu(z), then RMS-normalised per group. */
static void mamba2(fwd_state *s, const fwd_backend *be, int il, int T) {
    const model_hparams *hp = &s->m->hp;
    const model_layer *L = &s->m->layers[il];
    fwd_in in = mixer_in(s, L, T);
    const model_ssm *x = &L->ssm;
    int IN = hp->ssm_inner, NG = hp->ssm_groups, NH = hp->ssm_heads, C = x->channels, W = 2 * IN + 2 * NG * hp->ssm_state + NH;
    fwd_view zx = rows_of(FB_T1, W), mixed = rows_of(FB_T2, C), out = rows_of(FB_ATTN, IN);
    be->mul(s, &in, &(fwd_out){.w = &x->in, .y = zx}, 1);
    be->conv(s,
             &(fwd_conv){.layer = il, .channels = C, .k = hp->ssm_conv, .in = {FB_T1, IN, W}, .out = mixed, .w = x->conv,
                         .bias = x->conv_bias, .silu = true},
             T);
    be->scan(s,
             &(fwd_scan){FWD_MAMBA2, il, NH, NG, IN / NH, hp->ssm_state, .x = mixed, .gate = {FB_T1, W - NH, W}, .y = out,
                         .dt_bias = x->dt_bias, .a = x->a, .d = x->d},
             T);
    be->ew(s, &(fwd_ew){.kind = FWD_SILU_MUL, .y = out, .a = out, .b = zx, .n = IN, .groups = 1}, T);
    for (int g = 0; g < NG; g++) /* each group's norm has its own weights */
        be->norm(s, (fwd_view){FB_ATTN, g * (IN / NG), IN}, (fwd_view){FB_ATTN, g * (IN / NG), IN}, NULL, IN / NG, 1,
                 x->norm + (size_t)g * (IN / NG), T, false);
    project(s, be, &x->out, out, IN, false, NULL, L->attn_post_norm, T);
}

/* A gated short convolution (LFM2): B, C and x projected; C * conv(B * x). */
static void shortconv(fwd_state *s, const fwd_backend *be, int il, int T) {
    const model_hparams *hp = &s->m->hp;
    const model_layer *L = &s->m->layers[il];
    fwd_in in = mixer_in(s, L, T);
    const model_ssm *x = &L->ssm;
    int E = hp->n_embd;
    fwd_view bcx = rows_of(FB_T1, 3 * E), bx = rows_of(FB_T2, E), conv = rows_of(FB_Q, E), out = rows_of(FB_ATTN, E);
    be->mul(s, &in, &(fwd_out){.w = &x->in, .y = bcx}, 1);
    be->ew(s, &(fwd_ew){.kind = FWD_MUL, .y = bx, .a = bcx, .b = {FB_T1, 2 * E, 3 * E}, .n = E, .groups = 1}, T);
    be->conv(s, &(fwd_conv){.layer = il, .channels = E, .k = hp->ssm_conv, .in = bx, .out = conv, .w = x->conv}, T);
    be->ew(s, &(fwd_ew){.kind = FWD_MUL, .y = out, .a = {FB_T1, E, 3 * E}, .b = conv, .n = E, .groups = 1}, T);
    project(s, be, &x->out, out, E, false, NULL, L->attn_post_norm, T);
}

/* ---- the feed-forward networks ----------------------------------------------------------------- */

static const kernels_glu glu_kind[] = {[ACT_SILU] = KERNELS_SILU, [ACT_GELU_TANH] = KERNELS_GELU_TANH,
                                       [ACT_SWIGLU_OAI] = KERNELS_SILU_OAI, [ACT_RELU2] = KERNELS_SILU};

/* A gated FFN (Shazeer 2020, "GLU variants improve Transformer"): down(act(gate x) * up x), or an
 * MLP without the gate: down(act(up x)). */
static void dense_ffn(fwd_state *s, const fwd_backend *be, int il, int T) {
    const model_hparams *hp = &s->m->hp;
    const model_layer *L = &s->m->layers[il];
    fwd_view a = rows_of(FB_FFN, L->n_ff);
    fwd_in in = {.x = whole(s, FB_X), .cols = hp->n_embd, .T = T, .norm = L->ffn_norm};
    bool ready = L->ffn == FFN_MLP
                     ? be->mul(s, &in,
                               &(fwd_out){.w = &L->ffn_up, .act_only = FWD_ACT_RELU2, .y = a, .quant = int_weight(&L->ffn_down)}, 1)
                     : be->mul(s, &in,
                               &(fwd_out){.w = &L->ffn_gate, .up = &L->ffn_up, .act = glu_kind[hp->arch->act], .y = a,
                                          .quant = int_weight(&L->ffn_down)},
                               1);
    project(s, be, &L->ffn_down, a, L->n_ff, ready, NULL, L->ffn_post_norm, T);
}

/* Route token t: its router logits (s->moe.logits) to k experts and weights. The scores are the
 * softmax or the sigmoid of the logits; the choice is the best k of the scores plus a selection
 * bias, among the best groups' experts when the experts come in groups (a group scores the sum of
 * its best two: DeepSeek-V3); the weights are the chosen scores, renormalised and scaled as the
 * model says. Ties go to the lower expert id. */
static void route(fwd_state *s, const model_layer *L, int t) {
    const model_hparams *hp = &s->m->hp;
    int N = hp->n_expert, K = hp->n_expert_used;
    float *z = s->moe.logits + (size_t)t * N;
    int32_t *ex = s->moe.expert + (size_t)t * K;
    float *w = s->moe.weight + (size_t)t * K;
    if (L->router_bias)
        for (int e = 0; e < N; e++) z[e] += L->router_bias[e];
    double mx = -INFINITY, total = 0, p[N], sel[N];
    for (int e = 0; e < N; e++) mx = z[e] > mx ? z[e] : mx;
    for (int e = 0; e < N; e++) total += exp((double)z[e] - mx);
    for (int e = 0; e < N; e++) {
        p[e] = hp->gating == GATING_SIGMOID ? 1.0 / (1.0 + exp(-(double)z[e])) : exp((double)z[e] - mx) / total;
        sel[e] = p[e] + (L->exp_probs_b ? L->exp_probs_b[e] : 0.0);
    }
    if (hp->n_group > 0) { /* keep the best n_group_used groups */
        int G = hp->n_group, per = N / G;
        double score[G];
        for (int g = 0; g < G; g++) {
            double a = -INFINITY, b = -INFINITY;
            for (int e = g * per; e < (g + 1) * per; e++)
                if (sel[e] > a) b = a, a = sel[e];
                else if (sel[e] > b) b = sel[e];
            score[g] = per > 1 ? a + b : a;
        }
        bool keep[G];
        for (int g = 0; g < G; g++) keep[g] = false;
        for (int k = 0; k < hp->n_group_used; k++) {
            int best = -1;
            for (int g = 0; g < G; g++)
                if (!keep[g] && (best < 0 || score[g] > score[best])) best = g;
            keep[best] = true;
        }
        for (int e = 0; e < N; e++)
            if (!keep[e / per]) sel[e] = -INFINITY;
    }
    for (int k = 0; k < K; k++) { /* selection: k is small */
        int best = -1;
        for (int e = 0; e < N; e++) {
            bool taken = false;
            for (int i = 0; i < k; i++) taken = taken || ex[i] == e;
            if (!taken && (best < 0 || sel[e] > sel[best])) best = e;
        }
        ex[k] = best;
    }
    if (hp->gating == GATING_SOFTMAX) {
        /* gpt-oss: softmax over the chosen logits; otherwise their share of the softmax over all
         * experts, renormalised to sum to one when the model asks (the same numbers then) */
        double chosen = 0;
        for (int k = 0; k < K; k++) chosen += exp((double)z[ex[k]] - mx);
        double denom = hp->arch->router_softmax_topk || hp->expert_norm ? chosen : total;
        for (int k = 0; k < K; k++) w[k] = (float)(exp((double)z[ex[k]] - mx) / denom);
    } else {
        double sum = 0;
        for (int k = 0; k < K; k++) sum += p[ex[k]];
        for (int k = 0; k < K; k++) w[k] = (float)(hp->expert_norm ? p[ex[k]] / sum : p[ex[k]]);
    }
    for (int k = 0; k < K; k++) {
        if (hp->expert_scale != 1.0f) w[k] *= hp->expert_scale;
        if (L->exp_down_scale) w[k] *= L->exp_down_scale[ex[k]];
    }
}

/* The (token, slot) rows sorted by expert, then token: a counting sort. */
static void group_by_expert(fwd_state *s, int T) {
    const model_hparams *hp = &s->m->hp;
    fwd_moe *mo = &s->moe;
    int N = hp->n_expert, K = hp->n_expert_used;
    memset(mo->start, 0, (size_t)(N + 1) * sizeof *mo->start);
    for (int i = 0; i < T * K; i++) mo->start[mo->expert[i] + 1]++;
    for (int e = 0; e < N; e++) mo->start[e + 1] += mo->start[e];
    for (int i = 0; i < T * K; i++) {
        int r = mo->start[mo->expert[i]]++; /* the cursor of each expert, put back below */
        mo->row[i] = r;
        mo->token[r] = i / K;
    }
    for (int e = N; e > 0; e--) mo->start[e] = mo->start[e - 1];
    mo->start[0] = 0;
}

static bool experts_int(const model_hparams *hp, const model_layer *L) {
    bool q = false;
    for (int e = 0; e < hp->n_expert; e++)
        q = q || int_weight(L->exp_gate ? &L->exp_gate[e] : &L->exp_gate_up[e]) || int_weight(&L->exp_down[e]);
    return q;
}

/* A mixture of experts (Shazeer et al. 2017; Mixtral, Jiang et al. 2024): a router scores the
 * experts of each token, its k best run on it, their outputs summed by the router's weights; a
 * shared expert runs on every token (gated by the sigmoid of one more projection in Qwen3.5), and
 * Gemma 4 runs a dense FFN beside the experts, each branch with its own norms. The routing is
 * the host's, for every backend. */
static int moe_ffn(fwd_state *s, const fwd_backend *be, int il, int T, nc_err *err) {
    const model_hparams *hp = &s->m->hp;
    const model_layer *L = &s->m->layers[il];
    int E = hp->n_embd;
    fwd_view x = whole(s, FB_X), xn = whole(s, FB_XN), logits = whole(s, FB_ROUTER), o = whole(s, FB_O);
    fwd_view t2 = rows_of(FB_T2, E);
    const float *norm = L->ffn_pre_norm_2 ? L->ffn_pre_norm_2 : L->ffn_norm;
    bool ready = be->norm(s, xn, x, NULL, E, 1, norm, T, int_weight(&L->router) || experts_int(hp, L));
    fwd_in router_in = {.x = xn, .cols = E, .T = T, .ready = ready};
    if (L->router_scale) { /* Gemma 4: the router reads RMSNorm(x) / sqrt(n_embd) * scale */
        fwd_view r = rows_of(FB_T1, E);
        be->norm(s, r, x, NULL, E, 1, L->router_scale, T, false);
        be->ew(s, &(fwd_ew){.kind = FWD_SCALE, .y = r, .a = r, .n = E, .groups = 1, .scale = 1.0f / sqrtf((float)E)}, T);
        router_in = (fwd_in){.x = r, .cols = E, .T = T};
    }
    be->mul(s, &router_in, &(fwd_out){.w = &L->router, .y = logits}, 1);
    if (be->get(s, s->moe.logits, logits, hp->n_expert, T, err)) return -1;
    for (int t = 0; t < T; t++) route(s, L, t);
    group_by_expert(s, T);
    if (be->experts(s, &(fwd_experts){.L = L, .in = xn, .out = o, .T = T, .ready = ready,
                                       .weight_input = hp->expert_weight_input}, err))
        return -1;
    if (L->ffn_post_norm_2) be->norm(s, o, o, NULL, E, 1, L->ffn_post_norm_2, T, false);
    if (L->sh_gate.data) { /* the shared expert, on the same input */
        fwd_view a = rows_of(FB_T1, hp->n_ff_shexp);
        bool r = be->mul(s, &(fwd_in){.x = xn, .cols = E, .T = T, .ready = ready},
                         &(fwd_out){.w = &L->sh_gate, .up = &L->sh_up, .act = glu_kind[hp->arch->act], .y = a,
                                    .quant = int_weight(&L->sh_down)},
                         1);
        be->mul(s, &(fwd_in){.x = a, .cols = hp->n_ff_shexp, .T = T, .ready = r}, &(fwd_out){.w = &L->sh_down, .y = t2}, 1);
        if (L->sh_gate_inp)
            be->ew(s, &(fwd_ew){.kind = FWD_DOT_SIGMOID, .y = t2, .a = t2, .b = xn, .n = E, .groups = 1, .w = L->sh_gate_inp}, T);
        be->ew(s, &(fwd_ew){.kind = FWD_ADD, .y = o, .a = o, .b = t2, .n = E, .groups = 1}, T);
    }
    if (L->ffn_post_norm_1) { /* Gemma 4's dense FFN beside the experts */
        fwd_view a = rows_of(FB_FFN, L->n_ff);
        bool r = be->mul(s, &(fwd_in){.x = x, .cols = E, .T = T, .norm = L->ffn_norm},
                         &(fwd_out){.w = &L->ffn_gate, .up = &L->ffn_up, .act = glu_kind[hp->arch->act], .y = a,
                                    .quant = int_weight(&L->ffn_down)},
                         1);
        be->mul(s, &(fwd_in){.x = a, .cols = L->n_ff, .T = T, .ready = r}, &(fwd_out){.w = &L->ffn_down, .y = t2}, 1);
        be->norm(s, t2, t2, NULL, E, 1, L->ffn_post_norm_1, T, false);
        be->ew(s, &(fwd_ew){.kind = FWD_ADD, .y = o, .a = o, .b = t2, .n = E, .groups = 1}, T);
    }
    be->add(s, x, o, E, L->ffn_post_norm, hp->residual_scale, T);
    return 0;
}

/* Gemma 4's per-layer embedding, after the FFN: x += post_norm(proj(gelu(inp_gate x) * the
 * layer's own input)). */
static void per_layer_embedding(fwd_state *s, const fwd_backend *be, int il, int T) {
    const model_hparams *hp = &s->m->hp;
    const model_layer *L = &s->m->layers[il];
    int P = hp->n_embd_per_layer, E = hp->n_embd;
    fwd_view g = rows_of(FB_T1, P);
    be->mul(s, &(fwd_in){.x = whole(s, FB_X), .cols = E, .T = T}, &(fwd_out){.w = &L->pl_gate, .act_only = FWD_ACT_GELU_TANH, .y = g}, 1);
    be->ew(s, &(fwd_ew){.kind = FWD_MUL, .y = g, .a = g, .b = {FB_PL, il * P, s->width[FB_PL]}, .n = P, .groups = 1}, T);
    be->mul(s, &(fwd_in){.x = g, .cols = P, .T = T}, &(fwd_out){.w = &L->pl_proj, .y = whole(s, FB_O)}, 1);
    be->add(s, whole(s, FB_X), whole(s, FB_O), E, L->pl_post_norm, 1.0f, T);
}

/* Gemma 4's per-layer inputs of the micro-batch, from the embedded tokens: RMSNorm(proj x /
 * sqrt(n_embd)) per layer, plus the per-layer token table's rows, over sqrt(2). */
static int per_layer_inputs(fwd_state *s, const fwd_backend *be, int T, nc_err *err) {
    const model_hparams *hp = &s->m->hp;
    int P = hp->n_embd_per_layer, NL = hp->n_layer, E = hp->n_embd;
    fwd_view pl = whole(s, FB_PL), tok = rows_of(FB_T2, P * NL);
    be->mul(s, &(fwd_in){.x = whole(s, FB_X), .cols = E, .T = T},
            &(fwd_out){.w = &s->m->pl_model_proj, .y = pl, .scale = 1.0f / sqrtf((float)E)}, 1);
    be->norm(s, pl, pl, NULL, P, NL, s->m->pl_proj_norm, T, false);
    if (be->put(s, tok, s->pl_tok, P * NL, T, err)) return -1;
    be->ew(s, &(fwd_ew){.kind = FWD_ADD_SCALE, .y = pl, .a = pl, .b = tok, .n = P * NL, .groups = 1, .scale = 1.0f / sqrtf(2.0f)}, T);
    return 0;
}

/* ---- the pass ---------------------------------------------------------------------------- */

static int layer(fwd_state *s, const fwd_backend *be, int il, int T, nc_err *err) {
    const model_layer *L = &s->m->layers[il];
    switch (L->mixer) {
    case MIXER_ATTENTION: attention(s, be, il, T); break;
    case MIXER_MLA: latent_attention(s, be, il, T); break;
    case MIXER_DELTANET: deltanet(s, be, il, T); break;
    case MIXER_MAMBA2: mamba2(s, be, il, T); break;
    case MIXER_SHORTCONV: shortconv(s, be, il, T); break;
    case MIXER_NONE: break;
    }
    switch (L->ffn) {
    case FFN_GATED:
    case FFN_MLP: dense_ffn(s, be, il, T); break;
    case FFN_MOE:
        if (moe_ffn(s, be, il, T, err)) return -1;
        break;
    case FFN_NONE: break;
    }
    if (L->pl_gate.data) per_layer_embedding(s, be, il, T);
    if (L->out_scale != 1.0f)
        be->ew(s, &(fwd_ew){.kind = FWD_SCALE, .y = whole(s, FB_X), .a = whole(s, FB_X), .n = s->m->hp.n_embd, .groups = 1,
                            .scale = L->out_scale},
               T);
    return 0;
}

/* The final norm of the tokens that want logits, then the output projection, scaled (soft-capped
 * logits are scaled inside the cap, on the host). */
static void output(fwd_state *s, const fwd_backend *be) {
    const model_hparams *hp = &s->m->hp;
    if (s->n_out == 0) return;
    fwd_view xn = whole(s, FB_XN);
    bool ready = be->norm(s, xn, whole(s, FB_X), s->out_tokens, hp->n_embd, 1, s->m->output_norm, s->n_out,
                          int_weight(&s->m->output));
    be->mul(s, &(fwd_in){.x = xn, .cols = hp->n_embd, .T = s->n_out, .ready = ready},
            &(fwd_out){.w = &s->m->output, .y = whole(s, FB_LOGITS),
                       .scale = hp->final_softcap > 0 ? 1.0f : hp->logit_scale},
            1);
}

typedef struct stretch {
    const fwd_backend *be;
    int il0, il1, T;
    bool out;
} stretch;

static int run_stretch(fwd_state *s, void *arg, nc_err *err) {
    const stretch *r = arg;
    if (r->il0 == 0 && s->m->hp.n_embd_per_layer > 0 && per_layer_inputs(s, r->be, r->T, err)) return -1;
    for (int il = r->il0; il < r->il1; il++)
        if (layer(s, r->be, il, r->T, err)) return -1;
    if (r->out) output(s, r->be);
    return 0;
}

static void rope_tables(fwd_state *s, const nc_batch_entry *e, int T) {
    for (int k = 0; k < s->n_ropes; k++) {
        int half = s->m->hp.rope[k].n_rot / 2;
        for (int t = 0; t < T; t++)
            for (int i = 0; i < half; i++) {
                double a = (double)e[t].pos * s->inv_freq[k][i];
                s->rope_cos[k][t * half + i] = (float)(cos(a) * s->rope_mscale[k]);
                s->rope_sin[k][t * half + i] = (float)(sin(a) * s->rope_mscale[k]);
            }
    }
}

/* The attention temperature of each token (Llama 4, Mistral 3: Nakanishi's log scaling of the
 * queries over long contexts): 1 + scale ln(1 + floor((pos + offset) / floor)). */
static void temperatures(fwd_state *s, const nc_batch_entry *e, int T) {
    const model_hparams *hp = &s->m->hp;
    for (int t = 0; hp->temperature_scale > 0 && t < T; t++)
        s->temp[t] = (float)(1.0 + hp->temperature_scale *
                                       log(1.0 + floor((e[t].pos + hp->temperature_offset) / hp->temperature_floor)));
}

static void embed(fwd_state *s, const nc_batch_entry *e, int T) {
    const model_weight *w = &s->m->tok_embd;
    const model_hparams *hp = &s->m->hp;
    float scale = hp->embd_scale * (hp->arch->embd_scale_sqrt ? sqrtf((float)hp->n_embd) : 1.0f);
    for (int t = 0; t < T; t++) {
        float *x = s->x + (size_t)t * w->cols;
        quant_dequantize_row(w->type, (const char *)w->data + (size_t)e[t].token * w->row_bytes, x, w->cols);
        if (scale != 1.0f)
            for (int i = 0; i < w->cols; i++) x[i] *= scale;
    }
    const model_weight *pl = &s->m->pl_embd; /* Gemma 4's per-layer token table, times sqrt(its width) */
    for (int t = 0; pl->data && t < T; t++) {
        float *r = s->pl_tok + (size_t)t * pl->cols;
        quant_dequantize_row(pl->type, (const char *)pl->data + (size_t)e[t].token * pl->row_bytes, r, pl->cols);
        for (int i = 0; i < pl->cols; i++) r[i] *= sqrtf((float)hp->n_embd_per_layer);
    }
}

/* One micro-batch: embedded, its layers on their backends (the residual stream crossing over
 * once where they change), the logits of the tokens that want them into their rows. */
static int micro_batch(fwd_state *s, const nc_batch_entry *e, int T, int first_entry, nc_err *err) {
    const model_hparams *hp = &s->m->hp;
    s->entries = e;
    s->n_out = 0;
    for (int t = 0; t < T; t++)
        if (e[t].logits) s->out_tokens[s->n_out++] = t;
    s->out_logits = s->n_out ? s->logits + (size_t)s->logit_row[first_entry + s->out_tokens[0]] * hp->n_vocab : NULL;
    embed(s, e, T);
    rope_tables(s, e, T);
    temperatures(s, e, T);
    if (s->split > 0) {
        stretch r = {.be = s->first, .il0 = 0, .il1 = s->split, .T = T, .out = s->last == s->first};
        if (s->first->begin(s, e, T, err) || s->first->segment(s, T, s->n_out, run_stretch, &r, err)) return -1;
        if (s->last != s->first && s->first->get(s, s->x, whole(s, FB_X), hp->n_embd, T, err)) return -1;
    }
    if (s->last != s->first || s->split == 0) {
        stretch r = {.be = s->last, .il0 = s->split, .il1 = hp->n_layer, .T = T, .out = true};
        if (s->last->begin(s, e, T, err) || s->last->segment(s, T, s->n_out, run_stretch, &r, err)) return -1;
    }
    for (int t = 0; kv_recurrent(&s->kv) && t < T; t++) /* the recurrent state has absorbed the micro-batch */
        s->kv.state_pos[e[t].seq] = s->cells[t] + 1;
    if (s->n_out == 0) return 0;
    int row0 = s->logit_row[first_entry + s->out_tokens[0]], V = hp->n_vocab;
    float *logits = s->out_logits;
    if (s->last->get(s, s->hidden + (size_t)row0 * hp->n_embd, whole(s, FB_XN), hp->n_embd, s->n_out, err) ||
        s->last->get(s, logits, whole(s, FB_LOGITS), V, s->n_out, err))
        return -1;
    for (int i = 0; hp->final_softcap > 0 && i < s->n_out; i++) /* Gemma 2: cap * tanh(logit * scale / cap) */
        kernels_softcap(logits + (size_t)i * V, V, hp->logit_scale, hp->final_softcap);
    return 0;
}

static int prepare_outputs(fwd_state *s, const nc_batch_entry *batch, int n, nc_err *err) {
    if (n > s->logit_row_cap) {
        int32_t *rows = realloc(s->logit_row, (size_t)n * sizeof *rows);
        if (!rows) return nc_fail(err, "out of memory for a batch of %d entries", n);
        s->logit_row = rows;
        s->logit_row_cap = n;
    }
    int n_out = 0;
    for (int i = 0; i < n; i++) s->logit_row[i] = batch[i].logits ? n_out++ : -1;
    if (n_out > s->logits_cap) {
        float *l = realloc(s->logits, (size_t)n_out * (size_t)s->m->hp.n_vocab * sizeof(float));
        if (!l) return nc_fail(err, "out of memory for logits of %d entries", n_out);
        s->logits = l;
        float *h = realloc(s->hidden, (size_t)n_out * (size_t)s->m->hp.n_embd * sizeof(float));
        if (!h) return nc_fail(err, "out of memory for the hidden states of %d entries", n_out);
        s->hidden = h;
        s->logits_cap = n_out;
    }
    s->n_entries = n;
    return 0;
}

/* Check every entry and claim its cache cell before computing anything, so a bad batch leaves
 * the cache as it was. */
static int claim_cells(fwd_state *s, const nc_batch_entry *batch, int n, int32_t *cells, nc_err *err) {
    int32_t *saved = malloc((size_t)kv_n_seq(&s->kv) * sizeof *saved);
    if (!saved) return nc_fail(err, "out of memory");
    for (int32_t q = 0; q < kv_n_seq(&s->kv); q++) saved[q] = kv_seq_len(&s->kv, q);
    for (int i = 0; i < n; i++) {
        int32_t tok = batch[i].token;
        if (tok < 0 || tok >= s->m->hp.n_vocab) {
            nc_fail(err, "batch entry %d: token id %d is outside the vocabulary 0..%d", i, tok, s->m->hp.n_vocab - 1);
            goto fail;
        }
        cells[i] = kv_append(&s->kv, batch[i].seq, batch[i].pos, tok, err);
        if (cells[i] < 0 || kv_window_check(&s->kv, batch[i].seq, batch[i].pos, s->m->hp.swa_window, err)) {
            nc_fail_prefix(err, "batch entry %d", i);
            goto fail;
        }
    }
    free(saved);
    return 0;
fail:
    for (int32_t q = 0; q < kv_n_seq(&s->kv); q++) kv_seq_truncate(&s->kv, q, saved[q]);
    free(saved);
    return -1;
}

/* The recurrent state's checkpoints of a batch (kv_state.c): for each sequence it adds several
 * tokens to, one before them (a rejected speculation goes back there) and one after them, or,
 * where only its last entry wants logits (a prompt's prefill), one before that last entry: the
 * state a later request of the same prompt takes, since it computes its last token again for
 * the logits. `last[seq]`: the index of that entry in the batch, or -1. */
typedef struct checkpoints {
    int32_t *count, *last;
    bool *prefill;
} checkpoints;

static int plan_checkpoints(const fwd_state *s, const nc_batch_entry *batch, int n, checkpoints *c) {
    int32_t N = kv_n_seq(&s->kv);
    c->count = calloc((size_t)N, sizeof *c->count);
    c->last = malloc((size_t)N * sizeof *c->last);
    c->prefill = calloc((size_t)N, sizeof *c->prefill);
    if (!c->count || !c->last || !c->prefill) return -1;
    for (int32_t q = 0; q < N; q++) c->last[q] = -1;
    int32_t *logits = calloc((size_t)N, sizeof *logits);
    if (!logits) return -1;
    for (int i = 0; i < n; i++) {
        int32_t q = batch[i].seq;
        if (q < 0 || q >= N) continue;
        c->count[q]++;
        c->last[q] = i;
        logits[q] += batch[i].logits;
    }
    for (int32_t q = 0; q < N; q++) c->prefill[q] = c->count[q] > 1 && logits[q] == 1 && batch[c->last[q]].logits;
    free(logits);
    return 0;
}

static void free_checkpoints(checkpoints *c) {
    free(c->count);
    free(c->last);
    free(c->prefill);
}

/* How many entries the micro-batch starting at `start` takes: up to n_batch, and with recurrent
 * state up to the first entry that completes a block of a sequence whose cells hold positions
 * 0.. (the state there is checkpointed for the prefix cache), and not past the entry before a
 * prefill's last (checkpointed there). */
static int micro_len(const fwd_state *s, const nc_batch_entry *batch, int n, int start, const checkpoints *c) {
    int T = n - start < s->n_batch ? n - start : s->n_batch;
    for (int i = start; kv_recurrent(&s->kv) && i < start + T; i++) {
        int32_t q = batch[i].seq;
        if (i + 1 < start + T && c->prefill[q] && c->last[q] == i + 1) return i - start + 1;
        if ((batch[i].pos + 1) % KV_BLOCK == 0 && kv_positions(&s->kv, q)[batch[i].pos] == batch[i].pos) return i - start + 1;
    }
    return T;
}

/* The pass itself; `replay`: tokens the cache held already, computed again for the recurrent
 * state (the outputs of the last batch stay as they were). */
static int run(fwd_state *s, const nc_batch_entry *batch, int n, bool replay, nc_err *err) {
    if (!replay) s->n_entries = 0;
    if (n <= 0) return nc_fail(err, "empty batch");
    bool recurrent = kv_recurrent(&s->kv);
    checkpoints ck = {0};
    int32_t *cells = malloc((size_t)n * sizeof *cells);
    if (!cells || (recurrent && plan_checkpoints(s, batch, n, &ck))) {
        free(cells);
        free_checkpoints(&ck);
        return nc_fail(err, "out of memory for a batch of %d entries", n);
    }
    for (int32_t q = 0; recurrent && q < kv_n_seq(&s->kv); q++)
        if (ck.count[q] > 1) kv_state_checkpoint(&s->kv, q, false);
    if ((!replay && prepare_outputs(s, batch, n, err)) || claim_cells(s, batch, n, cells, err)) {
        if (!replay) s->n_entries = 0;
        free(cells);
        free_checkpoints(&ck);
        return -1;
    }
    for (int start = 0, T; start < n; start += T) {
        T = micro_len(s, batch, n, start, &ck);
        const nc_batch_entry *e = batch + start;
        memcpy(s->cells, cells + start, (size_t)T * sizeof *cells);
        for (int t = 0; t < T; t++) kv_ring_claim(&s->kv, e[t].seq, e[t].pos);
        if (micro_batch(s, e, T, start, err)) { /* the cells claimed hold nothing usable */
            for (int i = n - 1; i >= 0; i--) kv_seq_truncate(&s->kv, batch[i].seq, cells[i]);
            if (!replay) s->n_entries = 0;
            free(cells);
            free_checkpoints(&ck);
            return -1;
        }
        for (int t = 0; recurrent && t < T; t++) {
            int32_t q = e[t].seq;
            if ((e[t].pos + 1) % KV_BLOCK == 0) kv_state_share(&s->kv, q); /* a block of a prefix: for the prefix cache */
            if (ck.prefill[q] && ck.last[q] == start + t + 1) kv_state_checkpoint(&s->kv, q, true);
        }
    }
    kv_commit(&s->kv);
    for (int32_t q = 0; recurrent && q < kv_n_seq(&s->kv); q++)
        if (ck.count[q] > 1 && !ck.prefill[q]) kv_state_checkpoint(&s->kv, q, true);
    free(cells);
    free_checkpoints(&ck);
    for (int32_t q = 0; q < kv_n_seq(&s->kv); q++)
        if (kv_apply_budget(&s->kv, q, err)) return nc_fail_prefix(err, "after the batch, sequence %d", q);
    return 0;
}

int fwd_run(fwd_state *s, const nc_batch_entry *batch, int n, nc_err *err) { return run(s, batch, n, false, err); }

/* The tokens and positions of entries [from, to) of a list, computed again into seq. */
static int replay(fwd_state *s, int32_t seq, const int32_t *tok, const int32_t *pos, int32_t n, nc_err *err) {
    if (n <= 0) return 0;
    nc_batch_entry *b = malloc((size_t)n * sizeof *b);
    if (!b) return nc_fail(err, "out of memory computing %d tokens again", n);
    for (int32_t i = 0; i < n; i++) b[i] = (nc_batch_entry){tok[i], pos[i], seq, false};
    int rc = run(s, b, n, true, err);
    free(b);
    return rc;
}

int fwd_seq_truncate(fwd_state *s, int32_t seq, int32_t n, nc_err *err) {
    kv_cache *kv = &s->kv;
    if (seq < 0 || seq >= kv_n_seq(kv) || n >= kv_seq_len(kv, seq)) return 0;
    if (n < 0) n = 0;
    int32_t from = kv_state_restore_point(kv, seq, n), k = n - from;
    int32_t *keep = malloc(2 * ((size_t)k + 1) * sizeof *keep);
    if (!keep) {
        kv_seq_truncate(kv, seq, 0);
        return nc_fail(err, "out of memory: sequence %d cleared", seq);
    }
    memcpy(keep, kv_tokens(kv, seq) + from, (size_t)k * sizeof *keep);
    memcpy(keep + k, kv_positions(kv, seq) + from, (size_t)k * sizeof *keep);
    kv_seq_truncate(kv, seq, n); /* back to `from`, where the recurrent state is */
    int rc = replay(s, seq, keep, keep + k, k, err);
    free(keep);
    if (rc) kv_seq_truncate(kv, seq, 0);
    return rc;
}

int fwd_seq_load(fwd_state *s, int32_t seq, const kv_file_view *v, int32_t n, const char *name, nc_err *err) {
    int32_t m = kv_seq_load(&s->kv, seq, v, n, name, err);
    if (m < 0) return -1;
    if (fwd_cache_sync(s, seq, m, false, err) || replay(s, seq, v->tokens + m, v->pos + m, n - m, err)) {
        kv_seq_truncate(&s->kv, seq, 0); /* the backends hold no usable cells */
        return -1;
    }
    return 0;
}

void fwd_rope_head(float *v, int n_rot, bool neox, const float *cs, const float *sn) {
    int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        float x0 = v[a], x1 = v[b];
        v[a] = x0 * cs[i] - x1 * sn[i];
        v[b] = x0 * sn[i] + x1 * cs[i];
    }
}

/* Keys carry their position's rotation (RoPE, Su et al. 2021): a rotation by angle p * theta_i
 * of each pair. Moving a key from position p to p' is one more rotation by (p' - p) * theta_i,
 * since rotations compose; the YaRN magnitude scale was applied once and stays. */
int fwd_seq_keep(fwd_state *s, int32_t seq, const int32_t *cells, int32_t n, const int32_t *new_pos, nc_err *err) {
    const model_hparams *hp = &s->m->hp;
    int half = (hp->rope[0].n_rot > hp->rope[1].n_rot ? hp->rope[0].n_rot : hp->rope[1].n_rot) / 2, kd = 0;
    for (int il = 0; il < hp->n_layer; il++) kd = s->kv.layer[il].kv_dim > kd ? s->kv.layer[il].kv_dim : kd;
    int32_t *old = malloc(((size_t)n + 1) * sizeof *old);
    float *cs = malloc(((size_t)n * (size_t)half * 2 * (size_t)s->n_ropes + 1) * sizeof *cs);
    float *key = malloc((size_t)kd * sizeof *key);
    if (!old || !cs || !key) {
        free(old);
        free(cs);
        free(key);
        return nc_fail(err, "out of memory re-rotating %d cached keys", n);
    }
    int rc = kv_seq_keep(&s->kv, seq, cells, n, new_pos, old, err);
    for (int k = 0; rc == 0 && k < s->n_ropes; k++) /* cos, sin of each cell's turn (a table's first n_rot / 2) */
        for (int32_t c = 0; c < n; c++)
            for (int i = 0; i < hp->rope[k].n_rot / 2; i++) {
                double a = (double)(new_pos[c] - old[c]) * s->inv_freq[k][i];
                cs[(((size_t)k * n + c) * 2) * half + i] = (float)cos(a);
                cs[(((size_t)k * n + c) * 2 + 1) * half + i] = (float)sin(a);
            }
    /* the layers a backend keeps its own cache of are turned there, the others here */
    if (rc == 0 && s->last->turn_keys) rc = s->last->turn_keys(s, seq, n, new_pos, old, cs, err);
    for (int il = 0; rc == 0 && il < (s->last->turn_keys ? s->split : hp->n_layer); il++) {
        const model_layer *L = &s->m->layers[il];
        int k = fwd_rope_of(s, L);
        if (L->mixer != MIXER_ATTENTION || L->kv_layer != il) continue;
        for (int32_t c = 0; k >= 0 && c < n; c++) {
            if (new_pos[c] == old[c] || !kv_holds(&s->kv, il, seq, c)) continue;
            const float *cosv = cs + (((size_t)k * n + c) * 2) * half, *sinv = cosv + half;
            kv_read_k(&s->kv, il, seq, c, key);
            for (int h = 0; h < L->n_head_kv; h++) fwd_rope_head(key + h * L->head_dim, L->n_rot, hp->rope_neox, cosv, sinv);
            kv_store(&s->kv, il, seq, c, new_pos[c], 0, L->n_head_kv * L->head_dim, key, NULL);
        }
    }
    free(old);
    free(cs);
    free(key);
    return rc;
}

int fwd_cache_sync(fwd_state *s, int32_t seq, int32_t n, bool to_host, nc_err *err) {
    return s->last->cache_sync ? s->last->cache_sync(s, seq, n, to_host, err) : 0;
}

const float *fwd_logits(const fwd_state *s, int i) {
    if (i < 0 || i >= s->n_entries || s->logit_row[i] < 0) return NULL;
    return s->logits + (size_t)s->logit_row[i] * s->m->hp.n_vocab;
}

const float *fwd_hidden(const fwd_state *s, int i) {
    if (i < 0 || i >= s->n_entries || s->logit_row[i] < 0) return NULL;
    return s->hidden + (size_t)s->logit_row[i] * s->m->hp.n_embd;
}

const char *fwd_describe(const fwd_state *s, char *buf, size_t n) {
    if (s->last == &fwd_cpu) return "cpu";
    return s->last->describe(s, buf, n);
}

/* ---- set-up ---------------------------------------------------------------------------------- */

/* Sliding layers keep a ring of their window plus a micro-batch, rounded to whole spans, when that
 * is smaller than the context (and swa_full does not ask for every position); 0 when they keep the
 * whole context. */
static int32_t ring_cells(const model *m, int32_t n_ctx, int32_t n_batch, bool swa_full) {
    int64_t r = ((int64_t)m->hp.swa_window + n_batch - 1 + KV_BLOCK - 1) / KV_BLOCK * KV_BLOCK;
    return m->hp.swa_window > 0 && r < n_ctx && !swa_full ? (int32_t)r : 0;
}

/* Floats of recurrent state a layer keeps per sequence: its convolution's last K - 1 inputs, and
 * DeltaNet's matrix per value head or Mamba2's per head. */
static int32_t state_floats(const model *m, const model_layer *L) {
    const model_hparams *hp = &m->hp;
    int32_t conv = (hp->ssm_conv - 1) * L->ssm.channels;
    switch (L->mixer) {
    case MIXER_DELTANET: return conv + hp->ssm_inner * hp->ssm_state;
    case MIXER_MAMBA2: return conv + hp->ssm_inner * hp->ssm_state;
    case MIXER_SHORTCONV: return conv;
    default: return 0;
    }
}

static int init_cache(fwd_state *s, int32_t n_ctx, int32_t n_seq, int64_t n_cells, uint32_t type_k, uint32_t type_v,
                      bool swa_full, nc_err *err) {
    const model_hparams *hp = &s->m->hp;
    kv_layer_config *layers = calloc((uint32_t)hp->n_layer, sizeof *layers); /* 1..4096 (the loader's check) */
    if (!layers) return nc_fail(err, "out of memory");
    for (int il = 0; il < hp->n_layer; il++) {
        const model_layer *L = &s->m->layers[il];
        kv_layer_config *c = &layers[il];
        if (L->mixer == MIXER_ATTENTION && L->kv_layer == il)
            *c = (kv_layer_config){L->n_head_kv, L->head_dim, L->head_dim_v, .ring = L->sliding};
        else if (L->mixer == MIXER_MLA)
            *c = (kv_layer_config){1, L->head_dim, L->head_dim_v, .v_in_k = true};
        else
            c->state = state_floats(s->m, L);
    }
    kv_config cfg = {.n_layer = hp->n_layer, .n_seq = n_seq, .n_ctx = n_ctx, .layers = layers, .type_k = type_k,
                     .type_v = type_v, .n_cells = n_cells, .ring = ring_cells(s->m, n_ctx, s->n_batch, swa_full)};
    int r = kv_init(&s->kv, &cfg, err);
    free(layers);
    return r;
}

static bool same_rope(const model_rope *a, const model_rope *b) { return memcmp(a, b, sizeof *a) == 0; }

static void need(fwd_state *s, fwd_buf b, int32_t width) {
    if (width > s->width[b]) s->width[b] = width;
}

/* The widths of the activation buffers: the most any layer writes of each. */
static void plan_widths(fwd_state *s) {
    const model_hparams *hp = &s->m->hp;
    int32_t E = hp->n_embd;
    need(s, FB_X, E), need(s, FB_XN, E), need(s, FB_O, E);
    need(s, FB_ROUTER, hp->n_expert);
    need(s, FB_LOGITS, hp->n_vocab);
    need(s, FB_FFN, hp->n_ff_exp);
    if (hp->n_embd_per_layer) need(s, FB_PL, hp->n_embd_per_layer * hp->n_layer), need(s, FB_T2, hp->n_embd_per_layer * hp->n_layer);
    for (int il = 0; il < hp->n_layer; il++) {
        const model_layer *L = &s->m->layers[il];
        int H = L->n_head, hd = L->head_dim, C = L->ssm.channels;
        switch (L->mixer) {
        case MIXER_ATTENTION:
            need(s, FB_Q, H * hd * (L->q_gate ? 2 : 1)), need(s, FB_ATTN, H * hd);
            need(s, FB_K, L->n_head_kv * hd), need(s, FB_V, L->n_head_kv * hd);
            break;
        case MIXER_MLA:
            need(s, FB_Q, H * (hp->mla_nope + hp->n_rot)), need(s, FB_K, hd), need(s, FB_T1, hp->mla_q_lora);
            need(s, FB_T1, H * hd), need(s, FB_T2, H * hp->mla_kv_lora), need(s, FB_ATTN, H * hp->mla_v);
            break;
        case MIXER_DELTANET:
            need(s, FB_T1, C), need(s, FB_T2, C), need(s, FB_Q, hp->ssm_inner), need(s, FB_ATTN, hp->ssm_inner);
            need(s, FB_K, hp->ssm_heads), need(s, FB_V, hp->ssm_heads);
            break;
        case MIXER_MAMBA2:
            need(s, FB_T1, 2 * hp->ssm_inner + 2 * hp->ssm_groups * hp->ssm_state + hp->ssm_heads);
            need(s, FB_T2, C), need(s, FB_ATTN, hp->ssm_inner);
            break;
        case MIXER_SHORTCONV: need(s, FB_T1, 3 * E), need(s, FB_T2, E), need(s, FB_Q, E), need(s, FB_ATTN, E); break;
        case MIXER_NONE: break;
        }
        need(s, FB_FFN, L->n_ff);
        if (L->ffn == FFN_MOE) need(s, FB_T1, hp->n_ff_shexp > E ? hp->n_ff_shexp : E), need(s, FB_T2, E);
        if (L->pl_gate.data) need(s, FB_T1, hp->n_embd_per_layer);
    }
}

static int alloc_host(fwd_state *s) {
    const model_hparams *hp = &s->m->hp;
    size_t B = (size_t)s->n_batch;
    s->x = aligned_alloc(64, (B * (size_t)hp->n_embd * sizeof(float) + 63) / 64 * 64);
    s->cells = malloc(B * sizeof *s->cells);
    s->out_tokens = malloc(B * sizeof *s->out_tokens);
    s->temp = malloc(B * sizeof *s->temp);
    bool ok = s->x && s->cells && s->out_tokens && s->temp;
    if (hp->n_embd_per_layer) ok = ok && (s->pl_tok = malloc(B * (size_t)hp->n_embd_per_layer * hp->n_layer * sizeof(float)));
    for (int k = 0; k < s->n_ropes; k++) {
        size_t half = (size_t)hp->rope[k].n_rot / 2;
        s->rope_cos[k] = malloc((B * half + 1) * sizeof(float));
        s->rope_sin[k] = malloc((B * half + 1) * sizeof(float));
        s->inv_freq[k] = malloc((half + 1) * sizeof(double));
        ok = ok && s->rope_cos[k] && s->rope_sin[k] && s->inv_freq[k];
    }
    if (hp->n_expert > 0) {
        size_t K = (size_t)hp->n_expert_used, N = (size_t)hp->n_expert;
        fwd_moe *mo = &s->moe;
        mo->expert = malloc(B * K * sizeof *mo->expert);
        mo->weight = malloc(B * K * sizeof *mo->weight);
        mo->logits = malloc(B * N * sizeof *mo->logits);
        mo->start = malloc((N + 1) * sizeof *mo->start);
        mo->row = malloc(B * K * sizeof *mo->row);
        mo->token = malloc(B * K * sizeof *mo->token);
        ok = ok && mo->expert && mo->weight && mo->logits && mo->start && mo->row && mo->token;
    }
    return ok ? 0 : -1;
}

/* Whether a backend has every operation the layers il0..il1-1 (and the output) need: the first
 * it lacks is refused, naming it and the layer. */
static int check_backend(const fwd_state *s, const fwd_backend *be, int il0, int il1, nc_err *err) {
    static const char *const mixer_name[] = {[MIXER_ATTENTION] = "attention", [MIXER_NONE] = "an FFN alone",
                                             [MIXER_MLA] = "latent attention", [MIXER_DELTANET] = "a gated DeltaNet",
                                             [MIXER_MAMBA2] = "Mamba2", [MIXER_SHORTCONV] = "a short convolution"};
    if (s->m->n_lora && !be->lora && (il0 < il1 || be == s->last))
        return nc_fail(err, "the %s backend cannot apply LoRA adapters (run on the CPU)", be->name);
    for (int il = il0; il < il1; il++) {
        const model_layer *L = &s->m->layers[il];
        struct { bool needed; const void *op; const char *name; } ops[] = {
            {L->mixer == MIXER_DELTANET || L->mixer == MIXER_MAMBA2 || L->mixer == MIXER_SHORTCONV, (const void *)be->conv, "conv"},
            {L->mixer == MIXER_DELTANET || L->mixer == MIXER_MAMBA2, (const void *)be->scan, "scan"},
            {L->mixer == MIXER_MLA, (const void *)be->mul_heads, "mul_heads"},
            {L->mixer > MIXER_NONE || L->q_gate || L->sh_gate_inp || L->sh_gate.data || L->pl_gate.data || L->out_scale != 1 ||
                 L->router_scale || s->m->hp.n_embd_per_layer,
             (const void *)be->ew, "ew"},
        };
        for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
            if (ops[i].needed && !ops[i].op)
                return nc_fail(err, "the %s backend cannot run layer %d (%s): it lacks the operation '%s' (run on the CPU)",
                               be->name, il, mixer_name[L->mixer], ops[i].name);
    }
    return 0;
}

int fwd_init(fwd_state *s, const model *m, int32_t n_ctx, int32_t n_seq, int32_t n_threads, int32_t n_batch,
             int64_t n_cells, uint32_t type_k, uint32_t type_v, bool swa_full, bool fast, int32_t n_gpu, nc_err *err) {
    memset(s, 0, sizeof *s);
    const model_hparams *hp = &m->hp;
    s->m = m;
    s->n_batch = n_batch;
    s->n_threads = n_threads;
    s->n_ctx = n_ctx;
    s->fast = fast;
    s->first = s->last = &fwd_cpu;
    s->split = hp->n_layer;
    if (n_gpu > 0) {
        if (!&fwd_cuda)
            return nc_fail(err, "this nucleus was built without the CUDA backend (build it with `make CUDA=1`)");
        s->last = &fwd_cuda;
        s->split = n_gpu >= hp->n_layer ? 0 : hp->n_layer - n_gpu;
        if (s->split == 0) s->first = s->last;
    }
    if (check_backend(s, s->first, 0, s->split, err) || check_backend(s, s->last, s->split, hp->n_layer, err)) return -1;
    kernels_init();
    plan_widths(s);
    /* the GPU pass reads sliding layers' windows out of the full cache, not a ring */
    if (init_cache(s, n_ctx, n_seq, n_cells, type_k, type_v, swa_full || n_gpu > 0, err)) return -1;
    s->n_ropes = same_rope(&hp->rope[0], &hp->rope[1]) ? 1 : 2;
    if (alloc_host(s)) {
        fwd_free(s);
        return nc_fail(err, "out of memory for the forward pass (batch %d, context %d)", n_batch, n_ctx);
    }
    for (int k = 0; k < s->n_ropes; k++)
        s->rope_mscale[k] = (float)model_rope_freqs(&hp->rope[k], hp->rope[k].n_rot, n_ctx, s->inv_freq[k]);
    /* the first backend runs layers 0..split-1 (none when the GPU takes every layer), the last the rest */
    if ((s->split > 0 && s->first->init(s, 0, err)) ||
        ((s->last != s->first || s->split == 0) && s->last->init(s, s->split, err))) {
        fwd_free(s);
        return -1;
    }
    return 0;
}

void fwd_free(fwd_state *s) {
    if (s->last && s->last != s->first) s->last->free(s);
    if (s->first) s->first->free(s);
    kv_free(&s->kv);
    free(s->x);
    free(s->cells);
    free(s->out_tokens);
    free(s->temp);
    free(s->pl_tok);
    for (int k = 0; k < FWD_MAX_ROPES; k++) {
        free(s->rope_cos[k]);
        free(s->rope_sin[k]);
        free(s->inv_freq[k]);
    }
    fwd_moe *mo = &s->moe;
    free(mo->expert);
    free(mo->weight);
    free(mo->logits);
    free(mo->start);
    free(mo->row);
    free(mo->token);
    free(s->logits);
    free(s->hidden);
    free(s->logit_row);
    memset(s, 0, sizeof *s);
}
