// CPU twins of the row copies: one memcpy per row, each id checked.
#include "kernels/cpu/embedding_gather_ref.h"

#include <cstring>

#include "core/error.h"

namespace flashserve::ref {

void embedding(void* out, const int32_t* ids, const void* table, int64_t n, int64_t row_bytes,
               int64_t vocab) {
  for (int64_t i = 0; i < n; ++i) {
    FS_CHECK(ids[i] >= 0 && ids[i] < vocab, "token id ", ids[i], " outside vocab ", vocab);
    std::memcpy(static_cast<char*>(out) + i * row_bytes,
                static_cast<const char*>(table) + ids[i] * row_bytes, size_t(row_bytes));
  }
}

void gather_rows(void* out, const void* x, const int32_t* row_ids, int64_t rows,
                 int64_t row_bytes, int64_t x_rows) {
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t src = row_ids[r];
    FS_CHECK(src >= 0 && src < x_rows, "gather_rows: row ", src, " of ", x_rows);
    std::memcpy(static_cast<char*>(out) + r * row_bytes,
                static_cast<const char*>(x) + src * row_bytes, size_t(row_bytes));
  }
}

}  // namespace flashserve::ref
