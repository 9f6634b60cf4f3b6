// A Python extension, with nothing but Python.h and gpusel, that speaks DLPack as
// Python's array libraries do (docs/dlpack.md, "From Python"):
//
//   import gpusel_dlpack_example as g
//   x = g.arange(6)                    # a gpusel Buffer<double> of 0, 1, ..., 5
//   a = numpy.from_dlpack(x)           # or torch.from_dlpack(x), jax.dlpack.from_dlpack(x): no copy
//   b = g.take(torch.ones(3, dtype=torch.float64))   # their tensor in a Buffer<double>, no copy
//
// An exported object answers __dlpack__(stream=None, max_version=None, dl_device=None,
// copy=None) with a capsule named "dltensor_versioned" when the consumer passes
// max_version >= (1, 0), else the legacy "dltensor", and __dlpack_device__() with
// (kDLCPU, 0). A capsule no consumer took frees its tensor in its destructor; a
// consumer renames what it takes "used_dltensor[_versioned]", and so does take().
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <gpusel/buffer.hpp>
#include <gpusel/dlpack.hpp>

#include <atomic>
#include <cstdint>
#include <new>
#include <optional>
#include <utility>

namespace {

using Versioned = gpusel::dlpack::ManagedTensorVersioned;
using Legacy = gpusel::dlpack::ManagedTensor;

// Exported tensors whose deleter has not run yet: gpusel's deleter, wrapped to count.
std::atomic<long> exports_alive{0};  // a deleter may run on any thread
void (*versioned_deleter)(Versioned*) = nullptr;
void (*legacy_deleter)(Legacy*) = nullptr;
void counted_versioned_deleter(Versioned* self) {
  --exports_alive;
  versioned_deleter(self);
}
void counted_legacy_deleter(Legacy* self) {
  --exports_alive;
  legacy_deleter(self);
}

// The destructor of a capsule: one a consumer took was renamed "used_..." and is the consumer's to delete.
void versioned_capsule_destructor(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, "dltensor_versioned") == 0) return;
  auto* managed = static_cast<Versioned*>(PyCapsule_GetPointer(capsule, "dltensor_versioned"));
  if (managed->deleter != nullptr) managed->deleter(managed);
}
void legacy_capsule_destructor(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, "dltensor") == 0) return;
  auto* managed = static_cast<Legacy*>(PyCapsule_GetPointer(capsule, "dltensor"));
  if (managed->deleter != nullptr) managed->deleter(managed);
}

// --- Exported: a Buffer, until a consumer takes it --------------------------

struct Exported {
  PyObject ob_base;                              // PyObject_HEAD
  std::optional<gpusel::Buffer<double>> buffer;  // empty once exported
  const void* address;                           // the Buffer's data(), where the tensor's elements are
};

// Whether max_version is a tuple (major, minor) with major >= 1.
bool wants_versioned(PyObject* max_version) {
  if (max_version == nullptr || max_version == Py_None) return false;
  long major = 0;
  long minor = 0;
  if (!PyArg_ParseTuple(max_version, "ll", &major, &minor)) return false;
  return major >= 1;
}

PyObject* exported_dlpack(PyObject* self, PyObject* args, PyObject* kwargs) {
  static const char* names[] = {"stream", "max_version", "dl_device", "copy", nullptr};
  PyObject *stream = Py_None, *max_version = Py_None, *dl_device = Py_None, *copy = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$OOOO", const_cast<char**>(names), &stream, &max_version, &dl_device,
                                   &copy))
    return nullptr;
  auto& exported = *reinterpret_cast<Exported*>(self);
  if (stream != Py_None) return PyErr_Format(PyExc_BufferError, "a CPU tensor takes stream=None");
  if (copy == Py_True) return PyErr_Format(PyExc_BufferError, "gpusel_dlpack_example makes no copies");
  if (dl_device != Py_None) {
    long type = 0, id = 0;
    if (!PyArg_ParseTuple(dl_device, "ll", &type, &id)) return nullptr;
    if (type != gpusel::dlpack::kDLCPU) return PyErr_Format(PyExc_BufferError, "the tensor is on kDLCPU");
  }
  if (!exported.buffer) return PyErr_Format(PyExc_BufferError, "this Buffer was exported already");
  const bool versioned = wants_versioned(max_version);
  if (PyErr_Occurred() != nullptr) return nullptr;
  try {  // on an Error the Buffer is unchanged, still exported.buffer
    if (versioned) {
      Versioned* managed = gpusel::to_dlpack(std::move(*exported.buffer));
      exported.buffer.reset();
      versioned_deleter = managed->deleter;
      managed->deleter = &counted_versioned_deleter;
      ++exports_alive;
      return PyCapsule_New(managed, "dltensor_versioned", &versioned_capsule_destructor);
    }
    Legacy* managed = gpusel::to_dlpack_unversioned(std::move(*exported.buffer));
    exported.buffer.reset();
    legacy_deleter = managed->deleter;
    managed->deleter = &counted_legacy_deleter;
    ++exports_alive;
    return PyCapsule_New(managed, "dltensor", &legacy_capsule_destructor);
  } catch (const gpusel::Error& error) {
    return PyErr_Format(PyExc_BufferError, "%s", error.what());
  }
}

