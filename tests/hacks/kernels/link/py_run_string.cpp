// CHEAT: runs Python from C++ through the raw C-API.
#include <Python.h>

extern "C" void run_string() { PyRun_SimpleString("import gc"); }
