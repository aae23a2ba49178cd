/* model_interleave: the weights a kernel set multiplies faster interleaved (kernels.h,
 * KERNELS_ILV) get a copy in that layout, made once at load as llama.cpp repacks its weights for
 * its CPU kernels. The stored rows stay where the file mapped them (`data`), read only by the
 * embedding lookup and the fingerprint, so their pages are handed back to the page cache. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "model/model.h"
#include "tensor/quant.h"

/* Release the pages wholly inside [p, p + n) of the file mapping: a private read-only mapping of
 * a file, so a later read of them maps the file's page again (MADV_DONTNEED loses nothing). */
static void drop_pages(const void *p, size_t n) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)p + page - 1) / page * page, b = ((uintptr_t)p + n) / page * page;
    if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
}

/* One weight: rows in tiles of KERNELS_ILV_ROWS, stored whole (not a strided view), of a type
 * the active set multiplies faster interleaved. */
static uint64_t interleave(model *m, model_weight *w) {
    if (!w->data || w->transposed || w->ilv || !kernels_ilv_type(w->type) || w->rows % KERNELS_ILV_ROWS ||
        w->row_bytes != quant_row_bytes(w->type, w->cols))
        return 0;
    size_t n = w->row_bytes * (size_t)w->rows;
    void *dst = aligned_alloc(64, (n + 63) / 64 * 64);
    void **list = dst ? realloc(m->owned, (size_t)(m->n_owned + 1) * sizeof *list) : NULL;
    if (!list) {
        free(dst);
        return 0;
    }
    m->owned = list;
    list[m->n_owned++] = dst;
    kernels_interleave(w->type, w->data, dst, w->rows, w->cols);
    w->ilv = dst;
    if (m->file) drop_pages(w->data, n);
    return n;
}

uint64_t model_interleave(model *m) {
    const char *env = getenv("NUCLEUS_REPACK");
    if (env && !strcmp(env, "0")) return 0;
    const model_hparams *hp = &m->hp;
    uint64_t n = interleave(m, &m->output);
    for (int il = 0; il < hp->n_layer; il++) {
        model_layer *L = &m->layers[il];
        model_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->ffn_gate, &L->ffn_up, &L->ffn_down, &L->router};
        for (size_t i = 0; i < sizeof ws / sizeof *ws; i++) n += interleave(m, ws[i]);
        model_weight *ex[] = {L->exp_gate, L->exp_up, L->exp_gate_up, L->exp_down};
        for (size_t i = 0; i < sizeof ex / sizeof *ex; i++)
            for (int e = 0; ex[i] && e < hp->n_expert; e++) n += interleave(m, &ex[i][e]);
    }
    return n;
}
