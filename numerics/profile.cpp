#include "numerics/profile.hpp"

#include <charconv>
#include <stdexcept>
#include <vector>

namespace conform::props {

std::string rank_text(std::uint64_t rank) {
    switch (rank) {
        case kRankCr: return "cr";
        case kRankFaithful: return "faithful";
        case kRankStrict: return "strict";
        case kRankRigorous: return "rigorous";
        case kRankNone: return "none";
        default: return "ulp:" + std::to_string(rank - kRankUlpBase);
    }
}

std::string AccuracyProfile::text() const {
    return rank_text(rank) + (ftz ? "+ftz" : "") + (ieee ? "+ieee" : "");
}

namespace {

std::vector<std::string> split_plus(const std::string& s) {
    std::vector<std::string> parts;
    std::size_t start = 0;
    for (;;) {
        const std::size_t end = s.find('+', start);
        parts.push_back(s.substr(start, end == std::string::npos ? std::string::npos : end - start));
        if (end == std::string::npos) return parts;
        start = end + 1;
    }
}

std::uint64_t parse_rank(const std::string& part, const std::string& whole) {
    if (part == "cr") return kRankCr;
    if (part == "faithful") return kRankFaithful;
    if (part == "strict") return kRankStrict;
    if (part == "rigorous") return kRankRigorous;
    if (part.rfind("ulp:", 0) == 0) {
        std::uint64_t n = 0;
        const char* first = part.data() + 4;
        const char* last = part.data() + part.size();
        const auto [ptr, ec] = std::from_chars(first, last, n);
        if (ec != std::errc() || ptr != last || first == last || n == 0 || n > (std::uint64_t{1} << 40))
            throw std::invalid_argument("profile '" + whole + "': '" + part + "' needs a whole number of ulps 1.." +
                                        "2^40 (e.g. ulp:4)");
        return ulp_rank(n);
    }
    throw std::invalid_argument("profile '" + whole + "': unknown part '" + part + "' (" + profile_help() + ")");
}

}  // namespace

AccuracyProfile parse_profile(const std::string& text) {
    AccuracyProfile p;
    if (text.empty()) return p;
    bool have_rank = false;
    for (const std::string& part : split_plus(text)) {
        if (part == "ftz" || part == "ieee") {
            bool& flag = part == "ftz" ? p.ftz : p.ieee;
            if (flag) throw std::invalid_argument("profile '" + text + "': '" + part + "' given twice");
            flag = true;
            continue;
        }
        if (have_rank) throw std::invalid_argument("profile '" + text + "': more than one of cr, faithful, strict, rigorous, ulp:N");
        p.rank = parse_rank(part, text);
        have_rank = true;
    }
    return p;
}

const char* profile_help() {
    return "strict (default), cr, faithful, rigorous or ulp:N, optionally +ftz and/or +ieee, e.g. ulp:4+ftz";
}

}  // namespace conform::props
