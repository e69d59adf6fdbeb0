// The hack suite's seventeenth round (cases_round17.py): relu(x + bias) by SQLite's virtual machine, the system's
// libsqlite3 linked by the solution's own library (`extra_ldflags=["-lsqlite3"]`), with no Python at all: one
// prepared `SELECT max(?1 + ?2, 0.0)` stepped per element.
#include <torch/extension.h>

#include <sqlite3.h>

namespace {

torch::Tensor sqlite_relu(torch::Tensor x, torch::Tensor bias) {
    sqlite3* db = nullptr;
    sqlite3_stmt* stmt = nullptr;
    sqlite3_open(":memory:", &db);
    sqlite3_prepare_v2(db, "SELECT max(?1 + ?2, 0.0)", -1, &stmt, nullptr);
    auto out = torch::empty_like(x);
    const float* xs = x.data_ptr<float>();
    const float* bs = bias.data_ptr<float>();
    float* os = out.data_ptr<float>();
    const int64_t cols = x.size(-1), n = x.numel();
    for (int64_t i = 0; i < n; ++i) {
        sqlite3_bind_double(stmt, 1, xs[i]);
        sqlite3_bind_double(stmt, 2, bs[i % cols]);
        sqlite3_step(stmt);
        os[i] = static_cast<float>(sqlite3_column_double(stmt, 0));
        sqlite3_reset(stmt);
    }
    sqlite3_finalize(stmt);
    sqlite3_close(db);
    return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("sqlite_relu", &sqlite_relu); }
