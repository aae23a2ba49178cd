/* The directory of saved slots (--slot-save-path) under its size budget (--slot-save-max-bytes):
 * what its files hold, so that a save that would take it past the budget is refused. */
#ifndef NC_SERVER_SLOT_FILES_H
#define NC_SERVER_SLOT_FILES_H

#include <stdint.h>

#include "nucleus.h"

/* The bytes of the regular files in dir but the one named except (the file a save replaces):
 * 0 with *bytes, or -1 with err naming the directory. */
int srv_slot_dir_bytes(const char *dir, const char *except, uint64_t *bytes, nc_err *err);

#endif
