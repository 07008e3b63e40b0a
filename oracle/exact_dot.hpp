// An exactly summed dot product for the oracles (docs/matmul.md, "Oracle"):
// K exact products summed by mpfr_sum, correctly rounded at the working
// precision whatever the cancellation.
#pragma once
#include <cmath>
#include <vector>

#include "oracle/real.hpp"

namespace conform::oracle {

// K exact products (a double times a double fits 106 bits) summed by
// mpfr_sum into the working precision: one correct rounding, IEEE special
// values (0 * inf and inf - inf are NaN) and IEEE's sign of an exact zero.
class ExactDot {
public:
    explicit ExactDot(std::int64_t k) : terms_(static_cast<std::size_t>(k)), ptrs_(terms_.size()) {
        mpfr_init2(x_, 53);
        for (std::size_t i = 0; i < terms_.size(); ++i) {
            mpfr_init2(&terms_[i], 106);
            ptrs_[i] = &terms_[i];
        }
    }
    ~ExactDot() {
        mpfr_clear(x_);
        for (auto& t : terms_) mpfr_clear(&t);
    }
    ExactDot(const ExactDot&) = delete;
    ExactDot& operator=(const ExactDot&) = delete;

    void set(std::size_t i, double a, double b) {
        // A product that is itself a normal double (every product of two
        // values of 24 or fewer bits in FP32's range) is stored as one: the
        // FMA's residual is exact there, and zero means nothing was rounded.
        const double p = a * b;
        if (std::isnormal(p) && std::fma(a, b, -p) == 0) {
            mpfr_set_d(&terms_[i], p, MPFR_RNDN);
            return;
        }
        mpfr_set_d(x_, a, MPFR_RNDN);
        mpfr_mul_d(&terms_[i], x_, b, MPFR_RNDN);  // exact at 106 bits
    }
    Real sum() {
        Real r;
        if (terms_.empty()) return r;  // the empty sum: +0
        mpfr_sum(r.backend().data(), ptrs_.data(), static_cast<unsigned long>(ptrs_.size()), MPFR_RNDN);
        return r;
    }

private:
    mpfr_t x_;
    std::vector<__mpfr_struct> terms_;
    std::vector<mpfr_ptr> ptrs_;
};

}  // namespace conform::oracle
