#include "properties/statistics.hpp"

#include <cmath>
#include <cstdio>
#include <string>

namespace conform::props {

double sign_test_tail(std::int64_t votes_for, std::int64_t votes_against) {
    const double m = static_cast<double>(votes_for + votes_against);
    if (m == 0) return 1;
    const double t = std::fabs(static_cast<double>(votes_for) - m / 2);
    return std::fmin(1.0, 2 * std::exp(-2 * t * t / m));
}

std::string rounding_bias(const Stats& s, const char* unit) {
    static const char* side[2][2] = {{"above", "below"}, {"away from zero", "toward zero"}};
    for (std::size_t i = 0; i < 2; ++i) {
        const std::int64_t f = s.votes_for()[i], a = s.votes_against()[i];
        const double p = sign_test_tail(f, a);
        if (p >= kBiasAlpha) continue;
        const bool more_for = f > a;
        // std::snprintf: this library is installed for other projects and links nothing but the oracle's deps.
        char text[320];
        std::snprintf(text, sizeof text,
                      "rounding bias: the results that are not correctly rounded lie %s in %lld of %lld %s "
                      "(a fair sign test gives p < %.1e; significance %.0e)",
                      side[i][more_for ? 0 : 1], static_cast<long long>(more_for ? f : a),
                      static_cast<long long>(f + a), unit, p, kBiasAlpha);
        return text;
    }
    return "";
}

const char* vote_unit(const OpSpec& op) {
    return op.kind == OpKind::unary || op.kind == OpKind::gated ? "elements" : "cases";
}

}  // namespace conform::props
