// How a run starts its pixel helpers, what a helper asks of the kernel before it serves,
// and the sockets made in C (PixelHelpers.swift, PixelHelper.swift, MetricsEndpoint.swift).
#define _GNU_SOURCE
#include "CProcess.h"

#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

int ip_socket_pair(int pair[2]) { return socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair); }

int ip_stream_socket(int family) { return socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0); }

int ip_stream_socket_type(void) { return SOCK_STREAM; }

int ip_spawn_helper(const char *path, char *const argv[], char *const envp[], int socket, pid_t *pid) {
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attributes;
    sigset_t none;
    int failed = posix_spawn_file_actions_init(&actions);
    if (failed) return failed;
    failed = posix_spawnattr_init(&attributes);
    if (failed) {
        posix_spawn_file_actions_destroy(&actions);
        return failed;
    }
    // dup2 clears close-on-exec on the copy; the original (close-on-exec) goes at exec.
    failed = posix_spawn_file_actions_adddup2(&actions, socket, 0);
    if (!failed) failed = posix_spawn_file_actions_addclosefrom_np(&actions, 3);
    // No signal blocked, whatever the spawning thread blocks; dispositions are inherited
    // (the run ignores SIGINT and SIGTERM, and so does the helper).
    sigemptyset(&none);
    if (!failed) failed = posix_spawnattr_setsigmask(&attributes, &none);
    if (!failed) failed = posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK);
    if (!failed) failed = posix_spawn(pid, path, &actions, &attributes, argv, envp);
    posix_spawnattr_destroy(&attributes);
    posix_spawn_file_actions_destroy(&actions);
    return failed;
}

int ip_die_with_parent(pid_t parent) {
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) return -1;
    return getppid() == parent ? 0 : -1;
}

int ip_keep_from_same_user(void) {
    return prctl(PR_SET_DUMPABLE, 0);
}

int ip_set_child_subreaper(int on) {
    return prctl(PR_SET_CHILD_SUBREAPER, (unsigned long)(on != 0));
}

void ip_release_free_memory(void) {
    malloc_trim(0);
}

size_t ip_resident_bytes(void) {
    char text[64];
    int file = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (file < 0) return 0;
    ssize_t length = read(file, text, sizeof(text) - 1);
    close(file);
    if (length <= 0) return 0;
    text[length] = 0;
    // "size resident shared …", in pages.
    unsigned long size = 0, resident = 0;
    if (sscanf(text, "%lu %lu", &size, &resident) != 2) return 0;
    return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}
