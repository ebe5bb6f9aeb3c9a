#ifndef IMGPIPE_CORCSTRESS_H
#define IMGPIPE_CORCSTRESS_H

/// How `ip_orc_stress` reaches liborc's `orc_program_compile` and `orc_program_free`.
typedef enum {
    /// As the process resolves them: imgpipe's lock (`COrcGuard`) when it is linked in,
    /// as libvips' own calls do.
    IP_ORC_AS_RESOLVED = 0,
    /// liborc's own, past any definition in the executable: no lock (liborc 0.4.33 races).
    IP_ORC_UNGUARDED = 1,
} IPOrcPath;

/// `threads` threads each build, compile, run and free `iterations` small liborc programs
/// of varied sizes at once, checking each result against the same sums computed in C.
/// Returns 0 when every result was right, 1 on a wrong result, 2 when a program did not
/// compile, -1 when liborc is not in the process (libvips built without it). A race in
/// liborc's code memory shows as a wrong result or a crash.
int ip_orc_stress(int threads, int iterations, IPOrcPath path);

#endif
