#ifndef IMGPIPE_CORCGUARD_H
#define IMGPIPE_CORCGUARD_H

/// 1 when the lock around liborc's code memory (OrcGuard.c) is in force: libvips' calls to
/// `orc_program_compile` and `orc_program_free` reach it, and liborc's own are behind it.
int ip_orc_guard_active(void);

#endif
