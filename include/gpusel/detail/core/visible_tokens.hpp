// The little of the CUDA_VISIBLE_DEVICES grammar that the CUDA runtime layer
// needs for its error messages, without the parser (gpusel/visible_devices.hpp,
// which includes this): how a token reads, and the map as far as the value
// alone tells it. CUDA-free and cheap, since every guard's error path uses it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "gpusel/detail/core/compile_once.hpp"

namespace gpusel::detail {

// cudaErrorNoDevice and cudaErrorInvalidDevice, spelled without a CUDA header
// (current_device.hpp checks that they match cudaError_t).
inline constexpr int kCudaErrorNoDevice = 100;
inline constexpr int kCudaErrorInvalidDevice = 101;

// Whether `token` is a UUID token ("GPU-..." or "MIG-...").
GPUSEL_API bool is_uuid_token(std::string_view token) noexcept;

// An index token as the driver reads it (Note [How the driver reads CUDA_VISIBLE_DEVICES]):
// nullopt when it has no digit, else the 32-bit signed value.
GPUSEL_API std::optional<int> read_index_token(std::string_view token) noexcept;

// "1 CUDA device is visible (cuda:0)", "2 CUDA devices are visible (cuda:0..cuda:1)".
GPUSEL_API std::string visible_count_text(int count);

// The map as far as it can be told from the value alone once the runtime has
// said it shows `runtime_count` devices: the kept tokens are then exactly the
// first runtime_count tokens (the list ends at the first token not kept, and a
// value naming a device twice makes the runtime fail). For errors, where asking
// NVML would be slow: "cuda:0 is physical GPU 1" or "cuda:0 is GPU-948e02bd".
GPUSEL_API std::string describe_runtime_map(const std::optional<std::string>& value, int runtime_count);

}  // namespace gpusel::detail

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/detail/core/visible_tokens-inl.hpp"
#endif
