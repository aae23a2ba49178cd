/* A QEMU TCG plugin that counts the guest instructions a program executes (user mode, one
 * thread) and prints "insns N" on standard error when it exits: bench/insns.sh runs the kernels
 * under qemu-aarch64 and qemu-x86_64 with it, so the NEON set and the x86 sets are counted the
 * same way (this VM has no hardware counters, and NEON has no hardware here at all).
 *
 * Debian ships QEMU's plugin API without its header, so the few entry points used are declared
 * here as QEMU's plugin API (version 1, QEMU 4.2 to 8.x; include/qemu/qemu-plugin.h) defines them.
 * Build: cc -O2 -shared -fPIC -o insn_count.so bench/insn_count.c
 * Use:   qemu-aarch64 -plugin ./insn_count.so PROGRAM ARGS... */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define EXPORT __attribute__((visibility("default")))

typedef uint64_t qemu_plugin_id_t;
typedef struct qemu_info_t qemu_info_t;
struct qemu_plugin_tb;
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };

size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *tb, enum qemu_plugin_op op, void *ptr, uint64_t imm);
void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, void (*cb)(qemu_plugin_id_t, struct qemu_plugin_tb *));
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, void (*cb)(qemu_plugin_id_t, void *), void *userdata);

EXPORT int qemu_plugin_version = 1;

static uint64_t executed;

/* Each translated block adds its length to the count every time it runs (an inline add: no
 * callback per block). */
static void translated(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
    qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &executed, qemu_plugin_tb_n_insns(tb));
}

static void finished(qemu_plugin_id_t id, void *unused) {
    fprintf(stderr, "insns %llu\n", (unsigned long long)executed);
}

EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv) {
    qemu_plugin_register_vcpu_tb_trans_cb(id, translated);
    qemu_plugin_register_atexit_cb(id, finished, NULL);
    return 0;
}
