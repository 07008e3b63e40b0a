// Host side of a CUDA kernel call, shared by every family (compiled into
// each build, cuda and cuda-emu): device buffers, every runtime call checked
// (a failure throws with the kernel's name, the call and CUDA's error
// string, which the suite reports as the property's failure), and tensors
// packed densely on their way to the device and unpacked on the way back.
#pragma once
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "impls/cuda/cuda_compat.cuh"
#include "numerics/tensor.hpp"

namespace conform::CONFORM_CUDA_NS {

inline void check(cudaError_t e, const char* call, const char* kernel) {
    if (e != cudaSuccess)
        throw std::runtime_error(std::string(kernel) + ": " + call + " failed: " + cudaGetErrorString(e));
}

// A device allocation freed on scope exit.
class DeviceBuffer {
public:
    DeviceBuffer(std::size_t bytes, const char* kernel) : bytes_(bytes) {
        check(cudaMalloc(&p_, bytes ? bytes : 1), "cudaMalloc", kernel);
    }
    ~DeviceBuffer() {
        if (p_) cudaFree(p_);
    }
    DeviceBuffer(DeviceBuffer&& o) noexcept : p_(o.p_), bytes_(o.bytes_) { o.p_ = nullptr; }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    template <class T>
    T* as() const { return static_cast<T*>(p_); }
    std::size_t bytes() const { return bytes_; }

private:
    void* p_ = nullptr;
    std::size_t bytes_;
};

inline std::size_t element_bytes(Format f) { return f == Format::fp32 ? 4 : f == Format::int8 || is_fp8(f) ? 1 : 2; }

// An output buffer is filled with all-ones bytes (NaN in every float
// format) before the kernel runs: an element the kernel never writes is
// then wrong every time, instead of holding whatever a freed buffer left
// (often the right answer of the previous call).
inline void poison(const DeviceBuffer& d, cudaStream_t s, const char* kernel) {
    check(cudaMemsetAsync(d.as<void>(), 0xff, d.bytes(), s), "cudaMemsetAsync", kernel);
}

// The view's elements, dense and row-major, in a device buffer.
inline void upload(const TensorView& v, const DeviceBuffer& d, cudaStream_t s, const char* kernel) {
    const std::size_t eb = element_bytes(v.format);
    std::vector<unsigned char> host(static_cast<std::size_t>(v.numel()) * eb);
    for (std::int64_t i = 0; i < v.numel(); ++i) {
        const std::uint64_t b = v.bits(i);
        std::memcpy(host.data() + static_cast<std::size_t>(i) * eb, &b, eb);  // little-endian low bytes
    }
    check(cudaMemcpyAsync(d.as<void>(), host.data(), host.size(), cudaMemcpyHostToDevice, s), "cudaMemcpyAsync", kernel);
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize", kernel);  // host is about to go out of scope
}

// A dense device buffer back into the (possibly strided) view.
inline void download(const DeviceBuffer& d, const TensorView& v, cudaStream_t s, const char* kernel) {
    const std::size_t eb = element_bytes(v.format);
    std::vector<unsigned char> host(static_cast<std::size_t>(v.numel()) * eb);
    check(cudaMemcpyAsync(host.data(), d.as<void>(), host.size(), cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync", kernel);
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize", kernel);
    for (std::int64_t i = 0; i < v.numel(); ++i) {
        std::uint64_t b = 0;
        std::memcpy(&b, host.data() + static_cast<std::size_t>(i) * eb, eb);
        v.set_bits(i, b);
    }
}

// A stream for one call, destroyed on scope exit.
class Stream {
public:
    explicit Stream(const char* kernel) { check(cudaStreamCreate(&s_), "cudaStreamCreate", kernel); }
    ~Stream() { cudaStreamDestroy(s_); }
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
    cudaStream_t get() const { return s_; }

private:
    cudaStream_t s_ = nullptr;
};

// After a launch: the launch's own error, then the kernel's.
inline void check_launch(cudaStream_t s, const char* kernel) {
    check(cudaGetLastError(), "kernel launch", kernel);
    check(cudaStreamSynchronize(s), "kernel execution", kernel);
}

}  // namespace conform::CONFORM_CUDA_NS
