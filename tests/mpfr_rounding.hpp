// Reference rounding by MPFR itself, emulating a binary format: precision p,
// the format's exponent range and subnormals (mpfr_set_emin/emax +
// mpfr_subnormalize), an independent route to what numerics/format.cpp
// does on the bits.  Past the range MPFR gives +-Inf; E4M3's own rule
// (its top pattern is NaN, not 480) is the caller's.
#pragma once
#include <mpfr.h>

#include "numerics/format.hpp"

namespace conform::testing {

inline double mpfr_round_emulated(mpfr_srcptr x, Format f) {
    const FormatInfo& fi = info(f);
    const mpfr_exp_t emin = mpfr_get_emin(), emax = mpfr_get_emax();
    mpfr_t r;
    mpfr_init2(r, fi.precision);
    // MPFR's exponent convention is m in [1/2, 1): shift by one.
    mpfr_set_emin(fi.emin - fi.precision + 2);
    mpfr_set_emax(fi.emax + 1);
    int t = mpfr_set(r, x, MPFR_RNDN);
    t = mpfr_check_range(r, t, MPFR_RNDN);
    mpfr_subnormalize(r, t, MPFR_RNDN);
    const double d = mpfr_get_d(r, MPFR_RNDN);
    mpfr_set_emin(emin);
    mpfr_set_emax(emax);
    mpfr_clear(r);
    return d;
}

}  // namespace conform::testing
