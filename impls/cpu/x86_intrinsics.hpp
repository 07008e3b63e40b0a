// <immintrin.h>, with GCC 12's false warnings about its own code silenced
// inside it alone: the AVX-512 intrinsics pass `_mm512_undefined_ps()` and
// friends (`__m512 __Y = __Y;`) as don't-care operands, which GCC 12 reports
// as uninitialized wherever they are inlined (GCC bug 105593, fixed in 13).
// The diagnostic state is by source location, so this holds only where this
// header is the first to include <immintrin.h>: include it before Eigen.
#pragma once

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
