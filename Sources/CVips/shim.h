// Non-variadic wrappers for the libvips calls VipsKit makes.
//
// Swift cannot call C variadic functions, and most libvips operations take their optional
// arguments as a NULL-terminated name/value list. Each wrapper below fixes the option list
// of one call. Everything is `static inline`, so this module needs no compiled C file.
#ifndef IMGPIPE_CVIPS_SHIM_H
#define IMGPIPE_CVIPS_SHIM_H

#include <vips/vips.h>

// MARK: runtime

static inline int ip_init(const char *argv0) { return vips_init(argv0); }

// MARK: loading

/// Opens a file lazily: only the header is read until pixels are asked for.
static inline VipsImage *ip_new_from_file(const char *path) {
    return vips_image_new_from_file(path,
        "access", VIPS_ACCESS_SEQUENTIAL,
        "fail_on", VIPS_FAIL_ON_ERROR,
        NULL);
}

static inline VipsImage *ip_new_from_buffer(const void *data, size_t length) {
    return vips_image_new_from_buffer(data, length, "",
        "access", VIPS_ACCESS_SEQUENTIAL,
        "fail_on", VIPS_FAIL_ON_ERROR,
        NULL);
}

/// Shrink-on-load resize of a file. `export_profile` and `import_profile` may be NULL.
static inline int ip_thumbnail(const char *path, VipsImage **out, int width, int height,
                               VipsSize size, gboolean no_rotate, VipsInteresting crop,
                               const char *import_profile, const char *export_profile) {
    if (export_profile != NULL && import_profile != NULL)
        return vips_thumbnail(path, out, width, "height", height, "size", size,
            "no_rotate", no_rotate, "crop", crop, "fail_on", VIPS_FAIL_ON_ERROR,
            "import_profile", import_profile, "export_profile", export_profile, NULL);
    if (export_profile != NULL)
        return vips_thumbnail(path, out, width, "height", height, "size", size,
            "no_rotate", no_rotate, "crop", crop, "fail_on", VIPS_FAIL_ON_ERROR,
            "export_profile", export_profile, NULL);
    return vips_thumbnail(path, out, width, "height", height, "size", size,
        "no_rotate", no_rotate, "crop", crop, "fail_on", VIPS_FAIL_ON_ERROR, NULL);
}

/// As `ip_thumbnail`, from a memory buffer that the caller keeps alive.
static inline int ip_thumbnail_buffer(void *data, size_t length, VipsImage **out,
                                      int width, int height, VipsSize size,
                                      gboolean no_rotate, VipsInteresting crop,
                                      const char *import_profile,
                                      const char *export_profile) {
    const char *options = "fail_on=error";
    if (export_profile != NULL && import_profile != NULL)
        return vips_thumbnail_buffer(data, length, out, width, "height", height,
            "size", size, "no_rotate", no_rotate, "crop", crop, "option_string", options,
            "import_profile", import_profile, "export_profile", export_profile, NULL);
    if (export_profile != NULL)
        return vips_thumbnail_buffer(data, length, out, width, "height", height,
            "size", size, "no_rotate", no_rotate, "crop", crop, "option_string", options,
            "export_profile", export_profile, NULL);
    return vips_thumbnail_buffer(data, length, out, width, "height", height,
        "size", size, "no_rotate", no_rotate, "crop", crop, "option_string", options, NULL);
}

static inline VipsImage *ip_new_from_memory_copy(const void *data, size_t size, int width,
                                                 int height, int bands, VipsBandFormat fmt) {
    return vips_image_new_from_memory_copy(data, size, width, height, bands, fmt);
}

/// A copy of the image's pixels in memory, for operations that read out of order.
static inline VipsImage *ip_copy_memory(VipsImage *in) { return vips_image_copy_memory(in); }

// MARK: geometry

static inline int ip_autorot(VipsImage *in, VipsImage **out) {
    return vips_autorot(in, out, NULL);
}

static inline int ip_resize(VipsImage *in, VipsImage **out, double hscale, double vscale) {
    return vips_resize(in, out, hscale, "vscale", vscale, NULL);
}

static inline int ip_extract_area(VipsImage *in, VipsImage **out, int left, int top,
                                  int width, int height) {
    return vips_extract_area(in, out, left, top, width, height, NULL);
}

static inline int ip_smartcrop(VipsImage *in, VipsImage **out, int width, int height,
                               VipsInteresting interesting) {
    return vips_smartcrop(in, out, width, height, "interesting", interesting, NULL);
}

static inline int ip_rot(VipsImage *in, VipsImage **out, VipsAngle angle) {
    return vips_rot(in, out, angle, NULL);
}

// MARK: colour

static inline int ip_colourspace(VipsImage *in, VipsImage **out, VipsInterpretation space) {
    return vips_colourspace(in, out, space, NULL);
}

static inline int ip_icc_to_srgb(VipsImage *in, VipsImage **out, const char *fallback) {
    return vips_icc_transform(in, out, "srgb",
        "embedded", TRUE, "input_profile", fallback,
        "intent", VIPS_INTENT_RELATIVE, NULL);
}

/// Composites over a solid background; `n` is 1 for greyscale, 3 for colour.
static inline int ip_flatten(VipsImage *in, VipsImage **out, double r, double g, double b, int n) {
    double bg[3] = { r, g, b };
    VipsArrayDouble *background = vips_array_double_new(bg, n);
    int result = vips_flatten(in, out, "background", background, NULL);
    vips_area_unref(VIPS_AREA(background));
    return result;
}

static inline int ip_cast(VipsImage *in, VipsImage **out, VipsBandFormat format) {
    return vips_cast(in, out, format, NULL);
}

static inline int ip_copy_interpretation(VipsImage *in, VipsImage **out,
                                         VipsInterpretation interpretation) {
    return vips_copy(in, out, "interpretation", interpretation, NULL);
}

static inline int ip_extract_band(VipsImage *in, VipsImage **out, int band, int n) {
    return vips_extract_band(in, out, band, "n", n, NULL);
}

static inline int ip_bandjoin2(VipsImage *a, VipsImage *b, VipsImage **out) {
    return vips_bandjoin2(a, b, out, NULL);
}

// MARK: statistics

static inline int ip_avg(VipsImage *in, double *out) { return vips_avg(in, out, NULL); }

static inline int ip_deviate(VipsImage *in, double *out) { return vips_deviate(in, out, NULL); }

// MARK: saving

static inline int ip_jpegsave_buffer(VipsImage *in, void **buf, size_t *len, int quality,
                                     gboolean strip, gboolean interlace) {
    return vips_jpegsave_buffer(in, buf, len, "Q", quality, "strip", strip,
        "interlace", interlace, "optimize_coding", TRUE, NULL);
}

static inline int ip_pngsave_buffer(VipsImage *in, void **buf, size_t *len, int compression,
                                    gboolean strip, gboolean palette) {
    return vips_pngsave_buffer(in, buf, len, "compression", compression, "strip", strip,
        "palette", palette, NULL);
}

static inline int ip_webpsave_buffer(VipsImage *in, void **buf, size_t *len, int quality,
                                     gboolean lossless, gboolean strip, int effort) {
    return vips_webpsave_buffer(in, buf, len, "Q", quality, "lossless", lossless,
        "strip", strip, "effort", effort, NULL);
}

static inline int ip_tiffsave(VipsImage *in, const char *path) {
    return vips_tiffsave(in, path, NULL);
}

static inline int ip_write_to_file(VipsImage *in, const char *path) {
    return vips_image_write_to_file(in, path, NULL);
}

#endif
