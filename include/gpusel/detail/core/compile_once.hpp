// The compile-once mode: GPUSEL_COMPILE_ONCE, GPUSEL_IMPLEMENTATION, and the
// two macros the headers it covers are written with (Note [Compile-once mode]).
#pragma once

// Note [Compile-once mode]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// Header-only is the default. With GPUSEL_COMPILE_ONCE (which the compiled
// targets, gpusel::compiled and friends, give every file that links them) the
// headers listed in gpusel/implementation.hpp declare their out-of-line
// functions, and src/gpusel.cpp (src/gpusel_machine.cpp, the machine layer
// alone) defines them once. The rule: a non-template function that is not
// constexpr, not defined in its class and not on a copy's hot path is declared
// GPUSEL_API above `#if GPUSEL_DEFINITIONS` (default arguments there only) and
// defined GPUSEL_API below it; a member function defined below is declared
// GPUSEL_API in its class too. What stays inline in both modes: types,
// templates (Buffer<T>), constexpr functions, members defined in their class,
// the cuda layer's switching (guards, streams, the current device), and helpers
// used only by the definitions (plain `inline` below, declared nowhere else).
// In compile-once mode GPUSEL_API is an ABI tag, so a file compiled header-only
// beside compiled ones defines other symbols than libgpusel.a and the program
// has no two definitions of one function (ctest header_compile_once_abi_tag).
// A new such header is included by gpusel/implementation.hpp (or
// machine_implementation.hpp); the compile-once header units and src/'s
// -Werror=missing-declarations catch a half that is missing. What the mode
// saves a file is in docs/benchmarks.md (Compile cost).

#if defined(GPUSEL_IMPLEMENTATION) && !defined(GPUSEL_COMPILE_ONCE)
#define GPUSEL_COMPILE_ONCE
#endif

#if defined(GPUSEL_COMPILE_ONCE)
#define GPUSEL_API [[gnu::abi_tag("gpusel_compiled")]]
#if defined(GPUSEL_IMPLEMENTATION)
#define GPUSEL_DEFINITIONS 1
#else
#define GPUSEL_DEFINITIONS 0
#endif
#else
#define GPUSEL_API inline
#define GPUSEL_DEFINITIONS 1
#endif
