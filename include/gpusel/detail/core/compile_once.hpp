// The compile-once mode: GPUSEL_COMPILE_ONCE, GPUSEL_IMPLEMENTATION, and the
// two macros the headers it covers are written with (Note [Compile-once mode]).
#pragma once

// Note [Compile-once mode]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// Header-only is the default. With GPUSEL_COMPILE_ONCE (which the compiled
// targets, gpusel::compiled and friends, give every file that links them)
// gpusel's out-of-line functions are compiled once, by src/gpusel.cpp
// (src/gpusel_machine.cpp, the machine layer alone), and the other files see
// their declarations only. The rule: a non-template function that is not
// constexpr, not defined in its class and not on a copy's hot path is declared
// GPUSEL_API in x.hpp (default arguments there only) and defined GPUSEL_API in
// x-inl.hpp beside it; a member function defined there is declared GPUSEL_API in
// its class too. x.hpp ends by including x-inl.hpp where GPUSEL_DEFINITIONS is
// 1: header-only, or the one implementation file. What stays inline in both
// modes: types, templates (Buffer<T>), constexpr functions, members defined in
// their class, the cuda layer's switching (guards, streams, the current
// device), and helpers only the definitions use (plain `inline`, in an -inl.hpp
// or a header that only -inl.hpp files include). In compile-once mode
// GPUSEL_API is an ABI tag, so a file compiled header-only beside compiled ones
// defines other symbols than libgpusel.a: no two definitions of one function
// (ctest header_compile_once_abi_tag). A new x-inl.hpp is reached from
// gpusel/implementation.hpp (or machine_implementation.hpp).

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
