// Non-variadic wrappers for the libvips calls VipsKit makes.
//
// Swift cannot call C variadic functions, and most libvips operations take their optional
// arguments as a NULL-terminated name/value list. Each wrapper below fixes the option list
// of one call. Everything is `static inline`, so this module needs no compiled C file.
#ifndef IMGPIPE_CVIPS_SHIM_H
#define IMGPIPE_CVIPS_SHIM_H

#include <vips/vips.h>
#include <malloc.h>

// MARK: runtime

static inline int ip_init(const char *argv0) { return vips_init(argv0); }

/// liborc's run-time compiled vector code on or off. Declared here: `vips/vector.h`,
/// which declares it, is not part of `vips/vips.h` and needs liborc's headers.
void vips_vector_set_enabled(gboolean enabled);
gboolean vips_vector_isenabled(void);
static inline void ip_set_vector_enabled(int enabled) { vips_vector_set_enabled(enabled ? TRUE : FALSE); }
static inline int ip_vector_enabled(void) { return vips_vector_isenabled() ? 1 : 0; }

/// At most `n` glibc malloc arenas (glibc's default is 8 per core).
static inline void ip_limit_malloc_arenas(int n) { mallopt(M_ARENA_MAX, n); }

// MARK: loading

/// Opens a file lazily: only the header is read until pixels are asked for. `fail_on` is
/// the least serious libjpeg/libpng/… complaint that fails the load (VipsKit's `FailOn`).
static inline VipsImage *ip_new_from_file(const char *path, VipsFailOn fail_on) {
    return vips_image_new_from_file(path,
        "access", VIPS_ACCESS_SEQUENTIAL,
        "fail_on", fail_on,
        NULL);
}

static inline VipsImage *ip_new_from_buffer(const void *data, size_t length, VipsFailOn fail_on) {
    return vips_image_new_from_buffer(data, length, "",
        "access", VIPS_ACCESS_SEQUENTIAL,
        "fail_on", fail_on,
        NULL);
}

/// An image in memory read with the loader's own options (`option_string`, e.g.
/// "shrink=2" for a JPEG decoded at half size), for sequential reading.
static inline VipsImage *ip_new_from_buffer_options(const void *data, size_t length, const char *option_string) {
    return vips_image_new_from_buffer(data, length, option_string,
        "access", VIPS_ACCESS_SEQUENTIAL,
        NULL);
}

/// The name of the loader libvips would pick for an image in memory; NULL when none.
static inline const char *ip_loader_of_buffer(const void *data, size_t length) {
    return vips_foreign_find_load_buffer(data, length);
}

/// Every page of an image in memory (the frames of an animated GIF or WebP) as one tall
/// image, `page-height` rows per page, read in order.
static inline VipsImage *ip_new_from_buffer_pages(const void *data, size_t length, VipsFailOn fail_on) {
    return vips_image_new_from_buffer(data, length, "",
        "access", VIPS_ACCESS_SEQUENTIAL,
        "fail_on", fail_on,
        "n", -1,
        NULL);
}

/// Shrink-on-load resize of a file or (with `path` NULL) of a buffer the caller keeps
/// alive. `export_profile` and `import_profile` may be NULL.
///
/// `fail_on` goes two ways, because libvips 8.14 treats them differently: the file
/// variant hands its own `fail_on` argument to the loader, while the buffer variant
/// ignores that argument and only passes on `option_string` — set to "fail_on=<level>"
/// here.
static inline int ip_thumbnail_any(const char *path, void *data, size_t length, VipsImage **out,
                                   int width, int height, VipsSize size, gboolean no_rotate,
                                   VipsInteresting crop, const char *import_profile,
                                   const char *export_profile, VipsFailOn fail_on) {
    VipsOperation *op = vips_operation_new(path != NULL ? "thumbnail" : "thumbnail_buffer");
    if (op == NULL) return -1;
    VipsBlob *blob = NULL;
    if (path != NULL) {
        g_object_set(op, "filename", path, NULL);
    } else {
        char options[64];
        g_snprintf(options, sizeof(options), "fail_on=%s",
            vips_enum_nick(VIPS_TYPE_FAIL_ON, fail_on));
        blob = vips_blob_new(NULL, data, length);
        g_object_set(op, "buffer", blob, "option_string", options, NULL);
        vips_area_unref(VIPS_AREA(blob));
    }
    g_object_set(op, "width", width, "height", height, "size", size, "no_rotate", no_rotate,
        "crop", crop, "fail_on", fail_on, NULL);
    if (import_profile != NULL) g_object_set(op, "import_profile", import_profile, NULL);
    if (export_profile != NULL) g_object_set(op, "export_profile", export_profile, NULL);
    if (vips_cache_operation_buildp(&op)) {
        vips_object_unref_outputs(VIPS_OBJECT(op));
        g_object_unref(op);
        return -1;
    }
    g_object_get(op, "out", out, NULL);
    vips_object_unref_outputs(VIPS_OBJECT(op));
    g_object_unref(op);
    return 0;
}

