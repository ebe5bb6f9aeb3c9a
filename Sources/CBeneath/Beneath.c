// Paths resolved beneath a folder without following symbolic links (DirectorySink.swift,
// SinkFolder.swift): system calls Swift cannot make (`syscall` is variadic).
#define _GNU_SOURCE
#include "CBeneath.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

int ip_open_beneath(int dirfd, const char *path, int flags) {
#ifdef SYS_openat2
    struct open_how how = {
        .flags = (unsigned long long)(flags | O_CLOEXEC),
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
    };
    return (int)syscall(SYS_openat2, dirfd, path, &how, sizeof how);
#else
    (void)dirfd;
    (void)path;
    (void)flags;
    errno = ENOSYS;
    return -1;
#endif
}

int ip_rename_exchange(int fromfd, const char *from, int tofd, const char *to) {
    return renameat2(fromfd, from, tofd, to, RENAME_EXCHANGE);
}
