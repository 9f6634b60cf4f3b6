// The definitions of gpusel/detail/data/memory/streaming_copy.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
// This header includes no CUDA header.
#pragma once

#include "gpusel/detail/data/memory/streaming_copy.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace gpusel::detail {

GPUSEL_API void streaming_copy(void* destination, const void* source, std::size_t bytes) noexcept {
#if defined(__SSE2__)
  auto* out = static_cast<char*>(destination);
  const auto* in = static_cast<const char*>(source);
  // Ordinary stores up to the first 16-byte boundary of the destination.
  const std::size_t head = std::min<std::size_t>(bytes, (16 - reinterpret_cast<std::uintptr_t>(out) % 16) % 16);
  std::memcpy(out, in, head);
  std::size_t offset = head;
  for (; offset + 64 <= bytes; offset += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + offset));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + offset + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + offset + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + offset + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(out + offset), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(out + offset + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(out + offset + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(out + offset + 48), d);
  }
  _mm_sfence();  // streaming stores are weakly ordered: make them visible before returning
  std::memcpy(out + offset, in + offset, bytes - offset);
#else
  std::memcpy(destination, source, bytes);
#endif
}

}  // namespace gpusel::detail
