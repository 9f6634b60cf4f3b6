// Deliberately empty: a shared library whose SONAME is libcuda.so.1, loaded by
// the emulated runtime when it initializes so that a process built on the
// emulation shows the driver library loaded exactly when a real one would.
// It provides no driver function; nothing calls into it.
extern "C" int gpusel_fake_libcuda_marker() { return 1; }
