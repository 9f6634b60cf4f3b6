// For a test program whose children start threads after a fork from a process
// with threads (the engine's kept workers), which ThreadSanitizer refuses by
// default; gpusel's child forgets the parent's threads and locks (Note [Caches
// across fork()]). It defines the TSan options hook, so include it in one file
// of the program only.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define GPUSEL_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define GPUSEL_TEST_TSAN 1
#endif
#endif
#if defined(GPUSEL_TEST_TSAN)
extern "C" const char* __tsan_default_options() { return "die_after_fork=0"; }
#endif