static inline VipsImage *ip_new_from_memory_copy(const void *data, size_t size, int width,
                                                 int height, int bands, VipsBandFormat fmt) {
    return vips_image_new_from_memory_copy(data, size, width, height, bands, fmt);
}

/// A copy of the image's pixels in memory, for operations that read out of order.
static inline VipsImage *ip_copy_memory(VipsImage *in) { return vips_image_copy_memory(in); }

/// Whether the image's samples can be read in place (`VIPS_IMAGE_ADDR`): 8-bit unsigned,
/// not coded, and computed into memory already (a load or `copy_memory`), never computing
/// it here.
static inline int ip_uchar_in_memory(VipsImage *in) {
    if (in->BandFmt != VIPS_FORMAT_UCHAR || in->Coding != VIPS_CODING_NONE || !in->data) return 0;
    switch (in->dtype) {
    case VIPS_IMAGE_SETBUF:
    case VIPS_IMAGE_SETBUF_FOREIGN:
    case VIPS_IMAGE_MMAPIN:
    case VIPS_IMAGE_MMAPINRW:
        return 1;
    default:
        return 0;
    }
}

/// The first sample of an image in memory (`ip_uchar_in_memory`, or one `ip_new_like` made).
static inline unsigned char *ip_samples(VipsImage *in) { return VIPS_IMAGE_ADDR(in, 0, 0); }
static inline size_t ip_line_bytes(VipsImage *in) { return VIPS_IMAGE_SIZEOF_LINE(in); }

/// A new memory image of `width`×`height` with `in`'s bands, format, interpretation,
/// resolution and metadata (what an operation's output copies from its input), its
/// samples allocated for the caller to write (`ip_samples`); NULL on failure.
static inline VipsImage *ip_new_like(VipsImage *in, int width, int height) {
    VipsImage *out = vips_image_new_memory();
    if (vips_image_pipelinev(out, VIPS_DEMAND_STYLE_ANY, in, NULL)) {
        g_object_unref(out);
        return NULL;
    }
    out->Xsize = width;
    out->Ysize = height;
    if (vips_image_write_prepare(out)) {
        g_object_unref(out);
        return NULL;
    }
    return out;
}

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
        "interlace", interlace, NULL);
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

static inline int ip_write_to_file(VipsImage *in, const char *path) {
    return vips_image_write_to_file(in, path, NULL);
}

// MARK: more geometry

static inline int ip_flip(VipsImage *in, VipsImage **out, VipsDirection direction) {
    return vips_flip(in, out, direction, NULL);
}

/// Rotates anticlockwise by `angle` degrees, filling the corners with `background`.
static inline int ip_rotate(VipsImage *in, VipsImage **out, double angle, const double *background, int n) {
    VipsArrayDouble *bg = vips_array_double_new(background, n);
    int result = vips_rotate(in, out, angle, "background", bg, NULL);
    vips_area_unref(VIPS_AREA(bg));
    return result;
}

/// Places the image at (x, y) in a `width`×`height` canvas of `background`.
static inline int ip_embed(VipsImage *in, VipsImage **out, int x, int y, int width, int height,
                           const double *background, int n) {
    VipsArrayDouble *bg = vips_array_double_new(background, n);
    int result = vips_embed(in, out, x, y, width, height,
        "extend", VIPS_EXTEND_BACKGROUND, "background", bg, NULL);
    vips_area_unref(VIPS_AREA(bg));
    return result;
}

/// The box inside a uniform border whose colour is the top-left pixel's.
static inline int ip_find_trim(VipsImage *in, int *left, int *top, int *width, int *height,
                               double threshold) {
    return vips_find_trim(in, left, top, width, height, "threshold", threshold, NULL);
}

/// Each 2×2 block averaged into one pixel (a last odd row or column is left out): bilinear
/// sampling at the centre of each block, which is that average.
static inline int ip_halve(VipsImage *in, VipsImage **out) {
    VipsArrayInt *area = vips_array_int_newv(4, 0, 0, in->Xsize / 2, in->Ysize / 2);
    int status = vips_affine(in, out, 0.5, 0, 0, 0.5,
        "interpolate", vips_interpolate_bilinear_static(),
        "idx", -0.5, "idy", -0.5,
        "oarea", area,
        NULL);
    vips_area_unref(VIPS_AREA(area));
    return status;
}

