#ifndef IMGPIPE_CPROCESS_H
#define IMGPIPE_CPROCESS_H

#include <sys/types.h>

/// Starts `path` with `argv` and `envp` (posix_spawn), `socket` as its standard input and
/// no other descriptor of this process past standard error (glibc's
/// `posix_spawn_file_actions_addclosefrom_np`, which Swift does not see), and no signal
/// blocked. Returns 0 and sets `pid`, or an errno value.
// Sockets made in C: which Clang module Swift finds glibc's `SOCK_*` names in depends on
// the build, and a release build found them in none.
// A connected pair of Unix stream sockets, both closed on exec: 0, or -1 with errno set.
int ip_socket_pair(int pair[2]);
// A stream socket of `family`, closed on exec: its descriptor, or -1 with errno set.
int ip_stream_socket(int family);
// SOCK_STREAM, for `addrinfo.ai_socktype`.
int ip_stream_socket_type(void);

int ip_spawn_helper(const char *path, char *const argv[], char *const envp[], int socket, pid_t *pid);

/// For a pixel helper (`PixelHelper.serve`), first thing: asks the kernel for SIGKILL when
/// the thread that started it ends (`prctl(PR_SET_PDEATHSIG)`, which Swift cannot call: it
/// is variadic), then checks that its parent is still `parent` (it may have died before the
/// request was made). Returns 0, or -1 when the parent is gone or the request failed.
int ip_die_with_parent(pid_t parent);

/// Makes this process not dumpable (`PR_SET_DUMPABLE` 0): another process of the same user,
/// such as a pixel helper taken over by a hostile file, can neither read its memory and
/// environment (`/proc/PID/environ`, `/proc/PID/mem`) nor attach to it. 0, or -1 (errno).
int ip_keep_from_same_user(void);

/// Makes this process the reaper of its orphaned descendants (`PR_SET_CHILD_SUBREAPER`),
/// or not: a test reads how a killed run's pixel helpers ended. Returns 0 or -1.
int ip_set_child_subreaper(int on);

/// Gives the memory malloc holds free back to the system (`malloc_trim(0)`, in
/// `<malloc.h>`, which Swift's Glibc module does not show): a pixel helper, after an item
/// that left it holding more than it keeps.
void ip_release_free_memory(void);

/// The process's resident memory in bytes (`/proc/self/statm`); 0 when it cannot be read.
size_t ip_resident_bytes(void);

#endif
