// Pango's fontconfig matching on the thread that asks for it, for Pango 1.48.5–1.51.1.
//
// These Pango versions (Debian 12 has 1.50.12) start two threads for every new font pattern,
// named "[pango] FcFontSetMatch" and "[pango] FcFontSetSort" (pangofc-fontmap.c,
// `pango_fc_patterns_new`). Each holds a reference to the pattern set and drops it when it
// ends. The font map is cleared whenever the text's resolution changes (libvips' `vips_text`
// sets it for every layout, and a caption's autofit tries one resolution after another):
// clearing drops every fontset, and so the patterns, and destroys the hash of patterns and
// makes a new one. A matching thread still running then holds the last reference, and ending
// it frees the set, which looks it up in the font map's hash of patterns, without a lock,
// while the thread that renders text destroys or changes that hash. The test process died
// with SIGFPE inside `g_hash_table_lookup` on such a thread (a division by the size of a
// table already freed), caught in a core: the render thread was freeing fontsets in
// `vips_text` at that moment. A 300-item caption run of the release binary died the same way
// in 5 of 9 runs.
//
// `g_thread_new` defined in the executable comes first in the dynamic linker's search order
// and so interposes GLib's (as OrcGuard.c does for liborc). For those two names it runs the
// thread's function at once on the calling thread, so every use of that hash stays on the
// one thread that renders text (`TextThread` in VipsKit): before 1.48.3 Pango matched on the
// caller too, though lazily, where both now run for every new pattern. It hands back the
// calling thread's own GThread, with a reference for Pango's `g_thread_unref` (Pango never
// joins these). Every other thread is GLib's, untouched. Pango's "[pango] FcInit" thread is
// left alone: Pango starts it holding the lock the thread takes when it ends.
//
// Pango 1.51.2 and later match on one long-lived "[pango] fontconfig" thread fed by a queue,
// which still drops pattern references there and must never be run inline (it does not end):
// the names matched here leave it alone, and `pangosFontMatchingRunsOnTheTextThread` fails on
// such a Pango, as a reminder to look again.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
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
static _Atomic(unsigned long) last_inline_thread;

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
        atomic_store(&last_inline_thread, (unsigned long)pthread_self());
        atomic_fetch_add(&inlined, 1);
        return g_thread_ref(g_thread_self());
    }
    if (real_thread_new == NULL) {
        // GLib is loaded with libvips, before any of this runs; never seen, but said plainly.
        fputs("imgpipe: GLib's g_thread_new not found behind CPangoGuard's\n", stderr);
        abort();
    }
    return real_thread_new(name, function, data);
}

int ip_pango_guard_active(void) {
    pthread_once(&pango_guard_once, pango_guard_resolve);
    return real_thread_new != NULL && dlsym(RTLD_DEFAULT, "g_thread_new") == (void *)g_thread_new;
}

long ip_pango_threads_inlined(void) {
    return atomic_load(&inlined);
}

unsigned long ip_pango_last_inline_thread(void) {
    return atomic_load(&last_inline_thread);
}