PyObject* exported_address(PyObject* self, PyObject* /*unused*/) {
  return PyLong_FromVoidPtr(const_cast<void*>(reinterpret_cast<Exported*>(self)->address));
}

PyObject* exported_dlpack_device(PyObject* /*self*/, PyObject* /*unused*/) {
  return Py_BuildValue("(ii)", static_cast<int>(gpusel::dlpack::kDLCPU), 0);
}

// Instances of a heap type hold a reference to it.
void exported_dealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  reinterpret_cast<Exported*>(self)->buffer.~optional();
  type->tp_free(self);
  Py_DECREF(type);
}

PyMethodDef exported_methods[] = {
    {"__dlpack__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&exported_dlpack)),
     METH_VARARGS | METH_KEYWORDS, "The Buffer as a DLPack capsule (once)."},
    {"__dlpack_device__", &exported_dlpack_device, METH_NOARGS, "(kDLCPU, 0)"},
    {"address", &exported_address, METH_NOARGS, "The Buffer's data() as an int."},
    {nullptr, nullptr, 0, nullptr}};

PyType_Slot exported_slots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(&exported_dealloc)}, {Py_tp_methods, exported_methods}, {0, nullptr}};
PyType_Spec exported_spec = {"gpusel_dlpack_example.Exported", sizeof(Exported), 0, Py_TPFLAGS_DEFAULT, exported_slots};
PyTypeObject* exported_type = nullptr;

// --- Taken: a Buffer holding a peer's tensor -------------------------------

struct Taken {
  PyObject ob_base;  // PyObject_HEAD
  std::optional<gpusel::Buffer<double>> buffer;
};

PyObject* taken_address(PyObject* self, PyObject* /*unused*/) {
  auto& taken = *reinterpret_cast<Taken*>(self);
  return PyLong_FromVoidPtr(taken.buffer ? static_cast<void*>(taken.buffer->data()) : nullptr);
}

PyObject* taken_values(PyObject* self, PyObject* /*unused*/) {
  const auto& taken = *reinterpret_cast<Taken*>(self);
  PyObject* list = PyList_New(0);
  if (list == nullptr || !taken.buffer) return list;
  for (const double value : taken.buffer->to_vector()) {
    PyObject* item = PyFloat_FromDouble(value);
    if (item == nullptr || PyList_Append(list, item) != 0) {
      Py_XDECREF(item);
      Py_DECREF(list);
      return nullptr;
    }
    Py_DECREF(item);
  }
  return list;
}

// The Buffer dies now: the peer's deleter runs.
PyObject* taken_release(PyObject* self, PyObject* /*unused*/) {
  reinterpret_cast<Taken*>(self)->buffer.reset();
  Py_RETURN_NONE;
}

void taken_dealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  reinterpret_cast<Taken*>(self)->buffer.~optional();  // the peer's deleter runs
  type->tp_free(self);
  Py_DECREF(type);
}

PyMethodDef taken_methods[] = {{"address", &taken_address, METH_NOARGS, "The Buffer's data() as an int."},
                               {"values", &taken_values, METH_NOARGS, "The elements, as a list."},
                               {"release", &taken_release, METH_NOARGS, "Drops the Buffer: the deleter runs."},
                               {nullptr, nullptr, 0, nullptr}};

PyType_Slot taken_slots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(&taken_dealloc)}, {Py_tp_methods, taken_methods}, {0, nullptr}};
PyType_Spec taken_spec = {"gpusel_dlpack_example.Taken", sizeof(Taken), 0, Py_TPFLAGS_DEFAULT, taken_slots};
PyTypeObject* taken_type = nullptr;

