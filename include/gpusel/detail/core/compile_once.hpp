// The compile-once mode: GPUSEL_COMPILE_ONCE, GPUSEL_IMPLEMENTATION, and the
// two macros the headers it covers are written with (Note [Compile-once mode]).
#pragma once

// Note [Compile-once mode]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// By default gpusel is header-only: every function is defined inline in its
// header, and every translation unit that includes the header compiles its body.
// Two parts of gpusel are most of what <gpusel/gpusel.hpp> costs a file, though
// a file only calls into them: the discovery and start-up code (the machine
// layer: the inventory, explain(), pick, leases, local ranks; and beneath it
// the CUDA_VISIBLE_DEVICES parser, visible_devices.hpp, with the token
// helpers beneath it, text.hpp's escaping, and local_rank_device() on top),
// which a program runs once, and the data layer's engine (memory
// allocation, the copy engine with its threads, staging and caches, its
// options, and the untyped buffer beneath Buffer<T>). So a program may compile
// them once instead, as stb's single-file libraries do:
//  - define GPUSEL_COMPILE_ONCE for every translation unit of the program
//    (CMake: target_compile_definitions(app PRIVATE GPUSEL_COMPILE_ONCE); or
//    -DGPUSEL_COMPILE_ONCE). Those headers then declare their functions and
//    define none of them;
//  - in exactly one translation unit, define GPUSEL_IMPLEMENTATION before the
//    first gpusel header, or include <gpusel/implementation.hpp> first, which
//    does that and includes every such header: that unit defines them, once,
//    with external linkage. A program that links no CUDA runtime (the gpusel
//    command) includes <gpusel/machine_implementation.hpp> instead, the
//    machine layer alone, CUDA-free. Forgetting it fails at link time
//    (undefined reference to gpusel::query_inventory ...); a second one fails
//    there too (multiple definition).
// Every translation unit of a program must use the same mode: a unit compiled
// header-only beside compile-once units defines the same functions inline, which
// C++ does not allow (it links, and may even work, but nothing promises it).
// GPUSEL_IMPLEMENTATION implies GPUSEL_COMPILE_ONCE in its unit.
//
// The cuda layer's error paths are compiled once too: the functions that build
// the message of a failed CUDA call or device switch (detail/cuda/cuda_status.hpp,
// current_device.hpp, detail/cuda/device_switch.hpp) and synchronize(device). They
// run only when something failed, and building their text is much of what
// those headers cost a file: in compile-once mode guard.hpp adds 157 M compiler
// instructions rather than 206 to a typical training file (1788 M alone) with
// g++ 12 (callgrind; tests/hardening/header_cost.py's T). When the error paths
// moved, on std::atomic, it added 107 ms of CPU time rather than 148.
//
// What stays in the headers in both modes: types, templates (Buffer<T> is
// one), constexpr functions, small member functions defined in their class,
// the functions a copy's hot path inlines, and the cuda layer's switching
// (guards, streams, the current device), whose small functions are cheap to
// compile and worth inlining where they are called.
//
// The engine's own headers (detail/data/staged_copy.hpp, staging_pool.hpp,
// engine_cache.hpp, parallel_parts.hpp, peer_access.hpp) stay header-only:
// only definitions include them, so in compile-once mode only the one unit
// with GPUSEL_IMPLEMENTATION compiles them.
//
// How such a header is written: its types and the declarations
// of its functions first, default arguments in the declarations only, each
// declaration marked GPUSEL_API (`inline` header-only, nothing in
// compile-once mode); then `#if GPUSEL_DEFINITIONS` and the
// definitions, marked GPUSEL_API again. A helper used only by the
// definitions below it is declared nowhere else and stays plain `inline`: it is
// emitted where it is used. A function that another header's inline code calls
// (runtime.hpp's device_count() calls detail::count_devices_without_cuda) is
// declared like a public one. The compile-once header units (tests/hardening)
// compile every header alone in this mode, so a declaration that other code
// needs and the header lacks fails there, and they compile the definitions with
// -Werror=missing-declarations, so a GPUSEL_API definition without its
// declaration fails too.

#if defined(GPUSEL_IMPLEMENTATION) && !defined(GPUSEL_COMPILE_ONCE)
#define GPUSEL_COMPILE_ONCE
#endif

#if defined(GPUSEL_COMPILE_ONCE)
#define GPUSEL_API
#if defined(GPUSEL_IMPLEMENTATION)
#define GPUSEL_DEFINITIONS 1
#else
#define GPUSEL_DEFINITIONS 0
#endif
#else
#define GPUSEL_API inline
#define GPUSEL_DEFINITIONS 1
#endif
