/* The model a command loads: -m PATH, or -hf USER/REPO[:QUANT] from Hugging Face's hub (found in
 * the cache or downloaded now, nc_hub_get), or the default model; and the download's progress on
 * stderr: a bar with the size, speed and time left on a terminal, a line per tenth otherwise. */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

int cli_hf_arg(int argc, char **argv, int *i, cli_hf *hf) {
    const char *a = argv[*i];
    if (!strcmp(a, "--offline")) {
        hf->offline = true;
        return 1;
    }
    if (strcmp(a, "-hf") && strcmp(a, "--hf-repo") && strcmp(a, "-hfr")) return 0;
    if (!(hf->repo = cli_value(argc, argv, i))) return -1;
    return 1;
}

int cli_model_path(const char **model, cli_hf *hf) {
    if (hf->offline && !hf->repo) {
        fprintf(stderr, "error: --offline applies to -hf USER/REPO[:QUANT] (the model from the cache only)\n");
        return 2;
    }
    if (hf->repo && *model) {
        fprintf(stderr, "error: -m %s and -hf %s both name a model: give one\n", *model, hf->repo);
        return 2;
    }
    if (hf->repo) {
        cli_progress pr;
        nc_hub_params p;
        nc_err err;
        cli_hub_params(&p, hf->offline, &pr);
        if (nc_hub_get(hf->repo, &p, hf->path, sizeof hf->path, &err)) {
            cli_progress_end(&pr);
            fprintf(stderr, "error: %s\n", err.msg);
            return 1;
        }
        *model = hf->path;
        return 0;
    }
    if (!*model && !(*model = cli_default_model())) return 2;
    return 0;
}

/* ---- progress ---- */

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

const char *cli_bytes(uint64_t b, char buf[24]) {
    if (b < 1000) snprintf(buf, 24, "%llu B", (unsigned long long)b);
    else if (b < 1000000) snprintf(buf, 24, "%.1f kB", b / 1e3);
    else if (b < 1000000000) snprintf(buf, 24, "%.1f MB", b / 1e6);
    else snprintf(buf, 24, "%.2f GB", b / 1e9);
    return buf;
}

static const char *duration_text(double s, char buf[24]) {
    if (s < 0 || s > 359999) snprintf(buf, 24, "--:--");
    else if (s >= 3600) snprintf(buf, 24, "%d:%02d:%02d", (int)s / 3600, (int)s / 60 % 60, (int)s % 60);
    else snprintf(buf, 24, "%d:%02d", (int)s / 60, (int)s % 60);
    return buf;
}

static void counter(const nc_hub_progress *p, char buf[32]) {
    if (p->count > 1) snprintf(buf, 32, "[%d/%d] ", p->index, p->count);
    else buf[0] = 0;
}

/* The bar on a terminal: one line rewritten in place. */
static void draw(cli_progress *s, const nc_hub_progress *p, double t) {
    char done[24], total[24], speed[24], eta[24], count[32];
    double rate = t > s->t_start ? (double)(p->done - s->start_bytes) / (t - s->t_start) : 0;
    double frac = p->total ? (double)p->done / (double)p->total : 1;
    int cells = (int)(frac * 24);
    char bar[25];
    for (int i = 0; i < 24; i++) bar[i] = i < cells ? '=' : i == cells ? '>' : ' ';
    bar[24] = 0;
    counter(p, count);
    fprintf(stderr, "\r%s%.40s [%s] %3d%% %s / %s  %s/s  ETA %s\033[K", count, p->file, bar, (int)(frac * 100),
            cli_bytes(p->done, done), cli_bytes(p->total, total), cli_bytes((uint64_t)rate, speed),
            duration_text(rate > 0 ? (double)(p->total - p->done) / rate : -1, eta));
    s->t_last = t;
    s->drawn = true;
}

static int show(const nc_hub_progress *p, void *user) {
    cli_progress *s = user;
    char a[24], b[24], c[24], count[32];
    double t = now();
    counter(p, count);
    switch (p->event) {
    case NC_HUB_CACHED:
        fprintf(stderr, "%s%s: %s (%s) is in the cache\n", count, p->repo, p->file, cli_bytes(p->total, a));
        break;
    case NC_HUB_START:
        s->t_start = t;
        s->start_bytes = p->done;
        s->tenth = (int)(p->total ? p->done * 10 / p->total : 0);
        s->drawn = false;
        if (p->resumed) fprintf(stderr, "%s%s: %s (%s): resuming at %s\n", count, p->repo, p->file, cli_bytes(p->total, a), cli_bytes(p->resumed, b));
        else fprintf(stderr, "%s%s: downloading %s (%s)\n", count, p->repo, p->file, cli_bytes(p->total, a));
        if (s->tty) draw(s, p, t);
        break;
    case NC_HUB_PROGRESS:
        if (s->tty) {
            if (t - s->t_last >= 0.1 || p->done == p->total) draw(s, p, t);
        } else if (p->total && (int)(p->done * 10 / p->total) > s->tenth) {
            s->tenth = (int)(p->done * 10 / p->total);
            double rate = t > s->t_start ? (double)(p->done - s->start_bytes) / (t - s->t_start) : 0;
            fprintf(stderr, "%s%s: %d%% (%s of %s, %s/s)\n", count, p->file, s->tenth * 10, cli_bytes(p->done, a),
                    cli_bytes(p->total, b), cli_bytes((uint64_t)rate, c));
        }
        break;
    case NC_HUB_RETRY:
        if (s->drawn) fputc('\n', stderr);
        s->drawn = false;
        fprintf(stderr, "%s%s: %s; trying again from %s\n", count, p->file, p->note ? p->note : "the transfer failed",
                cli_bytes(p->done, a));
        break;
    case NC_HUB_VERIFY:
        if (s->tty) {
            draw(s, p, t);
            fprintf(stderr, "  checking SHA-256\033[K");
        }
        break;
    case NC_HUB_DONE:
        if (s->drawn) fputc('\n', stderr);
        s->drawn = false;
        fprintf(stderr, "%s%s: %s: %s in %s, checked\n", count, p->repo, p->file, cli_bytes(p->total - p->resumed, a),
                duration_text(t - s->t_start, b));
        break;
    }
    return 0;
}

void cli_hub_params(nc_hub_params *p, bool offline, cli_progress *state) {
    *state = (cli_progress){.tty = isatty(STDERR_FILENO)};
    *p = (nc_hub_params){.offline = offline, .progress = show, .user = state};
}

void cli_progress_end(cli_progress *state) {
    if (state->drawn) fputc('\n', stderr);
    state->drawn = false;
}
