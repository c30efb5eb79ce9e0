#ifndef CVIPS_SHIM_H
#define CVIPS_SHIM_H
/* libvips' C API; its variadic calls are wrapped in CParleyVips, since Swift cannot call them. */
#include <vips/vips.h>
#endif
