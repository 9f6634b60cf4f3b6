// The one file of the compile-once program that defines what the mode compiles once.
#include <gpusel/implementation.hpp>
