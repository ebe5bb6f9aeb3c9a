// Two resamples of 8-bit interleaved pictures (1–4 bands) in memory, written for the
// outputs an item's other outputs are made from (`SharedLoad.resize`): libvips 8.14 does
// both in scalar code, through its generic region machinery, at 2–5× the cost.
#ifndef CRESAMPLE_H
#define CRESAMPLE_H

#include <stddef.h>
#include <stdint.h>

/// Averages each 2×2 block of a w×h picture into one pixel, rounding halves up:
/// (a + b + c + d + 2) / 4, which is what libvips' bilinear `affine` gives at the blocks'
/// centres. The output is ⌊w/2⌋×⌊h/2⌋ (a last odd row or column is left out); rows are
/// `stride` and `outStride` bytes apart. Returns 0, or -1 when its scratch line could not
/// be had.
int rs_halve(const uint8_t *in, size_t stride, int width, int height, int bands,
             uint8_t *out, size_t outStride);

/// A lanczos3 reduction by `hshrink` across and `vshrink` down (input ÷ output, as
/// `vips_resize` passes them to `reduceh` and `reducev`), with the arithmetic of libvips
/// 8.14's `reducev` followed by `reduceh` in their scalar paths: the same 12-bit masks at
/// 1/64-pixel steps, the same centres and edge copies, 8-bit rounding between the passes.
/// A factor of 1 or less is no pass. `out` is `rs_reduced_length(width, hshrink)` ×
/// `rs_reduced_length(height, vshrink)`. Returns 0; -1 when the reduction is not one this
/// does as libvips would (`rs_reduces_as_libvips`) or scratch memory could not be had.
int rs_reduce_lanczos3(const uint8_t *in, size_t stride, int width, int height, int bands,
                       uint8_t *out, size_t outStride, double hshrink, double vshrink);

/// The length a pass by `shrink` leaves of `length`: rounded to the nearest, as libvips
/// does; `length` itself when `shrink` is 1 or less (no pass).
int rs_reduced_length(int length, double shrink);

/// Whether `rs_reduce_lanczos3` gives libvips' pixels for this reduction: `vips_resize`
/// (gap 2) starts a pass by 4× or more with a box shrink, which this does not do.
int rs_reduces_as_libvips(int width, int height, double hshrink, double vshrink);

#endif
