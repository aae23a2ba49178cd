/* The smallest program on libnucleus: load a model, continue a prompt greedily, print the text as
 * it comes.  cc generate.c $(pkg-config --cflags --libs nucleus) -o generate
 *             ./generate MODEL.gguf "Once upon a time" */
#include <nucleus.h>
#include <stdio.h>
#include <string.h>

static int print_text(const nc_gen_event *ev, void *user) {
    (void)user;
    fwrite(ev->text, 1, (size_t)ev->n_text, stdout);
    fflush(stdout);
    return 0; /* nonzero would stop the generation */
}

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: %s MODEL PROMPT\n", argv[0]); return 2; }
    nc_err err;
    nc_model *m = NULL;
    nc_context *c = NULL;
    nc_gen_result res = {0};
    nc_gen_params p = {.stop.max_tokens = 64};
    nc_sampler_params_default(&p.sampling);
    p.sampling.temp = 0; /* greedy: the same text every run */
    int32_t prompt[1024];
    int rc = nc_model_load(&m, argv[1], &err) || nc_context_new(&c, m, &(nc_context_params){0}, &err);
    int n = rc ? -1 : nc_tokenize(m, argv[2], strlen(argv[2]), true, false, prompt, 1024, &err);
    if (n > 1024) {
        snprintf(err.msg, sizeof err.msg, "the prompt is longer than 1024 tokens");
        n = -1;
    }
    if (n >= 0) {
        printf("%s", argv[2]);
        rc = nc_generate(c, m, prompt, n, &p, print_text, NULL, &res, &err);
        printf("\n");
    } else rc = 1;
    if (rc) fprintf(stderr, "error: %s\n", err.msg);
    nc_gen_result_free(&res);
    nc_context_free(c);
    nc_model_free(m);
    return rc ? 1 : 0;
}
