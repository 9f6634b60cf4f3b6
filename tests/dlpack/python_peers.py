"""dlpack_python_peers: examples/python_dlpack (a Python.h-only extension) against numpy, PyTorch and JAX, both ways.

Each peer this Python has is run: a gpusel Buffer into the peer's from_dlpack (the same address, the values, gpusel's
deleter once, after the last view dies), each capsule kind, and the peer's tensor into a Buffer (the same address,
the values, the peer's deleter once when the Buffer dies; refused, with the capsule left to free it, when it is not
a contiguous float64 tensor). A peer missing here is skipped, saying so; with none, the test exits 77.
GPUSEL_REQUIRE_DLPACK_PEERS=numpy,torch,jax makes a missing peer a failure (.ci/run).

Usage: python_peers.py EXTENSION_DIR
"""
import ctypes
import gc
import os
import sys
import weakref

sys.path.insert(0, sys.argv[1])
import gpusel_dlpack_example as g  # noqa: E402

checks = 0
is_valid = ctypes.pythonapi.PyCapsule_IsValid
is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]


def check(condition, what):
    global checks
    if not condition:
        print("FAILED:", what)
        sys.exit(1)
    checks += 1
    print("ok:", what)


def capsule_name(capsule):
    for name in (b"dltensor_versioned", b"dltensor", b"used_dltensor_versioned", b"used_dltensor"):
        if is_valid(capsule, name):
            return name.decode()
    return None


def refused(call, words):
    try:
        call()
    except BufferError as error:
        return words in str(error)
    return False


def the_extensions_own_protocol():
    x = g.arange(3)
    check(x.__dlpack_device__() == (1, 0), "__dlpack_device__() is (kDLCPU, 0)")
    legacy = x.__dlpack__()
    check(capsule_name(legacy) == "dltensor", "__dlpack__() gives the legacy capsule, \"dltensor\"")
    check(refused(lambda: x.__dlpack__(), "exported already"), "a second __dlpack__ is a BufferError")
    check(g.exports_alive() == 1, "the unconsumed capsule holds the tensor")
    del legacy
    gc.collect()
    check(g.exports_alive() == 0, "an unconsumed capsule's destructor runs the deleter, once")
    versioned = g.arange(3).__dlpack__(max_version=(1, 1))
    check(capsule_name(versioned) == "dltensor_versioned", "max_version=(1, 1) gives \"dltensor_versioned\"")
    del versioned
    check(g.exports_alive() == 0, "and its destructor the deleter")
    check(capsule_name(g.arange(1).__dlpack__(max_version=(0, 8))) == "dltensor", "max_version=(0, 8): legacy")
    check(refused(lambda: g.arange(1).__dlpack__(stream=1), "stream=None"), "a stream for a CPU tensor is refused")
    check(refused(lambda: g.arange(1).__dlpack__(copy=True), "no copies"), "copy=True is refused")


def consumer_checks(peer, from_dlpack, address_of, values_of, view_of):
    x = g.arange(5, 0.5)
    address = x.address()
    taken = from_dlpack(x)
    check(values_of(taken) == [0.5, 1.5, 2.5, 3.5, 4.5], f"{peer} reads a Buffer's values")
    check(address_of(taken) == address, f"{peer} takes it at the Buffer's address")
    check(g.exports_alive() == 1, f"gpusel's deleter waits for {peer}")
    view = view_of(taken) if view_of else None
    del taken, x
    gc.collect()
    if view is not None:
        check(g.exports_alive() == 1, f"{peer}'s view keeps the Buffer's memory")
        del view
        gc.collect()
    check(g.exports_alive() == 0, f"gpusel's deleter ran once, after {peer}'s last view died")


def producer_checks(peer, make, address_of, alive):
    """make(kind) gives the peer's float64 tensor of 0..5 ("plain"), or one a Buffer refuses."""
    tensor = make("plain")
    witness = alive(tensor)
    taken = g.take(tensor)
    check(taken.address() == address_of(tensor), f"a Buffer takes {peer}'s tensor at its address")
    check(taken.values() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0], f"and reads its values")
    del tensor
    gc.collect()
    check(witness(), f"{peer}'s tensor lives while the Buffer holds it")
    taken.release()
    gc.collect()
    check(not witness(), f"{peer}'s deleter ran when the Buffer died")
    for kind, words in (("transposed", "not contiguous"), ("float32", "element type is float64"),
                        ("strided", "not contiguous"), ("channels_last", "not contiguous")):
        tensor = make(kind)
        if tensor is None:
            continue
        witness = alive(tensor)
        check(refused(lambda: g.take(tensor), words), f"a {kind} {peer} tensor is refused: {words}")
        del tensor
        gc.collect()
        check(not witness(), f"and the refused capsule freed the {kind} {peer} tensor")


