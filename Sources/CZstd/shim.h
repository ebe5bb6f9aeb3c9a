// libzstd's one-shot API, for Parquet pages compressed with ZSTD.
#ifndef IMGPIPE_CZSTD_SHIM_H
#define IMGPIPE_CZSTD_SHIM_H
#include <zstd.h>
#endif
