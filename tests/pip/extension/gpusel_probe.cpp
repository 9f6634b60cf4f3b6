// A CPython extension built the way extension authors build one: setup.py's
// include_dirs=[gpusel.get_include()], and nothing else of gpusel's (it is header-only).
// It reads the machine's GPUs through NVML (the machine layer: no CUDA header, no
// CUDA runtime), so on a machine without a driver it takes the no-GPU path.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <gpusel/machine/inventory.hpp>
#include <gpusel/version.hpp>

#include <exception>

namespace {

// gpus() -> (count, reason): the GPUs NVML sees, or -1 and why it could not look.
PyObject* gpus(PyObject*, PyObject*) {
  try {
    const gpusel::Inventory inventory = gpusel::query_inventory();
    if (!inventory.ok()) return Py_BuildValue("(is)", -1, inventory.reason.c_str());
    return Py_BuildValue("(is)", static_cast<int>(inventory.gpus.size()), inventory.driver_version.c_str());
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
}

PyObject* version(PyObject*, PyObject*) { return PyUnicode_FromString(gpusel::version()); }

PyMethodDef methods[] = {
    {"gpus", gpus, METH_NOARGS, "(count, reason): the GPUs NVML sees, or -1 and why it could not look"},
    {"version", version, METH_NOARGS, "gpusel's version, from its header"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "gpusel_probe", nullptr, -1, methods, nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit_gpusel_probe() { return PyModule_Create(&module); }
