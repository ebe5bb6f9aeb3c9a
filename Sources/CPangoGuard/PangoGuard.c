// Pango's fontconfig matching on the thread that asks for it, for Pango 1.50.x.
//
// Pango 1.50 (Debian 12 has 1.50.12) starts two threads for every new font pattern, named
// "[pango] FcFontSetMatch" and "[pango] FcFontSetSort" (pangofc-fontmap.c,
// `pango_fc_patterns_new`). Each holds a reference to the pattern set and drops it when it
// ends; when that is the last reference (the font map has evicted the fontset meanwhile, as
// it does past 256, and libvips' autofit of a caption makes a pattern for every size it
// tries), the thread frees the set, which looks it up in and removes it from the font map's
// hash of patterns without a lock, while the thread that renders text adds to and removes
// from that same hash. The test process died with SIGFPE inside `g_hash_table_lookup` on
// such a thread (a division by the size of a table being changed), caught in a core: the
// render thread was freeing fontsets in libvips' `vips_text`. Pango 1.51.2 replaced these
// threads with one queue ("Just use a single fontconfig thread").
//
// `g_thread_new` defined in the executable comes first in the dynamic linker's search order
// and so interposes GLib's (as OrcGuard.c does for liborc). For those two names it runs the
// thread's function at once on the calling thread, as Pango before 1.50 did, so every use of
// that hash stays on the one thread that renders text (`TextThread` in VipsKit); it hands
// back the calling thread's own GThread, with a reference for Pango's `g_thread_unref`.
// Every other thread is GLib's, untouched. Pango's "[pango] FcInit" thread is left alone:
// Pango starts it holding the lock the thread takes when it ends.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include "CPangoGuard.h"

// GLib's types are not needed: a GThread is only passed through.
typedef void *(*thread_function)(void *data);
typedef void *(*thread_new_function)(const char *name, thread_function function, void *data);
extern void *g_thread_self(void);
extern void *g_thread_ref(void *thread);

static thread_new_function real_thread_new;
static pthread_once_t pango_guard_once = PTHREAD_ONCE_INIT;
static atomic_long inlined;

static void pango_guard_resolve(void) {
    real_thread_new = (thread_new_function)dlsym(RTLD_NEXT, "g_thread_new");
}

static int runs_inline(const char *name) {
    return name != NULL
        && (strcmp(name, "[pango] FcFontSetMatch") == 0 || strcmp(name, "[pango] FcFontSetSort") == 0);
}

void *g_thread_new(const char *name, thread_function function, void *data) {
    pthread_once(&pango_guard_once, pango_guard_resolve);
    if (runs_inline(name)) {
        function(data);
        atomic_fetch_add(&inlined, 1);
        return g_thread_ref(g_thread_self());
    }
    // GLib is loaded with libvips, before any of this runs: its own is always found.
    return real_thread_new(name, function, data);
}

int ip_pango_guard_active(void) {
    pthread_once(&pango_guard_once, pango_guard_resolve);
    return real_thread_new != NULL && dlsym(RTLD_DEFAULT, "g_thread_new") == (void *)g_thread_new;
}

long ip_pango_threads_inlined(void) {
    return atomic_load(&inlined);
}
