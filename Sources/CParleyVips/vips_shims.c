#include "CParleyVips.h"

int parley_vips_init(void) {
    if (VIPS_INIT("parley") != 0) return -1;
    vips_cache_set_max(0);
    vips_cache_set_max_mem(0);
    vips_cache_set_max_files(0);
    vips_concurrency_set(1);
    vips_block_untrusted_set(TRUE);
    return 0;
}

VipsImage *parley_vips_open_buffer(const void *buf, size_t len) {
    return vips_image_new_from_buffer(buf, len, "", "access", VIPS_ACCESS_SEQUENTIAL, "fail_on", VIPS_FAIL_ON_TRUNCATED, NULL);
}

int parley_vips_autorot(VipsImage *in, VipsImage **out) { return vips_autorot(in, out, NULL); }

int parley_vips_icc_to_srgb(VipsImage *in, VipsImage **out) {
    return vips_icc_transform(in, out, "srgb", "embedded", TRUE, "intent", VIPS_INTENT_PERCEPTUAL, NULL);
}

int parley_vips_colourspace(VipsImage *in, VipsImage **out, VipsInterpretation space) {
    return vips_colourspace(in, out, space, NULL);
}

int parley_vips_thumbnail_image(VipsImage *in, VipsImage **out, int width, int height) {
    return vips_thumbnail_image(in, out, width, "height", height, "size", VIPS_SIZE_DOWN, "no_rotate", TRUE, NULL);
}

int parley_vips_resize(VipsImage *in, VipsImage **out, double scale) { return vips_resize(in, out, scale, "gap", 0.0, NULL); }

int parley_vips_extract_band(VipsImage *in, VipsImage **out, int first, int n) {
    return vips_extract_band(in, out, first, "n", n, NULL);
}

int parley_vips_min(VipsImage *in, double *out) { return vips_min(in, out, NULL); }

int parley_vips_jpeg_buffer(VipsImage *in, void **buf, size_t *len, int quality, int strip) {
    return vips_jpegsave_buffer(in, buf, len, "Q", quality, "subsample_mode", VIPS_FOREIGN_SUBSAMPLE_ON, "strip", strip ? TRUE : FALSE, NULL);
}

int parley_vips_png_buffer(VipsImage *in, void **buf, size_t *len, int strip) {
    return vips_pngsave_buffer(in, buf, len, "strip", strip ? TRUE : FALSE, NULL);
}

int parley_vips_write_file(VipsImage *in, const char *path) { return vips_image_write_to_file(in, path, NULL); }
