/* The CPU backend's element-wise operations (backend.h's ew), a token a chunk. */
#include <math.h>

#include "forward/cpu.h"

static float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

typedef struct ew_job {
    fwd_state *s;
    const fwd_ew *e;
} ew_job;

static void ew_chunk(void *arg, int t, int ith) {
    const ew_job *j = arg;
    const fwd_ew *e = j->e;
    int n = e->n, ys = e->y_stride ? e->y_stride : n, as = e->a_stride ? e->a_stride : n, bs = e->b_stride ? e->b_stride : n;
    float *Y = cpu_row(j->s, e->y, t);
    const float *A = cpu_row(j->s, e->a, t), *B = e->kind == FWD_SCALE ? NULL : cpu_row(j->s, e->b, t);
    for (int g = 0; g < e->groups; g++) {
        float *y = Y + (size_t)g * ys;
        const float *a = A + (size_t)g * as, *b = B ? B + (size_t)g * bs : NULL;
        switch (e->kind) {
        case FWD_MUL:
            for (int i = 0; i < n; i++) y[i] = a[i] * b[i];
            break;
        case FWD_SIGMOID_MUL:
            for (int i = 0; i < n; i++) y[i] = a[i] * sigmoid(b[i]);
            break;
        case FWD_SILU_MUL:
            for (int i = 0; i < n; i++) y[i] = a[i] * (b[i] * sigmoid(b[i]));
            break;
        case FWD_SCALE:
            for (int i = 0; i < n; i++) y[i] = a[i] * e->scale;
            break;
        case FWD_ADD_SCALE:
            for (int i = 0; i < n; i++) y[i] = (a[i] + b[i]) * e->scale;
            break;
        case FWD_ADD:
            for (int i = 0; i < n; i++) y[i] = a[i] + b[i];
            break;
        case FWD_DOT_SIGMOID: {
            float d = 0;
            for (int i = 0; i < n; i++) d += b[i] * e->w[i];
            float gate = sigmoid(d);
            for (int i = 0; i < n; i++) y[i] = a[i] * gate;
            break;
        }
        }
    }
}

void cpu_ew(fwd_state *s, const fwd_ew *e, int T) {
    ew_job j = {s, e};
    pool_run_chunks(cpu_of(s)->pool, &(pool_task){.chunk = ew_chunk, .arg = &j, .n_chunks = T});
}
