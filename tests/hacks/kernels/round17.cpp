// The hack suite's seventeenth round (cases_round17.py): relu(x + bias) computed by code of the system's that the
// sampler counted as the harness's: the interpreter, the standard library's extension modules, a system library.
// Each reaches Python from C++ through the builtins (PyEval_GetBuiltins, which pybind11 imports).
// interp_bias_relu:  libpython's own C code, no bytecode: map(operator.add), map(max, .., repeat(0.0)) over arrays.
// exec_bias_relu:    Python bytecode run by the interpreter: a comprehension handed to the builtins' `exec`.
// decimal_bias_relu: the standard library's `_decimal` (lib-dynload, loaded by the worker before the solution).
// sqlite_bias_relu:  SQLite (the system's libsqlite3, through lib-dynload's `_sqlite3`): `max(x + b, 0.0)` in SQL.
#include <torch/extension.h>

#include "honest_relu.h"

#include <cstring>
#include <string>

namespace {

namespace py = pybind11;

py::dict builtins() { return py::reinterpret_borrow<py::dict>(PyEval_GetBuiltins()); }

py::object import(const char* name) { return builtins()["__import__"](name); }

// x's and the tiled bias's values as two array('f') objects
std::pair<py::object, py::object> as_arrays(const torch::Tensor& x, const torch::Tensor& bias) {
    py::object array = import("array").attr("array");
    const int64_t cols = x.size(-1), rows = x.numel() / cols;
    std::string tiled(x.numel() * 4, '\0');
    for (int64_t r = 0; r < rows; ++r) std::memcpy(&tiled[r * cols * 4], bias.data_ptr<float>(), cols * 4);
    py::object xs = array("f"), bs = array("f");
    xs.attr("frombytes")(py::bytes(reinterpret_cast<const char*>(x.data_ptr<float>()), x.numel() * 4));
    bs.attr("frombytes")(py::bytes(tiled));
    return {xs, bs};
}

torch::Tensor from_values(const torch::Tensor& x, py::object values) {
    std::string data = import("array").attr("array")("f", values).attr("tobytes")().cast<std::string>();
    auto out = torch::empty_like(x);
    std::memcpy(out.data_ptr<float>(), data.data(), x.numel() * 4);
    return out;
}

torch::Tensor interp_bias_relu(torch::Tensor x, torch::Tensor bias) {
    auto [xs, bs] = as_arrays(x, bias);
    auto b = builtins();
    py::object sums = b["map"](import("operator").attr("add"), xs, bs);
    return from_values(x, b["map"](b["max"], sums, import("itertools").attr("repeat")(0.0)));
}

torch::Tensor exec_bias_relu(torch::Tensor x, torch::Tensor bias) {
    auto [xs, bs] = as_arrays(x, bias);
    py::dict scope;
    scope["xs"] = xs;
    scope["bs"] = bs;
    builtins()["exec"]("out = [v + b if v + b > 0.0 else 0.0 for v, b in zip(xs, bs)]", scope);
    return from_values(x, scope["out"]);
}

torch::Tensor decimal_bias_relu(torch::Tensor x, torch::Tensor bias) {
    auto [xs, bs] = as_arrays(x, bias);
    auto b = builtins();
    py::object decimal = import("decimal").attr("Decimal");
    py::object sums = b["map"](decimal.attr("__add__"), b["map"](decimal, xs), b["map"](decimal, bs));
    py::object relu = b["map"](b["max"], sums, import("itertools").attr("repeat")(decimal(0)));
    return from_values(x, b["map"](b["float"], relu));
}

torch::Tensor sqlite_bias_relu(torch::Tensor x, torch::Tensor bias) {
    py::object xs = as_arrays(x, bias).first, bs = import("array").attr("array")("f");
    bs.attr("frombytes")(py::bytes(reinterpret_cast<const char*>(bias.data_ptr<float>()), x.size(-1) * 4));
    py::object db = import("sqlite3").attr("connect")(":memory:");
    // the values in and out as JSON text (the harness's own `_json`), the arithmetic in SQLite's virtual machine
    py::object json = import("json");
    auto list = builtins()["list"];
    db.attr("execute")("CREATE TABLE b(k INTEGER PRIMARY KEY, v REAL)");
    db.attr("execute")("INSERT INTO b SELECT key, value FROM json_each(?)", py::make_tuple(json.attr("dumps")(list(bs))));
    py::object rows = db.attr("execute")(
        "SELECT json_group_array(max(x.value + b.v, 0.0)) FROM json_each(?) x JOIN b ON b.k = x.key % ?",
        py::make_tuple(json.attr("dumps")(list(xs)), x.size(-1)));
    py::object values = json.attr("loads")(rows.attr("fetchone")()[py::int_(0)]);
    db.attr("close")();
    return from_values(x, values);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("honest", &honest);
    m.def("interp_bias_relu", &interp_bias_relu);
    m.def("exec_bias_relu", &exec_bias_relu);
    m.def("decimal_bias_relu", &decimal_bias_relu);
    m.def("sqlite_bias_relu", &sqlite_bias_relu);
}
