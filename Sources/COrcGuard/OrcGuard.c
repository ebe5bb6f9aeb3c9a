// One lock around liborc's code-memory allocation and release, for liborc < 0.4.34.
//
// libvips compiles liborc programs per image (reducev, convi, morph: when an operation is
// built) and frees them when the image goes. liborc 0.4.33 (Debian 12's) hands out and
// merges chunks of its executable code memory without a lock (fixed upstream in 0.4.34,
// "orccodemem: Fix for potential race in codemem alloc/free"), so two images compiling
// or freeing at once can write two programs into one chunk: imgpipe died with SIGSEGV
// inside liborc on a pixel worker. Every path of libvips' into that memory is one of the
// two functions below (vips_vector_compile → orc_program_compile; vips_vector_free →
// orc_program_free). Defined in the executable, they come first in the dynamic linker's
// search order and so interpose liborc's: each takes one process-wide lock and calls
// liborc's own (found with RTLD_NEXT). Vector code runs outside the lock. With a fixed
// liborc the lock is merely redundant; without liborc (libvips built without it) nothing
// calls these.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include "COrcGuard.h"

// liborc's own types are not needed: an OrcProgram is only passed through, and
// OrcCompileResult is a C enum (an int).
typedef int (*orc_compile_function)(void *program);
typedef void (*orc_free_function)(void *program);

static pthread_mutex_t orc_guard_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static pthread_once_t orc_guard_once = PTHREAD_ONCE_INIT;
static orc_compile_function real_compile;
static orc_free_function real_free;

static void orc_guard_resolve(void) {
    real_compile = (orc_compile_function)dlsym(RTLD_NEXT, "orc_program_compile");
    real_free = (orc_free_function)dlsym(RTLD_NEXT, "orc_program_free");
}

// ORC_COMPILE_RESULT_UNKNOWN_PARSE: a fatal result, upon which libvips uses its C path.
#define ORC_GUARD_NOT_COMPILED 0x200

int orc_program_compile(void *program) {
    pthread_once(&orc_guard_once, orc_guard_resolve);
    if (!real_compile) return ORC_GUARD_NOT_COMPILED;
    pthread_mutex_lock(&orc_guard_lock);
    int result = real_compile(program);
    pthread_mutex_unlock(&orc_guard_lock);
    return result;
}

void orc_program_free(void *program) {
    pthread_once(&orc_guard_once, orc_guard_resolve);
    if (!real_free) return;
    pthread_mutex_lock(&orc_guard_lock);
    real_free(program);
    pthread_mutex_unlock(&orc_guard_lock);
}

int ip_orc_guard_active(void) {
    pthread_once(&orc_guard_once, orc_guard_resolve);
    // Interposed only if the dynamic linker resolves libvips' calls to these definitions
    // (the executable exports them), and liborc's own are behind them.
    return real_compile && real_free
        && dlsym(RTLD_DEFAULT, "orc_program_compile") == (void *)orc_program_compile
        && dlsym(RTLD_DEFAULT, "orc_program_free") == (void *)orc_program_free;
}
