"""dlpack_numpy: numpy, a real DLPack 1.x producer and consumer, judges gpusel's
export and import (numpy_peer.cpp is the C side, loaded with ctypes).

Usage: numpy_peer.py LIBRARY. Exits 77, saying why, when this Python has no
numpy 2.1 or newer (.ci/run installs it into build/venv-numpy)."""
import ctypes
import gc
import sys
import weakref

try:
    import numpy as np
except ImportError:
    print(f"skipped: {sys.executable} has no numpy (.ci/run installs numpy>=2.1 into build/venv-numpy; "
          "configure with -DGPUSEL_NUMPY_PYTHON=build/venv-numpy/bin/python)")
    sys.exit(77)
if tuple(int(part) for part in np.__version__.split(".")[:2]) < (2, 1):
    print(f"skipped: numpy {np.__version__} is older than 2.1, the first to speak DLPack 1.x both ways")
    sys.exit(77)

lib = ctypes.CDLL(sys.argv[1])
lib.peer_unused_name.restype = ctypes.c_void_p
lib.peer_used_name.restype = ctypes.c_void_p
lib.peer_export.restype = ctypes.c_void_p
lib.peer_export.argtypes = [ctypes.c_int64, ctypes.c_double]
lib.peer_exported_address.restype = ctypes.c_void_p
lib.peer_import.argtypes = [ctypes.c_void_p, ctypes.c_int]
lib.peer_error.restype = ctypes.c_char_p
lib.peer_imported_address.restype = ctypes.c_void_p
lib.peer_imported_size.restype = ctypes.c_int64
lib.peer_imported_sum.restype = ctypes.c_double

capsule_new = ctypes.pythonapi.PyCapsule_New
capsule_new.restype = ctypes.py_object
capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
capsule_is_valid = ctypes.pythonapi.PyCapsule_IsValid
capsule_is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]
capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
capsule_pointer.restype = ctypes.c_void_p
capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
capsule_set_name = ctypes.pythonapi.PyCapsule_SetName
capsule_set_name.argtypes = [ctypes.py_object, ctypes.c_void_p]
destructor = ctypes.cast(lib.peer_capsule_destructor, ctypes.c_void_p)


def exported_capsule(count, start):
    return capsule_new(lib.peer_export(count, start), lib.peer_unused_name(), destructor)


class GpuselTensor:
    """What numpy.from_dlpack takes: __dlpack__ gives the capsule, once."""

    def __init__(self, capsule):
        self.capsule = capsule
        self.asked = None

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        self.asked = max_version
        capsule, self.capsule = self.capsule, None
        return capsule

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU


def check(condition, what):
    if not condition:
        print("FAILED:", what)
        sys.exit(1)
    print("ok:", what)


def numpy_takes_a_buffer():
    source = GpuselTensor(exported_capsule(5, 0.5))
    array = np.from_dlpack(source)
    check(source.asked is not None and source.asked[0] >= 1, f"numpy asks for DLPack {source.asked}")
    check(array.dtype == np.float64 and array.tolist() == [0.5, 1.5, 2.5, 3.5, 4.5], "numpy sees the values")
    check(array.__array_interface__["data"][0] == lib.peer_exported_address(), "at the Buffer's address")
    check(lib.peer_deleter_calls() == 0, "gpusel's deleter waits for numpy")
    del source, array
    gc.collect()
    check(lib.peer_deleter_calls() == 1, "gpusel's deleter ran once when numpy dropped the array")
    capsule = exported_capsule(3, 0)
    del capsule
    gc.collect()
    check(lib.peer_deleter_calls() == 2, "a capsule nobody took deletes its tensor once")


def a_buffer_takes_numpys_array():
    array = np.arange(6, dtype=np.float64).reshape(2, 3) * 2
    alive = weakref.ref(array)
    references = sys.getrefcount(array)
    capsule = array.__dlpack__(max_version=(1, 0))
    check(capsule_is_valid(capsule, b"dltensor_versioned") == 1, "numpy's capsule is dltensor_versioned")
    check(sys.getrefcount(array) == references + 1, "numpy's tensor holds the array")
    check(lib.peer_import(capsule_pointer(capsule, b"dltensor_versioned"), 0) == 0, "the Buffer takes it")
    capsule_set_name(capsule, lib.peer_used_name())
    check(lib.peer_imported_address() == array.__array_interface__["data"][0], "at numpy's address")
    check(lib.peer_imported_size() == 6 and lib.peer_imported_sum() == array.sum(), "the Buffer sees the values")
    del capsule
    gc.collect()
    check(sys.getrefcount(array) == references + 1, "the used capsule left the tensor to the Buffer")
    del array
    gc.collect()
    check(alive() is not None, "the Buffer keeps numpy's array alive")
    lib.peer_release_import()
    gc.collect()
    check(alive() is None, "numpy's deleter ran when the Buffer died, and the array went")


def refused(array, says):
    references = sys.getrefcount(array)
    capsule = array.__dlpack__(max_version=(1, 0))
    status = lib.peer_import(capsule_pointer(capsule, b"dltensor_versioned"), 0)
    message = lib.peer_error().decode()
    check(status == -1 and says in message, f"refused: {message}")
    check(capsule_is_valid(capsule, b"dltensor_versioned") == 1, "the capsule is still the caller's")
    del capsule
    gc.collect()
    check(sys.getrefcount(array) == references, "and dropping it ran numpy's deleter")


def errors_leave_the_tensor_to_its_owner():
    refused(np.zeros(4, dtype=np.float32), "float32 tensor")
    read_only = np.zeros(4)
    read_only.flags.writeable = False
    refused(read_only, "read-only")
    refused(np.zeros(8)[::2], "not contiguous")


numpy_takes_a_buffer()
a_buffer_takes_numpys_array()
errors_leave_the_tensor_to_its_owner()
print(f"passed with numpy {np.__version__}")
