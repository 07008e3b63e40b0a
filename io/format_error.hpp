// The one exception type of the dump-file readers.  Case files come from
// outside the project (PyTorch/NumPy users, other tools), so every way a file
// can be malformed ends here, with a message that names the file and the
// field: "case.safetensors: tensor \"x\": data_offsets [0, 64) but ...".
// The CLI maps it to exit status 2 (bad input).
#pragma once
#include <stdexcept>
#include <string>
#include <string_view>

namespace conform::io {

class FormatError : public std::runtime_error {
public:
    // source: the file (or the name given to a parse-from-memory call);
    // field: where in it, e.g. `tensor "x"`, `__metadata__ "conform.op"`,
    // `header length`; empty when the whole file is at fault.
    FormatError(std::string source, std::string field, const std::string& detail)
        : std::runtime_error(compose(source, field, detail)), source_(std::move(source)), field_(std::move(field)) {}

    const std::string& source() const noexcept { return source_; }
    const std::string& field() const noexcept { return field_; }

private:
    static std::string compose(const std::string& source, const std::string& field, const std::string& detail) {
        return source + ": " + (field.empty() ? "" : field + ": ") + detail;
    }
    std::string source_;
    std::string field_;
};

// Untrusted text shown in a message (a tensor name, a key, a dtype string,
// a parser's echo of the input): non-printable bytes, quotes and backslashes
// as \xNN, cut after max_shown bytes, so a hostile name can neither flood the
// terminal nor inject control sequences.
std::string printable(std::string_view text, std::size_t max_shown);
// printable(text, 64) in double quotes (not "quoted": ADL would find std::quoted).
std::string quote(std::string_view text);
// The field naming one tensor: tensor "x".
std::string tensor_field(std::string_view name);

}  // namespace conform::io
