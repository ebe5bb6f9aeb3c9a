// See CResample.h. The vector code is SSE2 (every x86-64 has it); elsewhere the same
// arithmetic runs as plain C.
#include "CResample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

enum {
    SUBPIXELS = 64,  // VIPS_TRANSFORM_SCALE: masks at 1/64-pixel steps
    SHIFT = 12,      // VIPS_INTERPOLATE_SHIFT: masks are in 1/4096ths
    MAX_POINTS = 2000,
};

// The number of points of libvips' lanczos3 mask for a reduction by `shrink`.
static int lanczos3_points(double shrink) { return 2 * (int)rint(3 * shrink) + 1; }

// libvips' `calculate_coefficients_lanczos` with a = 3, normalised to sum 1, then each
// truncated to 1/4096ths as `reducev`/`reduceh` make their integer tables.
static void lanczos3_masks(int16_t *masks, int n, double shrink) {
    double c[MAX_POINTS];
    for (int t = 0; t <= SUBPIXELS; t++) {
        const double x = (float)t / SUBPIXELS;
        const double half = x + n / 2.0 - 1;
        double sum = 0;
        for (int i = 0; i < n; i++) {
            const double xp = (i - half) / shrink;
            double l;
            if (xp == 0.0) l = 1.0;
            else if (xp < -3 || xp > 3) l = 0.0;
            else l = 3.0 * sin(M_PI * xp) * sin(M_PI * xp / 3.0) / (M_PI * M_PI * xp * xp);
            c[i] = l;
            sum += l;
        }
        for (int i = 0; i < n; i++) masks[t * n + i] = (int16_t)(int)(c[i] / sum * (1 << SHIFT));
    }
}

static inline uint8_t clip_round(int sum) {
    sum = (sum + (1 << (SHIFT - 1))) >> SHIFT;
    return sum < 0 ? 0 : sum > 255 ? 255 : (uint8_t)sum;
}

// out[j] = Σ c[i] × rows[i][j], rounded and clipped, for j < length.
static void filter_rows(uint8_t *out, const uint8_t *const *rows, const int16_t *c, int n, size_t length) {
    size_t j = 0;
#if defined(__SSE2__)
    const __m128i zero = _mm_setzero_si128(), half = _mm_set1_epi32(1 << (SHIFT - 1));
    for (; j + 16 <= length; j += 16) {
        __m128i a0 = zero, a1 = zero, a2 = zero, a3 = zero;
        // Two rows at a time: their samples interleaved, each pair times (c[i], c[i+1]).
        for (int i = 0; i < n; i += 2) {
            const int paired = i + 1 < n;
            const __m128i p = _mm_loadu_si128((const __m128i *)(rows[i] + j));
            const __m128i q = paired ? _mm_loadu_si128((const __m128i *)(rows[i + 1] + j)) : zero;
            const uint32_t c1 = paired ? (uint16_t)c[i + 1] : 0;
            const __m128i cc = _mm_set1_epi32((int32_t)((c1 << 16) | (uint16_t)c[i]));
            const __m128i plo = _mm_unpacklo_epi8(p, zero), phi = _mm_unpackhi_epi8(p, zero);
            const __m128i qlo = _mm_unpacklo_epi8(q, zero), qhi = _mm_unpackhi_epi8(q, zero);
            a0 = _mm_add_epi32(a0, _mm_madd_epi16(_mm_unpacklo_epi16(plo, qlo), cc));
            a1 = _mm_add_epi32(a1, _mm_madd_epi16(_mm_unpackhi_epi16(plo, qlo), cc));
            a2 = _mm_add_epi32(a2, _mm_madd_epi16(_mm_unpacklo_epi16(phi, qhi), cc));
            a3 = _mm_add_epi32(a3, _mm_madd_epi16(_mm_unpackhi_epi16(phi, qhi), cc));
        }
        a0 = _mm_srai_epi32(_mm_add_epi32(a0, half), SHIFT);
        a1 = _mm_srai_epi32(_mm_add_epi32(a1, half), SHIFT);
        a2 = _mm_srai_epi32(_mm_add_epi32(a2, half), SHIFT);
        a3 = _mm_srai_epi32(_mm_add_epi32(a3, half), SHIFT);
        // Saturating packs: the clip to 0…255.
        _mm_storeu_si128((__m128i *)(out + j), _mm_packus_epi16(_mm_packs_epi32(a0, a1), _mm_packs_epi32(a2, a3)));
    }
#endif
    for (; j < length; j++) {
        int sum = 0;
        for (int i = 0; i < n; i++) sum += c[i] * rows[i][j];
        out[j] = clip_round(sum);
    }
}

