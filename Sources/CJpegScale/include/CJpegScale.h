// A JPEG in memory decoded at a fraction of its size by libjpeg-turbo's DCT scaling, straight
// into 8-bit pixels: for the fingerprint of a JPEG output (`Pixels.scaledJPEG`), where
// libvips' loader, colour conversion and threaded evaluation cost several times the decode
// itself on a thumbnail.
#ifndef CJPEGSCALE_H
#define CJPEGSCALE_H

#include <stddef.h>
#include <stdint.h>

/// Decodes the JPEG in `data` at the smallest of 1/8, 1/4 and 1/2 of its size whose longer
/// side is still `side` pixels or more (whole when none is), into `*pixels`, allocated here
/// (the caller frees it with `free`): RGB for a colour JPEG (YCbCr or RGB), one band for a
/// greyscale one. Sets `*width`, `*height` and `*bands` of what it wrote. Returns 0; -1 when
/// the data is not a JPEG libjpeg reads whole (a corrupt or truncated one included:
/// libjpeg's warnings are errors here), when it is CMYK or YCCK, or when the decoded
/// picture would have more than `max_pixels` pixels; `*pixels` is then NULL.
int js_decode_scaled(const uint8_t *data, size_t length, int side, size_t max_pixels, uint8_t **pixels,
                     int *width, int *height, int *bands);

#endif
