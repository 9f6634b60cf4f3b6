// The one file of the compile-once program that defines the machine layer.
#include <gpusel/implementation.hpp>
