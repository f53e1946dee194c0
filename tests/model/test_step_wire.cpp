// The step message node 0 sends the other nodes (model/step_wire.h): a laid-out plan's arrays come
// back equal, and a message of the wrong shape (truncated, a negative or too long length, values
// left over, too short for the scalars) is an error naming where, never a crash.
#include <gtest/gtest.h>

#include "core/error.h"
#include "model/step_wire.h"

namespace flashserve {
namespace {

StepPlan laid_out_plan() {
  static const std::vector<int32_t> a = {5, 6, 7}, b = {9};
  static const std::vector<int32_t> table_a = {0, 1}, table_b = {2};
  StepPlan p;
  p.chunks.push_back({a.data(), 3, 14, &table_a, LogitsWanted::kAll});
  p.chunks.push_back({b.data(), 1, 4, &table_b, LogitsWanted::kLast});
  p.lay_out(/*block_size=*/16, /*num_blocks=*/4, /*vocab_size=*/32);
  return p;
}

TEST(StepWire, RoundTrip) {
  const StepPlan p = laid_out_plan();
  const StepPlan q = unpack_step_arrays(pack_step_arrays(p));
  EXPECT_TRUE(q.chunks.empty());
  EXPECT_EQ(q.num_seqs, 2);
  EXPECT_EQ(q.max_q_len, p.max_q_len);
  EXPECT_EQ(q.max_kv_len, p.max_kv_len);
  EXPECT_EQ(q.max_blocks_per_seq, p.max_blocks_per_seq);
  EXPECT_EQ(q.num_hidden_rows, p.num_hidden_rows);
  EXPECT_EQ(q.tokens, p.tokens);
  EXPECT_EQ(q.positions, p.positions);
  EXPECT_EQ(q.slot_mapping, p.slot_mapping);
  EXPECT_EQ(q.cu_q_lens, p.cu_q_lens);
  EXPECT_EQ(q.kv_lens, p.kv_lens);
  EXPECT_EQ(q.block_table, p.block_table);
  EXPECT_EQ(q.logit_rows, p.logit_rows);
  EXPECT_EQ(q.row_chunk, p.row_chunk);
  EXPECT_EQ(q.logit_rows.size(), 4u);  // kAll's 3 rows and kLast's 1
}

void expect_refused(const std::vector<int32_t>& msg, const std::string& part) {
  try {
    unpack_step_arrays(msg);
    FAIL() << "accepted a message of " << msg.size() << " values";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(StepWire, MalformedMessagesAreErrors) {
  const std::vector<int32_t> good = pack_step_arrays(laid_out_plan());
  expect_refused({1, 2}, "step message of 2 values");
  std::vector<int32_t> m = good;
  m.resize(m.size() - 1);
  expect_refused(m, "truncated");
  m = good;
  m.push_back(0);
  expect_refused(m, "1 values left over");
  m = good;
  m[5] = -1;  // the tokens' length
  expect_refused(m, "truncated at value 5");
  m = good;
  m[5] = 1 << 30;
  expect_refused(m, "truncated at value 5");
}

}  // namespace
}  // namespace flashserve
