// Many threads compiling and freeing liborc programs at once: the race liborc 0.4.33 has
// in its code memory (two programs written into one chunk), and the lock that prevents
// it (`COrcGuard`). Used by `VipsRuntimeTests` and `bench/orc-race.c`.
//
// liborc's functions are looked up in the running process (libvips brought liborc in),
// so nothing here needs liborc's headers or a link against it. Only pointers and ints
// cross: an OrcProgram and an OrcExecutor are passed through.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include "COrcStress.h"

// liborc's variable slots (orclimits.h): D1, S1, C1 and T1.
enum { VAR_D1 = 0, VAR_S1 = 4, VAR_C1 = 16, VAR_T1 = 32 };
enum { MAX_CONSTANTS = 6, SAMPLES = 64 };

static struct {
    void *(*program_new)(void);
    int (*add_destination)(void *, int, const char *);
    int (*add_source)(void *, int, const char *);
    int (*add_constant)(void *, int, int, const char *);
    int (*add_temporary)(void *, int, const char *);
    void (*append)(void *, const char *, int, int, int);
    int (*compile)(void *);
    void (*program_free)(void *);
    void *(*executor_new)(void *);
    void (*executor_set_array)(void *, int, void *);
    void (*executor_set_n)(void *, int);
    void (*executor_run)(void *);
    void (*executor_free)(void *);
} orc;

static int stress_iterations;
static int stress_failure;

static void *stress_thread(void *argument) {
    unsigned seed = (unsigned)(size_t)argument * 2654435761u;
    for (int i = 0; i < stress_iterations && !__atomic_load_n(&stress_failure, __ATOMIC_RELAXED); i++) {
        // A chain of n adds and multiplies by constants: programs of varied code sizes.
        int n = 1 + (int)(rand_r(&seed) % MAX_CONSTANTS);
        int constants[MAX_CONSTANTS];
        void *program = orc.program_new();
        orc.add_destination(program, 2, "d1");
        orc.add_source(program, 2, "s1");
        for (int k = 0; k < n; k++) {
            char name[8];
            snprintf(name, sizeof(name), "c%d", k);
            constants[k] = (int)(rand_r(&seed) % 1000);
            orc.add_constant(program, 2, constants[k], name);
        }
        orc.add_temporary(program, 2, "t1");
        orc.append(program, "addw", VAR_T1, VAR_S1, VAR_C1);
        for (int k = 1; k < n; k++) orc.append(program, k % 2 ? "mullw" : "addw", VAR_T1, VAR_T1, VAR_C1 + k);
        orc.append(program, "copyw", VAR_D1, VAR_T1, VAR_D1);
        if (orc.compile(program) >= 0x100) {  // ORC_COMPILE_RESULT_IS_SUCCESSFUL
            __atomic_store_n(&stress_failure, 2, __ATOMIC_RELAXED);
            orc.program_free(program);
            break;
        }
        short source[SAMPLES], made[SAMPLES];
        for (int k = 0; k < SAMPLES; k++) source[k] = (short)(k * 7 - 100);
        void *executor = orc.executor_new(program);
        orc.executor_set_n(executor, SAMPLES);
        orc.executor_set_array(executor, VAR_S1, source);
        orc.executor_set_array(executor, VAR_D1, made);
        orc.executor_run(executor);
        orc.executor_free(executor);
        for (int k = 0; k < SAMPLES; k++) {
            short expected = (short)(source[k] + constants[0]);
            for (int j = 1; j < n; j++)
                expected = j % 2 ? (short)(expected * constants[j]) : (short)(expected + constants[j]);
            if (made[k] != expected) {
                __atomic_store_n(&stress_failure, 1, __ATOMIC_RELAXED);
                break;
            }
        }
        orc.program_free(program);
    }
    return NULL;
}

int ip_orc_stress(int threads, int iterations, IPOrcPath path) {
    // Compile and free as `path` says; everything else as the process resolves it.
    void *guarded = path == IP_ORC_UNGUARDED ? RTLD_NEXT : RTLD_DEFAULT;
    const struct { const char *name; void **slot; void *from; } functions[] = {
        { "orc_program_new", (void **)&orc.program_new, RTLD_DEFAULT },
        { "orc_program_add_destination", (void **)&orc.add_destination, RTLD_DEFAULT },
        { "orc_program_add_source", (void **)&orc.add_source, RTLD_DEFAULT },
        { "orc_program_add_constant", (void **)&orc.add_constant, RTLD_DEFAULT },
        { "orc_program_add_temporary", (void **)&orc.add_temporary, RTLD_DEFAULT },
        { "orc_program_append", (void **)&orc.append, RTLD_DEFAULT },
        { "orc_program_compile", (void **)&orc.compile, guarded },
        { "orc_program_free", (void **)&orc.program_free, guarded },
        { "orc_executor_new", (void **)&orc.executor_new, RTLD_DEFAULT },
        { "orc_executor_set_array", (void **)&orc.executor_set_array, RTLD_DEFAULT },
        { "orc_executor_set_n", (void **)&orc.executor_set_n, RTLD_DEFAULT },
        { "orc_executor_run", (void **)&orc.executor_run, RTLD_DEFAULT },
        { "orc_executor_free", (void **)&orc.executor_free, RTLD_DEFAULT },
    };
    for (size_t i = 0; i < sizeof(functions) / sizeof(functions[0]); i++) {
        if (!(*functions[i].slot = dlsym(functions[i].from, functions[i].name))) return -1;
    }
    stress_iterations = iterations;
    stress_failure = 0;
    pthread_t workers[64];
    int count = threads < 1 ? 1 : threads > 64 ? 64 : threads;
    for (int i = 0; i < count; i++) pthread_create(&workers[i], NULL, stress_thread, (void *)(size_t)(i + 1));
    for (int i = 0; i < count; i++) pthread_join(workers[i], NULL);
    return stress_failure;
}
