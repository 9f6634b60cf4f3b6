// The compile-once mode: GPUSEL_COMPILE_ONCE, and the two macros the headers it
// covers are written with (Note [Compile-once mode]).
#pragma once

// Note [Compile-once mode]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// Header-only is the default. With GPUSEL_COMPILE_ONCE (which the compiled
// targets, gpusel::compiled and friends, give every file that links them)
// gpusel's out-of-line functions are compiled once, into libgpusel.a, and the
// other files see their declarations only. The rule: a non-template function
// that is not constexpr, not defined in its class and not on a copy's hot path
// is declared GPUSEL_API in x.hpp (default arguments there only) and defined
// GPUSEL_API in x-inl.hpp beside it; a member function defined there is
// declared GPUSEL_API in its class too. Header-only (GPUSEL_HEADER_ONLY), x.hpp
// ends by including x-inl.hpp; compiled once, the implementation headers
// (gpusel/machine/implementation.hpp: core and machine layers;
// gpusel/runtime_implementation.hpp: the layers on the CUDA runtime) list every
// x-inl.hpp, each in one. Definitions include headers, never other definitions:
// a helper that two -inl.hpp files use is declared in a detail header of its
// own and defined in its -inl.hpp (machine/detail/system/system_text.hpp), and an
// -inl.hpp is included only by its header and the lists (ctest header_layers).
// What stays inline in both modes: types, templates (Buffer<T>), constexpr
// functions, members defined in their class, the cuda layer's switching
// (guards, streams, the current device), and helpers only definitions use:
// plain `inline` in an -inl.hpp, or in a detail header that only -inl.hpp files
// include (detail/core/environment.hpp, the engine's staged_copy.hpp). In
// compile-once mode GPUSEL_API is an ABI tag, so a file compiled header-only
// beside compiled ones defines other symbols than libgpusel.a: no two
// definitions of one function (ctest header_compile_once_abi_tag).

#if defined(GPUSEL_COMPILE_ONCE)
#define GPUSEL_API [[gnu::abi_tag("gpusel_compiled")]]
#define GPUSEL_HEADER_ONLY 0
#else
#define GPUSEL_API inline
#define GPUSEL_HEADER_ONLY 1
#endif