/// Colour bands multiplied by alpha (the result is float), and back: around a resample, so
/// that the colour of transparent pixels does not bleed into the edges next to them (as
/// `vips_thumbnail` does).
static inline int ip_premultiply(VipsImage *in, VipsImage **out) { return vips_premultiply(in, out, NULL); }
static inline int ip_unpremultiply(VipsImage *in, VipsImage **out) { return vips_unpremultiply(in, out, NULL); }

static inline int ip_shrink_ceil(VipsImage *in, VipsImage **out, double h, double v) {
    return vips_shrink(in, out, h, v, "ceil", TRUE, NULL);
}

static inline int ip_zoom(VipsImage *in, VipsImage **out, int x, int y) {
    return vips_zoom(in, out, x, y, NULL);
}

static inline int ip_replicate(VipsImage *in, VipsImage **out, int across, int down) {
    return vips_replicate(in, out, across, down, NULL);
}

// MARK: arithmetic

/// out = in * a + b, per band (`n` values each); `uchar` clips to 0…255.
static inline int ip_linear(VipsImage *in, VipsImage **out, const double *a, const double *b, int n,
                            gboolean uchar) {
    return vips_linear(in, out, (double *) a, (double *) b, n, "uchar", uchar, NULL);
}

static inline int ip_add(VipsImage *a, VipsImage *b, VipsImage **out) { return vips_add(a, b, out, NULL); }
static inline int ip_subtract(VipsImage *a, VipsImage *b, VipsImage **out) { return vips_subtract(a, b, out, NULL); }
static inline int ip_multiply(VipsImage *a, VipsImage *b, VipsImage **out) { return vips_multiply(a, b, out, NULL); }
static inline int ip_divide(VipsImage *a, VipsImage *b, VipsImage **out) { return vips_divide(a, b, out, NULL); }
static inline int ip_pow_const(VipsImage *in, VipsImage **out, double c) { return vips_pow_const1(in, out, c, NULL); }
static inline int ip_rint(VipsImage *in, VipsImage **out) { return vips_rint(in, out, NULL); }
static inline int ip_invert(VipsImage *in, VipsImage **out) { return vips_invert(in, out, NULL); }
static inline int ip_more_eq_const(VipsImage *in, VipsImage **out, double c) {
    return vips_moreeq_const1(in, out, c, NULL);
}
static inline int ip_min(VipsImage *in, double *out) { return vips_min(in, out, NULL); }
static inline int ip_max(VipsImage *in, double *out) { return vips_max(in, out, NULL); }
static inline int ip_percent(VipsImage *in, double percent, int *threshold) {
    return vips_percent(in, percent, threshold, NULL);
}

/// Multiplies pixels by a `rows`×`cols` matrix (band recombination).
static inline int ip_recomb(VipsImage *in, VipsImage **out, const double *matrix, int rows, int cols) {
    VipsImage *m = vips_image_new_matrix_from_array(cols, rows, matrix, rows * cols);
    if (m == NULL) return -1;
    int result = vips_recomb(in, out, m, NULL);
    g_object_unref(m);
    return result;
}

static inline int ip_bandjoin_const(VipsImage *in, VipsImage **out, double c) {
    return vips_bandjoin_const1(in, out, c, NULL);
}

// MARK: filters

static inline int ip_gaussblur(VipsImage *in, VipsImage **out, double sigma) {
    return vips_gaussblur(in, out, sigma, NULL);
}

/// A Gaussian blur computed in float, with the mask cut where it falls below `min_ampl`
/// of its peak (libvips' default 0.2 cuts a sigma 1.5 mask to 5 taps; 0.003 keeps the
/// 11 taps, ±5 pixels, of the window SSIM is defined with).
static inline int ip_gaussblur_float(VipsImage *in, VipsImage **out, double sigma, double min_ampl) {
    return vips_gaussblur(in, out, sigma, "min_ampl", min_ampl, "precision", VIPS_PRECISION_FLOAT, NULL);
}

static inline int ip_rank(VipsImage *in, VipsImage **out, int width, int height, int index) {
    return vips_rank(in, out, width, height, index, NULL);
}

// MARK: drawing and compositing

static inline int ip_black(VipsImage **out, int width, int height, int bands) {
    return vips_black(out, width, height, "bands", bands, NULL);
}

static inline int ip_draw_rect(VipsImage *image, const double *ink, int n, int left, int top,
                               int width, int height) {
    return vips_draw_rect(image, (double *) ink, n, left, top, width, height, "fill", TRUE, NULL);
}

static inline int ip_draw_circle(VipsImage *image, const double *ink, int n, int cx, int cy, int radius) {
    return vips_draw_circle(image, (double *) ink, n, cx, cy, radius, "fill", TRUE, NULL);
}

