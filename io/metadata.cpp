#include "io/metadata.hpp"

#include "io/format_error.hpp"
#include "io/json_text.hpp"

namespace conform::io {

std::string metadata_field(std::string_view key) { return "__metadata__ " + quote(key); }

const std::map<std::string, std::string>& require_metadata(const SafetensorsFile& file, const std::string& source,
                                                           const std::string& needed) {
    if (!file.metadata) throw FormatError(source, "__metadata__", "missing: " + needed);
    return *file.metadata;
}

const std::string* metadata_value(const std::map<std::string, std::string>& meta, std::string_view key) {
    const auto it = meta.find(std::string(key));
    return it == meta.end() ? nullptr : &it->second;
}

nlohmann::json object_value(nlohmann::json j, const std::string& source, const std::string& field) {
    if (!j.is_object()) throw FormatError(source, field, "is " + json_kind(j) + ", not a JSON object");
    return j;
}

nlohmann::json metadata_object(const std::string& text, const std::string& source, std::string_view key) {
    const std::string field = metadata_field(key);
    return object_value(parse_json(text, source, field), source, field);
}

}  // namespace conform::io