def numpy_peer(np):
    consumer_checks("numpy", np.from_dlpack, lambda a: a.__array_interface__["data"][0], lambda a: a.tolist(),
                    lambda a: a[1:3])

    def make(kind):
        base = np.arange(6.0) if kind != "float32" else np.arange(6.0, dtype=np.float32)
        return {"plain": base, "float32": base, "transposed": base.reshape(2, 3).T, "strided": base[::2]}.get(kind)

    def alive(array):  # numpy's DLPack export holds the array itself
        witness = weakref.ref(array)
        return lambda: witness() is not None

    producer_checks("numpy", make, lambda a: a.__array_interface__["data"][0], alive)


def torch_peer(torch):
    consumer_checks("torch", torch.from_dlpack, lambda t: t.data_ptr(), lambda t: t.tolist(), lambda t: t[1:3])
    x = g.arange(2)
    legacy = torch.utils.dlpack.from_dlpack(x.__dlpack__())
    check(legacy.data_ptr() == x.address(), "torch takes the legacy capsule at the same address")
    del legacy
    gc.collect()
    check(g.exports_alive() == 0, "and runs its deleter once")
    t = torch.zeros(2, dtype=torch.float64)
    check(capsule_name(t.__dlpack__()) == "dltensor", "torch's t.__dlpack__() is the legacy capsule")
    check(capsule_name(t.__dlpack__(max_version=(1, 0))) == "dltensor_versioned",
          "torch's t.__dlpack__(max_version=(1, 0)) is the versioned one")

    def make(kind):
        base = torch.arange(6, dtype=torch.float64 if kind != "float32" else torch.float32)
        return {"plain": base, "float32": base, "transposed": base.reshape(2, 3).T, "strided": base[::2],
                "channels_last": torch.arange(16, dtype=torch.float64).reshape(1, 4, 2, 2).to(
                    memory_format=torch.channels_last)}.get(kind)

    def alive(tensor):  # torch's DLPack export holds the tensor's storage, not the Python object
        reference = tensor.untyped_storage()._weak_ref()
        return lambda: not torch.UntypedStorage._expired(reference)

    producer_checks("torch", make, lambda t: t.data_ptr(), alive)
    negative = torch._neg_view(torch.ones(3, dtype=torch.float64))
    taken = g.take(negative)
    check(taken.address() == negative.data_ptr() and negative.tolist() == [-1.0, -1.0, -1.0] and
          taken.values() == [1.0, 1.0, 1.0],
          "torch exports a negative view unresolved: torch shows -1, a consumer reads 1 (docs/dlpack.md)")


class Producer:
    """An object whose __dlpack__ gives a gpusel capsule of the kind chosen, whatever it is asked."""

    def __init__(self, versioned):
        self.exported, self.versioned, self.asked = g.arange(3), versioned, None

    def __dlpack__(self, **asked):
        self.asked = asked
        return self.exported.__dlpack__(max_version=(1, 0) if self.versioned else None)

    def __dlpack_device__(self):
        return (1, 0)


def jax_peer(jax):
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    consumer_checks("jax", jax.dlpack.from_dlpack, lambda a: a.unsafe_buffer_pointer(), lambda a: a.tolist(), None)
    legacy = Producer(versioned=False)
    taken = jax.dlpack.from_dlpack(legacy)
    check("max_version" not in legacy.asked, f"JAX never asks for a version: __dlpack__({legacy.asked})")
    del taken, legacy
    gc.collect()
    versioned = Producer(versioned=True)
    try:
        jax.dlpack.from_dlpack(versioned)
        refusal = ""
    except Exception as error:  # jaxlib's JaxRuntimeError
        refusal = str(error)
    check('must be a capsule with name "dltensor"' in refusal, f"JAX refuses the versioned capsule: {refusal}")
    del versioned
    gc.collect()
    check(g.exports_alive() == 0, "and the capsule it refused ran gpusel's deleter, once")
    own = jnp.arange(3.0)
    check(capsule_name(own.__dlpack__(max_version=(1, 1))) == "dltensor",
          "JAX's own __dlpack__ gives the legacy capsule, whatever max_version asks")

    def make(kind):
        return {"plain": jnp.arange(6.0, dtype=jnp.float64), "float32": jnp.arange(6.0, dtype=jnp.float32)}.get(kind)

    def alive(array):  # JAX's DLPack export keeps an array of its own among jax.live_arrays()
        others = len(jax.live_arrays()) - 1
        return lambda: len(jax.live_arrays()) > others

    producer_checks("jax", make, lambda a: a.unsafe_buffer_pointer(), alive)


def main():
    required = [p for p in os.environ.get("GPUSEL_REQUIRE_DLPACK_PEERS", "").split(",") if p]
    the_extensions_own_protocol()
    ran = []
    for name, run in (("numpy", numpy_peer), ("torch", torch_peer), ("jax", jax_peer)):
        try:
            module = __import__(name)
        except ImportError as error:
            print(f"skipped peer {name}: {sys.executable} cannot import it ({error})")
            if name in required:
                print(f"FAILED: {name} is required (GPUSEL_REQUIRE_DLPACK_PEERS)")
                return 1
            continue
        before = checks
        run(module)
        ran.append(f"{name} {getattr(module, '__version__', '?')}: {checks - before} checks")
    print("; ".join(ran) or "no peer")
    return 0 if ran else 77


if __name__ == "__main__":
    sys.exit(main())