/// Renders text as a one-band mask (0…255). `width` wraps; with `height` too, the size is
/// chosen to fit the box (autofit). `fontfile` may be NULL.
static inline int ip_text(VipsImage **out, const char *text, const char *font, int width, int height,
                          VipsAlign align, const char *fontfile) {
    if (height > 0 && fontfile != NULL)
        return vips_text(out, text, "font", font, "width", width, "height", height, "align", align,
            "fontfile", fontfile, NULL);
    if (height > 0)
        return vips_text(out, text, "font", font, "width", width, "height", height, "align", align, NULL);
    if (fontfile != NULL)
        return vips_text(out, text, "font", font, "width", width, "align", align, "fontfile", fontfile, NULL);
    return vips_text(out, text, "font", font, "width", width, "align", align, NULL);
}

/// `ip_text`, its pixels copied into an image of their own, and the image `vips_text` made
/// freed here: that image can hold the text operation, whose Pango objects would otherwise
/// be freed wherever the mask is released (another thread, outside the caller's text lock).
static inline int ip_text_detached(VipsImage **out, const char *text, const char *font, int width, int height,
                                   VipsAlign align, const char *fontfile) {
    VipsImage *made = NULL;
    if (ip_text(&made, text, font, width, height, align, fontfile))
        return -1;
    size_t size = 0;
    void *pixels = vips_image_write_to_memory(made, &size);
    if (pixels == NULL) {
        g_object_unref(made);
        return -1;
    }
    *out = vips_image_new_from_memory_copy(pixels, size, made->Xsize, made->Ysize, made->Bands, made->BandFmt);
    if (*out != NULL)
        (*out)->Type = made->Type;
    g_free(pixels);
    g_object_unref(made);
    return *out == NULL ? -1 : 0;
}

/// `overlay` over `base` at (x, y), alpha-composited.
static inline int ip_composite_over(VipsImage *base, VipsImage *overlay, VipsImage **out, int x, int y) {
    return vips_composite2(base, overlay, out, VIPS_BLEND_MODE_OVER, "x", x, "y", y, NULL);
}

/// Mixes `then` and `otherwise` by `mask` (0 → otherwise, 255 → then).
static inline int ip_blend(VipsImage *mask, VipsImage *then, VipsImage *otherwise, VipsImage **out) {
    return vips_ifthenelse(mask, then, otherwise, out, "blend", TRUE, NULL);
}

// MARK: more savers

static inline int ip_avifsave_buffer(VipsImage *in, void **buf, size_t *len, int quality, int effort,
                                     gboolean strip) {
    return vips_heifsave_buffer(in, buf, len, "Q", quality, "compression",
        VIPS_FOREIGN_HEIF_COMPRESSION_AV1, "effort", effort, "strip", strip, NULL);
}

static inline int ip_tiffsave_buffer(VipsImage *in, void **buf, size_t *len, gboolean strip) {
    return vips_tiffsave_buffer(in, buf, len, "compression", VIPS_FOREIGN_TIFF_COMPRESSION_DEFLATE,
        "strip", strip, NULL);
}

static inline int ip_gifsave_buffer(VipsImage *in, void **buf, size_t *len, gboolean strip) {
    return vips_gifsave_buffer(in, buf, len, "strip", strip, NULL);
}

// MARK: animation

static inline int ip_page_height(VipsImage *in) { return vips_image_get_page_height(in); }

/// The `delay` array (milliseconds per frame): its length, with `*out` pointing into the
/// image's metadata; 0 when there is none.
static inline int ip_delays(VipsImage *in, int **out) {
    int n = 0;
    if (vips_image_get_typeof(in, "delay") == 0) return 0;
    if (vips_image_get_array_int(in, "delay", out, &n) != 0) return 0;
    return n;
}

/// The `loop` count (0: forever), or -1 when the image has none.
static inline int ip_loop(VipsImage *in) {
    int loop = 0;
    if (vips_image_get_typeof(in, "loop") == 0 || vips_image_get_int(in, "loop", &loop) != 0) return -1;
    return loop;
}

/// Pictures stacked top to bottom (each as wide as the first).
static inline int ip_stack(VipsImage **in, int n, VipsImage **out) {
    return vips_arrayjoin(in, out, n, "across", 1, NULL);
}

/// A copy labelled as `n` pages of `page_height` rows with their delays and loop count
/// (`delays` NULL or `loop` < 0: left as they are).
static inline int ip_label_pages(VipsImage *in, VipsImage **out, int page_height, int n,
    const int *delays, int n_delays, int loop) {
    if (vips_copy(in, out, NULL) != 0) return -1;
    vips_image_set_int(*out, VIPS_META_PAGE_HEIGHT, page_height);
    vips_image_set_int(*out, VIPS_META_N_PAGES, n);
    if (delays != NULL) vips_image_set_array_int(*out, "delay", delays, n_delays);
    if (loop >= 0) vips_image_set_int(*out, "loop", loop);
    return 0;
}

#endif
