// The "__metadata__" of a conform safetensors file (case/1, model/1): string
// values, some of them JSON text.  Shared by the case and model-dump readers so
// both name fields the same way: __metadata__ "conform.format".
#pragma once
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "io/safetensors.hpp"

namespace conform::io {

std::string metadata_field(std::string_view key);

// The metadata itself; FormatError (field "__metadata__") when the file has
// none, with `needed` saying what a conform file keeps there.
const std::map<std::string, std::string>& require_metadata(const SafetensorsFile& file, const std::string& source,
                                                           const std::string& needed);
// The value under `key`, or nullptr.
const std::string* metadata_value(const std::map<std::string, std::string>& meta, std::string_view key);

// `j` when it is a JSON object; FormatError naming `field` otherwise.
nlohmann::json object_value(nlohmann::json j, const std::string& source, const std::string& field);
// The JSON object stored as text under metadata key `key`.
nlohmann::json metadata_object(const std::string& text, const std::string& source, std::string_view key);

}  // namespace conform::io
