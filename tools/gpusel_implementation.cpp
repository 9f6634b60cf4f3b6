// The gpusel command is built in compile-once mode (Note [Compile-once mode]):
// gpusel.cpp declares the machine layer, and this file defines it.
#include <gpusel/machine_implementation.hpp>
