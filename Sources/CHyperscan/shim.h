#ifndef CHYPERSCAN_SHIM_H
#define CHYPERSCAN_SHIM_H
/* Hyperscan's C API: compiles many patterns into one automaton and matches them in one pass, in time linear in the
   text (blocklists, docs/moderation.md#blocklists). */
#include <hs/hs.h>
#endif
