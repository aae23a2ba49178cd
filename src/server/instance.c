/* A served model: its contexts, scheduler, template and metrics made and freed together. */
#include "server/instance.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int oom(nc_err *err) {
    snprintf(err->msg, sizeof err->msg, "out of memory");
    return -1;
}

/* The contexts and the scheduler: everything but the models. */
static int start(srv_instance *in, const srv_config *cfg, nc_err *err) {
    bool spec = in->dm || cfg->spec.lookup_ngram > 0;
    int32_t per_slot = 1 + (spec ? (cfg->spec.draft_max ? cfg->spec.draft_max : 16) : 0);
    nc_context_params cp = {.n_ctx = cfg->n_ctx, .n_seq_max = cfg->n_parallel, .n_threads = cfg->n_threads,
                            .n_batch = cfg->n_parallel * per_slot + cfg->chunk, .kv_cells = cfg->kv_cells,
                            .type_k = cfg->type_k, .type_v = cfg->type_v, .swa_full = cfg->swa_full,
                            .fast = cfg->fast, .n_gpu_layers = cfg->n_gpu_layers};
    if (nc_context_new(&in->c, in->m, &cp, err)) return -1;
    nc_spec_params sp = cfg->spec;
    if (in->dm) { /* a sequence per slot, as long as the model's */
        nc_context_params dp = {.n_ctx = nc_context_n_ctx(in->c), .n_seq_max = cfg->n_parallel,
                                .n_threads = cfg->n_threads, .fast = cfg->fast};
        if (nc_spec_check_vocab(in->m, in->dm, err) || nc_context_new(&in->draft, in->dm, &dp, err)) return -1;
        sp.draft = in->draft;
        sp.draft_model = in->dm;
    }
    nc_kv_stats kst;
    nc_kv_get_stats(in->c, &kst);
    if ((int64_t)kst.n_blocks * NC_KV_BLOCK < nc_context_n_ctx(in->c)) { /* one slot must be able to fill its context */
        snprintf(err->msg, sizeof err->msg, "--kv-size %lld is smaller than the context of a slot (%d tokens)",
                 (long long)cfg->kv_cells, nc_context_n_ctx(in->c));
        return -1;
    }
    if (srv_model_ctx_init(&in->mc, in->m, nc_context_n_ctx(in->c), cfg->n_parallel, cfg->chat_template, in->note,
                           sizeof in->note, err)) {
        if (cfg->chat_template) { /* name the flag before the parser's reason */
            char why[sizeof err->msg];
            snprintf(why, sizeof why, "%s", err->msg);
            snprintf(err->msg, sizeof err->msg, "--chat-template: %.400s", why);
        }
        return -1;
    }
    in->mc_ready = true;
    in->mc.split_reasoning = !cfg->reasoning_none;
    in->mc.reasoning_budget = cfg->reasoning_budget;
    srv_embedder_init(&in->emb, in->m, nc_context_n_ctx(in->c), nc_context_n_threads(in->c));
    in->emb_ready = true;
    srv_sched_config sc = {.n_slots = cfg->n_parallel, .max_queue = cfg->max_queue, .chunk = cfg->chunk,
                           .swa_full = cfg->swa_full, .context = cfg->context, .spec = sp};
    if (srv_sched_new(&in->sched, in->c, in->m, &sc, &in->metrics, err)) return -1;
    nc_model_info info;
    nc_model_get_info(in->m, &info);
    in->bytes = (double)info.file_bytes + nc_kv_bytes_total(in->c);
    if (in->dm) {
        nc_model_get_info(in->dm, &info);
        in->bytes += (double)info.file_bytes + nc_kv_bytes_total(in->draft);
    }
    return 0;
}

int srv_instance_new(srv_instance **out, const char *id, const char *path, nc_model *m, nc_model *dm, bool owns,
                     const srv_config *cfg, nc_err *err) {
    *out = NULL;
    srv_instance *in = calloc(1, sizeof *in);
    if (!in) {
        if (owns) {
            nc_model_free(m);
            nc_model_free(dm);
        }
        return oom(err);
    }
    *in = (srv_instance){.m = m, .dm = dm, .owns_models = owns, .n_parallel = cfg->n_parallel,
                         .max_queue = cfg->max_queue, .created = (int64_t)time(NULL)};
    atomic_init(&in->embedding, 0);
    atomic_init(&in->stopping, false);
    srv_gate_init(&in->gate, cfg->n_parallel, cfg->max_queue);
    in->gate_ready = true;
    srv_metrics_init(&in->metrics, cfg->n_parallel);
    in->metrics_ready = true;
    in->id = strdup(id);
    in->path = strdup(path ? path : "");
    if (!in->id || !in->path) {
        srv_instance_free(in, 0);
        return oom(err);
    }
    if (start(in, cfg, err)) {
        srv_instance_free(in, 0);
        return -1;
    }
    *out = in;
    return 0;
}

int srv_instance_open(srv_instance **out, const char *id, const char *path, const char *draft_path,
                      const srv_config *cfg, nc_err *err) {
    *out = NULL;
    nc_model *m = NULL, *dm = NULL;
    if (nc_model_load(&m, path, err)) return -1;
    if (draft_path && nc_model_load(&dm, draft_path, err)) {
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err->msg);
        snprintf(err->msg, sizeof err->msg, "the draft model %.200s: %.280s", draft_path, why);
        nc_model_free(m);
        return -1;
    }
    return srv_instance_new(out, id, path, m, dm, true, cfg, err);
}

void srv_instance_free(srv_instance *in, double drain_seconds) {
    if (!in) return;
    if (in->sched && drain_seconds > 0) srv_sched_drain(in->sched, drain_seconds);
    /* a chat template still rendering (a hostile one runs up to its time budget) ends now */
    atomic_store(&in->stopping, true);
    if (in->mc_ready) nc_chat_template_cancel(in->mc.chat);
    srv_sched_free(in->sched);
    if (in->mc_ready) srv_model_ctx_free(&in->mc);
    if (in->emb_ready) srv_embedder_free(&in->emb);
    if (in->gate_ready) srv_gate_destroy(&in->gate);
    if (in->metrics_ready) srv_metrics_destroy(&in->metrics);
    nc_context_free(in->c);
    nc_context_free(in->draft);
    if (in->owns_models) {
        nc_model_free(in->m);
        nc_model_free(in->dm);
    }
    free(in->id);
    free(in->path);
    free(in);
}