// The capsule of `object`: itself when it is one, else object.__dlpack__(max_version=(1, 1)), or
// object.__dlpack__() from a producer that takes no max_version.
PyObject* capsule_of(PyObject* object) {
  if (PyCapsule_CheckExact(object)) {
    Py_INCREF(object);
    return object;
  }
  PyObject* method = PyObject_GetAttrString(object, "__dlpack__");
  if (method == nullptr) return nullptr;
  PyObject* args = PyTuple_New(0);
  PyObject* kwargs = Py_BuildValue("{s:(ii)}", "max_version", 1, 1);
  PyObject* capsule = args && kwargs ? PyObject_Call(method, args, kwargs) : nullptr;
  if (capsule == nullptr && PyErr_ExceptionMatches(PyExc_TypeError)) {
    PyErr_Clear();
    capsule = PyObject_CallNoArgs(method);
  }
  Py_XDECREF(kwargs);
  Py_XDECREF(args);
  Py_DECREF(method);
  return capsule;
}

// Takes the capsule's tensor into `taken`, renaming the capsule as consumed; on gpusel's Error the capsule
// keeps its name (and so its tensor, which its destructor frees) and BufferError says why.
template <class M>
bool take_capsule(PyObject* capsule, const char* name, const char* used, Taken& taken) {
  auto* managed = static_cast<M*>(PyCapsule_GetPointer(capsule, name));
  if (managed == nullptr) return false;
  try {
    taken.buffer = gpusel::from_dlpack<double>(managed);
  } catch (const gpusel::Error& error) {
    PyErr_Format(PyExc_BufferError, "%s", error.what());
    return false;
  }
  return PyCapsule_SetName(capsule, used) == 0;
}

PyObject* take(PyObject* /*module*/, PyObject* object) {
  PyObject* capsule = capsule_of(object);
  if (capsule == nullptr) return nullptr;
  auto* taken = PyObject_New(Taken, taken_type);
  if (taken == nullptr) {
    Py_DECREF(capsule);
    return nullptr;
  }
  new (&taken->buffer) std::optional<gpusel::Buffer<double>>();
  bool ok = false;
  if (PyCapsule_IsValid(capsule, "dltensor_versioned") != 0) {
    ok = take_capsule<Versioned>(capsule, "dltensor_versioned", "used_dltensor_versioned", *taken);
  } else if (PyCapsule_IsValid(capsule, "dltensor") != 0) {
    ok = take_capsule<Legacy>(capsule, "dltensor", "used_dltensor", *taken);
  } else {
    PyErr_Format(PyExc_TypeError, "not a DLPack capsule (\"dltensor\" or \"dltensor_versioned\"), or one used already");
  }
  Py_DECREF(capsule);
  if (!ok) {
    Py_DECREF(taken);
    return nullptr;
  }
  return reinterpret_cast<PyObject*>(taken);
}

PyObject* arange(PyObject* /*module*/, PyObject* args) {
  Py_ssize_t count = 0;
  double start = 0;
  if (!PyArg_ParseTuple(args, "n|d", &count, &start)) return nullptr;
  if (count < 0) return PyErr_Format(PyExc_ValueError, "count must be >= 0");
  std::optional<gpusel::Buffer<double>> buffer;
  try {
    buffer.emplace(static_cast<std::size_t>(count));
  } catch (const std::exception& error) {
    return PyErr_Format(PyExc_MemoryError, "%s", error.what());
  }
  for (Py_ssize_t i = 0; i < count; ++i) buffer->data()[i] = start + static_cast<double>(i);
  auto* exported = PyObject_New(Exported, exported_type);
  if (exported == nullptr) return nullptr;
  exported->address = buffer->data();
  new (&exported->buffer) std::optional<gpusel::Buffer<double>>(std::move(buffer));
  return reinterpret_cast<PyObject*>(exported);
}

PyObject* alive(PyObject* /*module*/, PyObject* /*unused*/) { return PyLong_FromLong(exports_alive); }

PyMethodDef module_methods[] = {
    {"arange", &arange, METH_VARARGS, "arange(count, start=0.0): a Buffer<double> to export."},
    {"take", &take, METH_O, "take(tensor): a peer's float64 tensor (or capsule) in a Buffer<double>."},
    {"exports_alive", &alive, METH_NOARGS, "Exported tensors whose deleter has not run yet."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module_definition = {PyModuleDef_HEAD_INIT,
                                 "gpusel_dlpack_example",
                                 "gpusel Buffers as DLPack producers and consumers.",
                                 -1,
                                 module_methods,
                                 nullptr,
                                 nullptr,
                                 nullptr,
                                 nullptr};

}  // namespace

PyMODINIT_FUNC PyInit_gpusel_dlpack_example() {
  exported_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&exported_spec));
  taken_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&taken_spec));
  if (exported_type == nullptr || taken_type == nullptr) return nullptr;
  return PyModule_Create(&module_definition);
}
