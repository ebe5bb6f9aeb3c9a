// zlib's gzip file API, for reading URL lists that may be gzip-compressed
// (gzopen reads plain files transparently).
#ifndef IMGPIPE_CZLIB_SHIM_H
#define IMGPIPE_CZLIB_SHIM_H
#include <zlib.h>
#endif
