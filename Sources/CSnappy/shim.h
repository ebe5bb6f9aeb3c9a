// libsnappy's C API, for Parquet pages compressed with SNAPPY (the codec most Parquet
// writers use by default) and for the pages imgpipe writes.
#ifndef IMGPIPE_CSNAPPY_SHIM_H
#define IMGPIPE_CSNAPPY_SHIM_H
#include <snappy-c.h>
#endif
