/* What GET /v1/models and /v1/models/{id} say of each model: OpenAI's model object ("id",
 * "object", "created", "owned_by") with the router's "status" ({"value": "loaded" | "loading" |
 * "unloaded" | "unloading" | "failed", "reason" when failed}), its path, and metadata: the
 * architecture, parameters, training context, vocabulary (once loaded), the bytes it holds or
 * is expected to, its slots and context, the requests running on it, how long it has been
 * idle and how many times it was loaded. */
#ifndef NC_SERVER_MODELS_H
#define NC_SERVER_MODELS_H

#include <stdint.h>

#include <cjson/cJSON.h>

#include "server/router.h"

/* The object of one model (NULL when out of memory). */
cJSON *srv_model_object(const srv_model_status *st, int64_t created);

#endif
