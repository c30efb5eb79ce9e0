#ifndef CPARLEY_VIPS_H
#define CPARLEY_VIPS_H

/* Non-variadic wrappers of the libvips calls image derivation makes: Swift cannot call C variadic functions, and
   every optional argument libvips takes is a NULL-terminated name/value list. Each returns 0 on success and -1 on
   failure (the reason in vips_error_buffer()), like the libvips call it wraps. */

#include <stddef.h>
#include <vips/vips.h>

/* Initialises libvips with a bounded footprint: no operation cache (every upload is different), one worker thread
   per pipeline (derivation runs in request threads on a small machine), and loaders libvips marks untrusted
   (ImageMagick, PDF, SVG, ...) blocked. Call once. */
int parley_vips_init(void);

/* Opens an image from memory without decoding pixels: loaders read only the header until a pixel is asked for.
   Sequential access (pixels read once, top to bottom) and failing on truncated data, so a damaged file is an error
   rather than grey pixels. The buffer must outlive the image. */
VipsImage *parley_vips_open_buffer(const void *buf, size_t len);

/* The image turned upright from its orientation tag (which it then drops). */
int parley_vips_autorot(VipsImage *in, VipsImage **out);

/* The image moved to sRGB through its embedded ICC profile. */
int parley_vips_icc_to_srgb(VipsImage *in, VipsImage **out);

/* The image in another interpretation (sRGB, B_W), for inputs without an ICC profile (CMYK, 16-bit, ...). */
int parley_vips_colourspace(VipsImage *in, VipsImage **out, VipsInterpretation space);

/* The image scaled down to fit width x height, never up, with its alpha premultiplied while it is scaled (so
   transparent edges do not darken); the input is not rotated (it is upright already). */
int parley_vips_thumbnail_image(VipsImage *in, VipsImage **out, int width, int height);

/* The image scaled by `scale`: a box filter by the largest whole factor, then Lanczos for the rest (gap 0), about
   half the CPU of libvips' default, which keeps twice the target size for the Lanczos pass. */
int parley_vips_resize(VipsImage *in, VipsImage **out, double scale);

/* Bands [first, first + n). */
int parley_vips_extract_band(VipsImage *in, VipsImage **out, int first, int n);

/* The smallest pixel value of all bands. */
int parley_vips_min(VipsImage *in, double *out);

/* JPEG (quality 1-100, chroma subsampled 4:2:0 at every quality: libvips keeps full chroma from quality 90,
   which costs about 40% more CPU and bytes for a difference nobody sees in a photograph) or PNG bytes, to be freed with g_free; strip removes every metadata block (EXIF, XMP, IPTC,
   ICC) the image carries, 0 keeps them (tests build inputs with metadata that way). */
int parley_vips_jpeg_buffer(VipsImage *in, void **buf, size_t *len, int quality, int strip);
int parley_vips_png_buffer(VipsImage *in, void **buf, size_t *len, int strip);

/* Saves in the format of the file name's suffix (tests). */
int parley_vips_write_file(VipsImage *in, const char *path);

#endif
