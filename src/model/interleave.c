/* model_interleave: the weights a kernel set multiplies faster interleaved (kernels.h,
 * KERNELS_ILV) get a copy in that layout, made once at load as llama.cpp repacks its weights for
 * its CPU kernels. The stored rows stay where the file mapped them (`data`), read only by the
 * embedding lookup and the fingerprint, so their pages are handed back to the page cache. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "model/model.h"
#include "tensor/quant.h"

/* All copies live in one allocation aligned to a transparent huge page (2 MB) and advised to use
 * them where the kernel allows: a fault per 2 MB instead of per 4 KB when first written, which
 * on these VMs took most of the copy's time (Llama-2-7B Q4_0: 5.6 -> 1.5-2 s). */
#define HUGE ((size_t)2 << 20)
#define MAX_THREADS 8

typedef struct ilv_job {
    model_weight **w;              /* the weights to copy, in order */
    size_t *at;                    /* each one's offset in the allocation */
    int n;
    uint8_t *dst;
    bool drop;                     /* drop the file's pages after copying */
    atomic_int next;
} ilv_job;

/* One weight: rows in tiles of KERNELS_ILV_ROWS, stored whole (not a strided view), of a type
 * the active set multiplies faster interleaved. */
static bool wanted(const model_weight *w) {
    return w->data && !w->transposed && !w->ilv && kernels_ilv_type(w->type) && w->rows % KERNELS_ILV_ROWS == 0 &&
           w->row_bytes == quant_row_bytes(w->type, w->cols);
}

/* Release the pages wholly inside [p, p + n) of the file mapping: a private read-only mapping of
 * a file, so a later read of them maps the file's page again (MADV_DONTNEED loses nothing). */
static void drop_pages(const void *p, size_t n) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)p + page - 1) / page * page, b = ((uintptr_t)p + n) / page * page;
    if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
}

/* A thread takes weights in turn until none is left (first writing a page zeroes it, so the
 * copy is as much the kernel's work as ours: both run on every core). */
static void *copy_weights(void *arg) {
    ilv_job *j = arg;
    for (int i; (i = atomic_fetch_add(&j->next, 1)) < j->n;) {
        model_weight *w = j->w[i];
        kernels_interleave(w->type, w->data, j->dst + j->at[i], w->rows, w->cols);
        if (j->drop) drop_pages(w->data, w->row_bytes * (size_t)w->rows);
    }
    return NULL;
}

/* Every weight model_interleave considers, in a fixed order: out may be NULL (count only). */
static int list_weights(model *m, model_weight **out) {
    const model_hparams *hp = &m->hp;
    int n = 0;
    if (wanted(&m->output)) {
        if (out) out[n] = &m->output;
        n++;
    }
    for (int il = 0; il < hp->n_layer; il++) {
        model_layer *L = &m->layers[il];
        const model_weight *ws[MODEL_LAYER_WEIGHTS + 2 * L->n_head];
        int k = model_layer_weights(L, ws);
        for (int i = 0; i < k; i++)
            if (wanted(ws[i])) {
                if (out) out[n] = (model_weight *)ws[i]; /* the model's own: interleaving writes its ilv */
                n++;
            }
        model_weight *ex[] = {L->exp_gate, L->exp_up, L->exp_gate_up, L->exp_down};
        for (size_t i = 0; i < sizeof ex / sizeof *ex; i++)
            for (int e = 0; ex[i] && e < hp->n_expert; e++)
                if (wanted(&ex[i][e])) {
                    if (out) out[n] = &ex[i][e];
                    n++;
                }
    }
    return n;
}

uint64_t model_interleave(model *m) {
    const char *env = getenv("NUCLEUS_REPACK");
    if (env && !strcmp(env, "0")) return 0;
    int n = list_weights(m, NULL);
    if (n == 0) return 0;
    ilv_job j = {.n = n, .drop = m->file != NULL};
    j.w = malloc((size_t)n * sizeof *j.w);
    j.at = malloc((size_t)n * sizeof *j.at);
    size_t total = 0;
    if (j.w && j.at) {
        list_weights(m, j.w);
        for (int i = 0; i < n; i++) {
            j.at[i] = total;
            total += (j.w[i]->row_bytes * (size_t)j.w[i]->rows + 63) / 64 * 64;
        }
        total = (total + HUGE - 1) / HUGE * HUGE;
        j.dst = aligned_alloc(HUGE, total);
    }
    void **list = j.dst ? realloc(m->owned, (size_t)(m->n_owned + 1) * sizeof *list) : NULL;
    if (!list) { /* no memory for the copies: the weights stay as stored */
        free(j.dst);
        free(j.w);
        free(j.at);
        return 0;
    }
    m->owned = list;
    list[m->n_owned++] = j.dst;
    madvise(j.dst, total, MADV_HUGEPAGE);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = cores < 1 ? 1 : cores > MAX_THREADS ? MAX_THREADS : (int)cores, started = 0;
    pthread_t th[MAX_THREADS];
    atomic_init(&j.next, 0);
    for (int t = 1; t < nt; t++) started += pthread_create(&th[started], NULL, copy_weights, &j) == 0;
    copy_weights(&j);
    for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
    for (int i = 0; i < n; i++) j.w[i]->ilv = j.dst + j.at[i];
    free(j.w);
    free(j.at);
    return total;
}
