// Plug-in kernels: a shared library exporting a table of kernels through the
// C ABI of include/conform/plugin.h, loaded with dlopen and wrapped as
// registry entries (backend "plugin") that the property suite runs like any
// built-in kernel.
//
// Every call goes through guarded copies of the tensors: inputs on read-only
// pages, outputs between canary bytes and inaccessible guard pages, so that a
// write outside the outputs is caught (a canary found changed throws
// PluginViolation; a write to a guard page or an input faults, and
// describe_fault() names the tensor for the crash report).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "impls/registry.hpp"

namespace conform::plugin {

// A library that cannot be used: missing, not loadable, no entry symbol, or a
// bad table.  The message names the file and the field.
struct LoadError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// The kernel returned a non-zero status.
struct KernelError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// The kernel wrote outside its outputs (a canary or a gap between strided
// elements changed).
struct PluginViolation : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// The ABI's dtype codes (conform_dtype) for the suite's formats and back.
// The suite holds an I32 output (int8_gemm's exact accumulator) as FP64,
// which represents every int32 exactly: format_of(CONFORM_I32) is fp64.
std::int32_t dtype_of(Format f);
std::optional<Format> format_of(std::int32_t dtype);

class Handle;  // the dlopen handle, closed when the last kernel using it goes

struct Library {
    std::string path;
    std::vector<KernelInfo> kernels;  // in table order; each keeps the library loaded
    int abi_version = 1;              // of the table it exported (2: conform_plugin_v2)
};

// dlopen(path, RTLD_NOW | RTLD_LOCAL), take conform_plugin_v2's table (else
// conform_plugin_v1's), check the ABI version and validate every descriptor.  Throws LoadError naming path and the field
// ("kernels[2] \"x.silu\": op: unknown op 'silu2'").
Library load(const std::string& path);

// For a fault handler: when addr lies in a guard or a read-only input of the
// plug-in call in progress, writes a one-line description ("write to
// read-only input 'x'", "12 bytes past the end of output 'y'") into buf
// (NUL-terminated) and returns true.  Async-signal-safe: no allocation.
bool describe_fault(const void* addr, char* buf, std::size_t size);

}  // namespace conform::plugin
