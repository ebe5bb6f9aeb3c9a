// liborc 0.4.33's code-memory race, shown without libvips or imgpipe: THREADS threads
// compile, run and free ITERATIONS small liborc programs each (Sources/COrcStress).
//
//   cc -O2 bench/orc-race.c Sources/COrcStress/OrcStress.c -ISources/COrcStress/include \
//      $(pkg-config --cflags --libs orc-0.4) -o /tmp/orc-race
//   /tmp/orc-race 8 50000      # liborc's own functions: a crash or a wrong result
//   cc -O2 bench/orc-race.c Sources/COrcStress/OrcStress.c -ISources/COrcStress/include \
//      Sources/COrcGuard/OrcGuard.c -ISources/COrcGuard/include -rdynamic \
//      $(pkg-config --cflags --libs orc-0.4) -o /tmp/orc-race-guarded
//   /tmp/orc-race-guarded 8 50000   # through imgpipe's lock: "every result right"
//
// Exit status: 0 every result right, 1 a wrong result, 2 a program that did not compile,
// 255 liborc's functions not found (a crash ends it on a signal).
#include <orc/orc.h>
#include <stdio.h>
#include <stdlib.h>
#include "COrcStress.h"

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s THREADS ITERATIONS\n", argv[0]);
        return 64;
    }
    orc_init();
    int result = ip_orc_stress(atoi(argv[1]), atoi(argv[2]), IP_ORC_AS_RESOLVED);
    puts(result == 0 ? "every result right" : result == 1 ? "a wrong result"
         : result == 2 ? "failed to compile" : "liborc's functions not found");
    return result;
}
