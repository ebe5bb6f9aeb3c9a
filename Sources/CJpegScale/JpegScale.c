#include "CJpegScale.h"

// jpeglib.h uses FILE and size_t without including their headers.
#include <stdio.h>
#include <stdlib.h>
#include <setjmp.h>
#include <jpeglib.h>

/// libjpeg's error manager, with a way out: `error_exit` jumps back to the caller instead
/// of exiting the process, and a warning (corrupt data libjpeg would paper over) is an error.
struct scale_error {
    struct jpeg_error_mgr manager;
    jmp_buf back;
};

static void scale_error_exit(j_common_ptr info) {
    longjmp(((struct scale_error *)info->err)->back, 1);
}

static void scale_emit_message(j_common_ptr info, int level) {
    // Level -1 is a warning (corrupt data); positive levels are trace messages.
    if (level < 0) scale_error_exit(info);
}

int js_decode_scaled(const uint8_t *data, size_t length, int side, size_t max_pixels, uint8_t **pixels,
                     int *width, int *height, int *bands) {
    struct jpeg_decompress_struct info;
    struct scale_error error;
    // Read again after a longjmp: kept in memory, not in a register.
    uint8_t *volatile out = NULL;
    *pixels = NULL;
    info.err = jpeg_std_error(&error.manager);
    error.manager.error_exit = scale_error_exit;
    error.manager.emit_message = scale_emit_message;
    if (setjmp(error.back)) {
        jpeg_destroy_decompress(&info);
        free(out);
        return -1;
    }
    jpeg_create_decompress(&info);
    jpeg_mem_src(&info, data, (unsigned long)length);
    jpeg_read_header(&info, TRUE);
    if (info.jpeg_color_space == JCS_CMYK || info.jpeg_color_space == JCS_YCCK) {
        jpeg_destroy_decompress(&info);
        return -1;
    }
    unsigned int longer = info.image_width > info.image_height ? info.image_width : info.image_height;
    unsigned int denominator = 1;
    for (unsigned int candidate = 8; candidate >= 2; candidate /= 2) {
        if (longer / candidate >= (unsigned int)side) {
            denominator = candidate;
            break;
        }
    }
    info.out_color_space = info.num_components == 1 ? JCS_GRAYSCALE : JCS_RGB;
    info.scale_num = 1;
    info.scale_denom = denominator;
    jpeg_calc_output_dimensions(&info);
    if ((size_t)info.output_width * (size_t)info.output_height > max_pixels) {
        jpeg_destroy_decompress(&info);
        return -1;
    }
    size_t stride = (size_t)info.output_width * (size_t)info.output_components;
    out = malloc(stride * (size_t)info.output_height);
    if (out == NULL) {
        jpeg_destroy_decompress(&info);
        return -1;
    }
    jpeg_start_decompress(&info);
    while (info.output_scanline < info.output_height) {
        JSAMPROW row = out + (size_t)info.output_scanline * stride;
        jpeg_read_scanlines(&info, &row, 1);
    }
    *width = (int)info.output_width;
    *height = (int)info.output_height;
    *bands = info.output_components;
    jpeg_finish_decompress(&info);
    jpeg_destroy_decompress(&info);
    *pixels = out;
    return 0;
}
