#include "io/json_text.hpp"

#include <set>
#include <vector>

#include "io/format_error.hpp"

namespace conform::io {

nlohmann::json parse_json(std::string_view text, const std::string& source, const std::string& field) {
    using nlohmann::json;
    std::vector<std::set<std::string>> keys_seen;  // one set per open object
    auto check = [&](int depth, json::parse_event_t event, json& parsed) {
        switch (event) {
            case json::parse_event_t::object_start:
            case json::parse_event_t::array_start:
                if (depth >= kMaxJsonDepth)
                    throw FormatError(source, field, "JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
                if (event == json::parse_event_t::object_start) keys_seen.emplace_back();
                break;
            case json::parse_event_t::object_end: keys_seen.pop_back(); break;
            case json::parse_event_t::key:
                if (!keys_seen.back().insert(parsed.get<std::string>()).second)
                    throw FormatError(source, field, "duplicate key " + quote(parsed.get<std::string>()));
                break;
            default: break;
        }
        return true;
    };
    try {
        return json::parse(text.begin(), text.end(), check);
    } catch (const json::exception& e) {
        // Syntax errors are parse_error, but a number beyond double's range
        // (1e400) is out_of_range: catch the base.  e.what() is
        // "[json.exception.parse_error.101] parse error at line 1, column 5: ...";
        // keep the part after the bracketed id and quote any bytes echoed from the input.
        std::string what = e.what();
        const auto close = what.find("] ");
        if (close != std::string::npos) what = what.substr(close + 2);
        throw FormatError(source, field, "invalid JSON: " + printable(what, 240));
    }
}

std::string json_kind(const nlohmann::json& j) {
    switch (j.type()) {
        case nlohmann::json::value_t::object: return "an object";
        case nlohmann::json::value_t::array: return "an array";
        case nlohmann::json::value_t::string: return "a string";
        case nlohmann::json::value_t::boolean: return "a boolean";
        case nlohmann::json::value_t::null: return "null";
        case nlohmann::json::value_t::number_float: return "a non-integer number";
        default: return "an integer";
    }
}

}  // namespace conform::io
