// JSON from untrusted files: nlohmann's parser plus the checks it leaves out.
#pragma once
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace conform::io {

// Deeper nesting is refused: nothing in a case needs it, and nlohmann's dump()
// and comparison recurse, so a hostile [[[[...]]]] could exhaust the stack later.
constexpr int kMaxJsonDepth = 32;

// Parses `text` (field `field` of `source`, for messages).  Invalid JSON,
// duplicate object keys (which nlohmann would silently resolve to the last
// one) and nesting deeper than kMaxJsonDepth raise FormatError.
nlohmann::json parse_json(std::string_view text, const std::string& source, const std::string& field);

// "an object", "a string", "a number", ... for messages about ill-typed fields.
std::string json_kind(const nlohmann::json& j);

}  // namespace conform::io
