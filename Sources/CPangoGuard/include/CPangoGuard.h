#ifndef IMGPIPE_CPANGOGUARD_H
#define IMGPIPE_CPANGOGUARD_H

/// 1 when Pango's fontconfig matching runs on the thread that asks for it (PangoGuard.c):
/// calls to `g_thread_new` reach the definition in this module, and GLib's own is behind it.
int ip_pango_guard_active(void);

/// How many of Pango's fontconfig threads were run on their caller's thread instead, so far.
long ip_pango_threads_inlined(void);

/// The thread (`pthread_self()`) that ran the last of them, or 0 before the first.
unsigned long ip_pango_last_inline_thread(void);

#endif
