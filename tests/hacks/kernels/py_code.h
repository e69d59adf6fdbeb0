// The hack rounds' Python profile hooks (rounds 22-25): whether a code object is the function of that name.
#pragma once
#include <torch/extension.h>   // (Python.h with it)

inline bool named(PyCodeObject* code, const char* name) {
    PyObject* got = PyObject_GetAttrString(reinterpret_cast<PyObject*>(code), "co_name");
    bool same = got && PyUnicode_Check(got) && PyUnicode_CompareWithASCIIString(got, name) == 0;
    Py_XDECREF(got);
    if (PyErr_Occurred()) PyErr_Clear();
    return same;
}
