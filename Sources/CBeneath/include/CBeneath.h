#ifndef IMGPIPE_CBENEATH_H
#define IMGPIPE_CBENEATH_H

/// Opens `path` relative to the folder `dirfd` with `flags` (`O_CLOEXEC` added), resolved
/// by the kernel beneath that folder without following any symbolic link on the way or
/// at the end (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
/// RESOLVE_NO_MAGICLINKS`, Linux 5.6, called through `syscall`: glibc 2.36 has no wrapper).
/// Returns the descriptor, or -1 with `errno`: `ENOSYS` where the kernel (or a seccomp
/// filter) lacks `openat2`, `ELOOP` for a symbolic link, `EXDEV` for a path leaving
/// `dirfd`, `EAGAIN` when a rename raced the lookup.
int ip_open_beneath(int dirfd, const char *path, int flags);

/// Swaps the entries `from` and `to` of the folders `fromfd` and `tofd` in one step
/// (`renameat2` with `RENAME_EXCHANGE`), for the tests that swap a sink's folder for a
/// symbolic link while a run writes into it. Returns 0, or -1 with `errno`.
int ip_rename_exchange(int fromfd, const char *from, int tofd, const char *to);

#endif