// One pass of `reducev`: `lines` lines to `outLines` lines. Output line y is centred on
// input line (y + ½)·shrink − ½ − offset, where the offset shares the rounding of the
// output size between both ends; lines past either end repeat the end line (libvips'
// `embed` with `extend copy`). The centre is carried from line to line by adding the
// factor, as libvips does within a region: where a centre falls on a 1/64 step (a factor
// such as 641/320), the sum and the product round to either side of it, and the masks
// differ. (libvips starts the sum again at each region it computes. Across, its regions
// are whole lines, so across this gives its samples exactly; down, a sample can differ by
// a few levels where one of its regions starts.)
typedef struct {
    int n, margin, lines;
    double shrink, first, centre;
    int16_t *masks;
    const uint8_t **rows;
} Pass;

static void pass_free(Pass *pass) {
    free(pass->masks);
    free(pass->rows);
}

static int pass_init(Pass *pass, int lines, int outLines, double shrink) {
    const int n = lanczos3_points(shrink);
    *pass = (Pass){.n = n, .margin = (n + 1) / 2 - 1, .lines = lines, .shrink = shrink};
    if (n > MAX_POINTS) return -1;
    pass->masks = malloc(sizeof(int16_t) * (size_t)n * (SUBPIXELS + 1));
    pass->rows = malloc(sizeof(*pass->rows) * (size_t)n);
    if (!pass->masks || !pass->rows) {
        pass_free(pass);
        return -1;
    }
    lanczos3_masks(pass->masks, n, shrink);
    const double extra = outLines * shrink - lines;
    const double offset = (1 + extra) / 2.0 - 1;
    pass->first = pass->centre = 0.5 * shrink - 0.5 - offset;
    return 0;
}

// The pass's next `count` output lines (of `length` bytes) from `in`'s lines, `stride`
// apart, to `out`, `outStride` apart.
static void pass_run(Pass *pass, const uint8_t *in, size_t stride, size_t length,
                     uint8_t *out, size_t outStride, int count) {
    const int n = pass->n;
    for (int y = 0; y < count; y++, pass->centre += pass->shrink) {
        const double centre = pass->centre;
        const int first = (int)centre;
        const int steps = (int)(centre * SUBPIXELS * 2);
        const int t = ((steps & (SUBPIXELS * 2 - 1)) + 1) >> 1;
        for (int i = 0; i < n; i++) {
            int line = first + i - pass->margin;
            line = line < 0 ? 0 : line >= pass->lines ? pass->lines - 1 : line;
            pass->rows[i] = in + (size_t)line * stride;
        }
        filter_rows(out + (size_t)y * outStride, pass->rows, pass->masks + (size_t)t * n, n, length);
    }
}

// A w×h picture of `bands`-byte pixels turned into h×w (pixel (x, y) to (y, x)), in
// 32×32 blocks so that both sides stay in the cache.
static void transpose(const uint8_t *in, size_t stride, int width, int height, int bands,
                      uint8_t *out, size_t outStride) {
    enum { BLOCK = 32 };
    for (int y0 = 0; y0 < height; y0 += BLOCK) {
        const int y1 = y0 + BLOCK < height ? y0 + BLOCK : height;
        for (int x0 = 0; x0 < width; x0 += BLOCK) {
            const int x1 = x0 + BLOCK < width ? x0 + BLOCK : width;
            for (int y = y0; y < y1; y++) {
                const uint8_t *p = in + (size_t)y * stride;
                uint8_t *q = out + (size_t)y * bands;
                switch (bands) {
                case 1:
                    for (int x = x0; x < x1; x++) q[(size_t)x * outStride] = p[x];
                    break;
                case 3:
                    for (int x = x0; x < x1; x++) {
                        uint8_t *o = q + (size_t)x * outStride;
                        o[0] = p[3 * x];
                        o[1] = p[3 * x + 1];
                        o[2] = p[3 * x + 2];
                    }
                    break;
                default:
                    for (int x = x0; x < x1; x++) memcpy(q + (size_t)x * outStride, p + (size_t)x * bands, (size_t)bands);
                }
            }
        }
    }
}

int rs_reduced_length(int length, double shrink) {
    return shrink > 1.0 ? (int)(length / shrink + 0.5) : length;
}

// libvips' `reducev`/`reduceh` with gap 2: a box shrink by ⌊length ÷ reduced ÷ 2⌋ first
// when that is 2 or more.
static int single_pass(int length, double shrink) {
    if (shrink <= 1.0) return 1;
    const int reduced = rs_reduced_length(length, shrink);
    return reduced > 0 && floor((double)length / reduced / 2.0) <= 1 && lanczos3_points(shrink) <= MAX_POINTS;
}

