#include "impls/cpu/convert.hpp"

namespace conform::cpu {

float f16_to_f32_portable(std::uint16_t h) { return static_cast<float>(decode(Format::fp16, h)); }
std::uint16_t f32_to_f16_portable(float f) { return static_cast<std::uint16_t>(encode(Format::fp16, f)); }

}  // namespace conform::cpu
