// What a call is doing, for the message of an Error it may throw, formatted
// only when it throws.
#pragma once

#include <string>
#include <type_traits>

namespace gpusel::detail {

// Note [Error context costs nothing until an error]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// gpusel's errors say what was being done, e.g. "gpusel::Buffer::to(cuda:0) of
// 1024 elements (4096 bytes) on cpu". Formatting that text costs several
// string allocations, as much as a fifth of a 4 KiB copy on an H200, so it is
// never formatted on the way to success: a function that may throw takes an
// ErrorContext, a reference to a callable that formats the text, and calls it
// only to build the Error. Pass a named lambda (or a temporary, for the length
// of the call); an ErrorContext refers to it and must not outlive it, so it is
// a parameter type, never a member or a local.
class ErrorContext {
 public:
  template <class Format, class = std::enable_if_t<!std::is_same_v<std::decay_t<Format>, ErrorContext> &&
                                                   std::is_invocable_r_v<std::string, const Format&>>>
  ErrorContext(const Format& format) noexcept  // implicit, as a function reference is
      : format_(&format), call_([](const void* object) { return (*static_cast<const Format*>(object))(); }) {}

  std::string operator()() const { return call_(format_); }

 private:
  const void* format_;
  std::string (*call_)(const void*);
};

}  // namespace gpusel::detail