int rs_reduces_as_libvips(int width, int height, double hshrink, double vshrink) {
    return single_pass(width, hshrink) && single_pass(height, vshrink);
}

int rs_reduce_lanczos3(const uint8_t *in, size_t stride, int width, int height, int bands,
                       uint8_t *out, size_t outStride, double hshrink, double vshrink) {
    if (!rs_reduces_as_libvips(width, height, hshrink, vshrink)) return -1;
    const int outWidth = rs_reduced_length(width, hshrink), outHeight = rs_reduced_length(height, vshrink);
    const size_t line = (size_t)width * bands;
    // Vertical first, as `vips_resize` does: it leaves fewer lines for the second pass.
    // The horizontal pass runs on the transposed picture, where a column's samples lie
    // side by side and the same vector code applies. Both go STRIP output lines at a time,
    // so that the scratch memory is three strips, not three pictures.
    enum { STRIP = 64 };
    const size_t turned = (size_t)STRIP * bands;
    Pass down = {0}, across = {0};
    uint8_t *strip = NULL, *columns = NULL, *reduced = NULL;
    int status = -1;
    if (vshrink > 1.0 && pass_init(&down, height, outHeight, vshrink)) goto end;
    if (hshrink > 1.0 && pass_init(&across, width, outWidth, hshrink)) goto end;
    if (vshrink > 1.0 && hshrink > 1.0 && !(strip = malloc(line * STRIP))) goto end;
    if (hshrink > 1.0 && (!(columns = malloc(turned * width)) || !(reduced = malloc(turned * outWidth)))) goto end;
    for (int y = 0; y < outHeight; y += STRIP) {
        const int count = outHeight - y < STRIP ? outHeight - y : STRIP;
        uint8_t *target = out + (size_t)y * outStride;
        if (hshrink <= 1.0) {
            // Down only (at least one pass runs: the caller asked for a reduction).
            if (vshrink > 1.0) pass_run(&down, in, stride, line, target, outStride, count);
            else for (int k = 0; k < count; k++) memcpy(target + (size_t)k * outStride, in + (size_t)(y + k) * stride, line);
            continue;
        }
        const uint8_t *lines = in + (size_t)y * stride;
        size_t linesStride = stride;
        if (vshrink > 1.0) {
            pass_run(&down, in, stride, line, strip, line, count);
            lines = strip;
            linesStride = line;
        }
        const size_t length = (size_t)count * bands;
        transpose(lines, linesStride, width, count, bands, columns, turned);
        across.centre = across.first;
        pass_run(&across, columns, turned, length, reduced, turned, outWidth);
        transpose(reduced, turned, count, outWidth, bands, target, outStride);
    }
    status = 0;
end:
    pass_free(&down);
    pass_free(&across);
    free(strip);
    free(columns);
    free(reduced);
    return status;
}

int rs_halve(const uint8_t *in, size_t stride, int width, int height, int bands,
             uint8_t *out, size_t outStride) {
    const int outWidth = width / 2, outHeight = height / 2;
    const size_t length = (size_t)outWidth * 2 * bands;
    uint16_t *sums = malloc(sizeof(uint16_t) * (length + 1));
    if (!sums) return -1;
    for (int y = 0; y < outHeight; y++) {
        const uint8_t *a = in + (size_t)(2 * y) * stride, *b = a + stride;
        uint8_t *q = out + (size_t)y * outStride;
        // The two lines summed sample by sample (vectorised by the compiler), then each
        // pixel's sum with its right neighbour's.
        for (size_t i = 0; i < length; i++) sums[i] = (uint16_t)(a[i] + b[i]);
        switch (bands) {
        case 3:
            for (int x = 0; x < outWidth; x++) {
                const uint16_t *s = sums + (size_t)x * 6;
                q[3 * x] = (uint8_t)((s[0] + s[3] + 2) >> 2);
                q[3 * x + 1] = (uint8_t)((s[1] + s[4] + 2) >> 2);
                q[3 * x + 2] = (uint8_t)((s[2] + s[5] + 2) >> 2);
            }
            break;
        default:
            for (int x = 0; x < outWidth; x++)
                for (int k = 0; k < bands; k++) {
                    const uint16_t *s = sums + (size_t)x * 2 * bands + k;
                    q[(size_t)x * bands + k] = (uint8_t)((s[0] + s[bands] + 2) >> 2);
                }
        }
    }
    free(sums);
    return 0;
}
