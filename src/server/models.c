/* The model objects of /v1/models (see models.h). */
#include "server/models.h"

#include <stdbool.h>

#include "server/instance.h"

cJSON *srv_model_object(const srv_model_status *st, int64_t created) {
    const srv_preset *p = st->preset;
    const srv_instance *in = st->inst;
    cJSON *o = cJSON_CreateObject(), *status = NULL, *meta = NULL;
    bool ok = o && cJSON_AddStringToObject(o, "id", p->id) && cJSON_AddStringToObject(o, "object", "model") &&
              cJSON_AddNumberToObject(o, "created", (double)(in ? in->created : created)) &&
              cJSON_AddStringToObject(o, "owned_by", "nucleus") && cJSON_AddStringToObject(o, "path", p->path) &&
              (status = cJSON_AddObjectToObject(o, "status")) &&
              cJSON_AddStringToObject(status, "value", srv_model_state_name(st->state)) &&
              (st->state != SRV_MODEL_FAILED || cJSON_AddStringToObject(status, "reason", st->error)) &&
              (meta = cJSON_AddObjectToObject(o, "meta")) && cJSON_AddNumberToObject(meta, "size", st->bytes) &&
              cJSON_AddNumberToObject(meta, "requests", st->leases) &&
              cJSON_AddNumberToObject(meta, "idle_seconds", st->idle_seconds) &&
              cJSON_AddNumberToObject(meta, "loads", (double)st->loads);
    if (ok && in) {
        nc_model_info info;
        nc_model_get_info(in->m, &info);
        ok = cJSON_AddStringToObject(meta, "arch", info.arch) && cJSON_AddNumberToObject(meta, "n_params", (double)info.n_params) &&
             cJSON_AddNumberToObject(meta, "n_ctx_train", info.n_ctx_train) &&
             cJSON_AddNumberToObject(meta, "n_vocab", info.n_vocab) && cJSON_AddNumberToObject(meta, "n_embd", info.n_embd) &&
             cJSON_AddNumberToObject(meta, "n_ctx", in->mc.n_ctx) && cJSON_AddNumberToObject(meta, "n_parallel", in->n_parallel) &&
             cJSON_AddNumberToObject(meta, "loaded_at", (double)st->loaded_at);
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}
