// CPU reference twins of the row copies (kernels/embedding_gather.h): rows of any dtype, copied
// byte for byte. They are the CPU backend's ops and the oracle the CUDA kernels are tested
// against (tests/kernels/test_embedding_gather.cpp). All pointers are host pointers.
#pragma once

#include <cstdint>

namespace flashserve::ref {

// out[i] = table[ids[i]]. An id outside [0, vocab) throws flashserve::Error (the CUDA kernel,
// which cannot throw, writes zeros there; ids are validated before a step reaches it).
void embedding(void* out,           // [n, row_bytes]
               const int32_t* ids,  // [n]
               const void* table,   // [vocab, row_bytes]
               int64_t n, int64_t row_bytes, int64_t vocab);

// out[r] = x[row_ids[r]]; a row id outside [0, x_rows) throws flashserve::Error.
void gather_rows(void* out,               // [rows, row_bytes]
                 const void* x,           // [x_rows, row_bytes]
                 const int32_t* row_ids,  // [rows]
                 int64_t rows, int64_t row_bytes, int64_t x_rows);

}  // namespace flashserve::ref
