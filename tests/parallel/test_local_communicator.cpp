// The thread stand-in communicator and the rank threads: all-reduce sums in the fixed pairwise
// order (the same bits on every rank, f32 and bf16), all-gather in rank order, many collectives
// back to back, abort waking a rank that waits for a failed one, and RankWorkers rethrowing the
// failing rank's error after calling on_error.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "core/error.h"
#include "parallel/communicator.h"
#include "parallel/rank_workers.h"
#include "parallel/reduction_order.h"

namespace flashserve {
namespace {

// Runs fn(rank, comm) on one thread per rank of a fresh local group.
template <class Fn>
void on_group(int size, Fn fn) {
  auto group = make_local_group(size);
  RankWorkers workers(size, [&] {
    for (auto& c : group) c->abort();
  });
  workers.run([&](int r) { fn(r, *group[size_t(r)]); });
}

std::vector<float> random_values(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-3.f, 5.f);  // not centred on zero
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng) * (rng() % 4 == 0 ? 1e4f : 1.f);
  return v;
}

TEST(LocalCommunicator, AllReduceF32IsThePairwiseSumOnEveryRank) {
  const int n = 1000;
  for (int size : {1, 2, 3, 4}) {
    std::vector<std::vector<float>> in(static_cast<size_t>(size)), out(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) in[size_t(r)] = out[size_t(r)] = random_values(n, 10 + r);
    on_group(size, [&](int r, Communicator& c) {
      EXPECT_EQ(c.rank(), r);
      EXPECT_EQ(c.size(), size);
      c.all_reduce_sum(out[size_t(r)].data(), n, DType::kF32);
    });
    for (int i = 0; i < n; ++i) {
      const float want = pairwise_sum<float>(0, size, [&](int r) { return in[size_t(r)][size_t(i)]; });
      for (int r = 0; r < size; ++r) ASSERT_EQ(out[size_t(r)][size_t(i)], want) << size << " " << r;
    }
  }
}

TEST(LocalCommunicator, AllReduceBf16RoundsOnce) {
  const int n = 257, size = 4;
  std::vector<std::vector<uint16_t>> buf(static_cast<size_t>(size), std::vector<uint16_t>(static_cast<size_t>(n)));
  for (int r = 0; r < size; ++r) {
    const auto v = random_values(n, 20 + r);
    for (int i = 0; i < n; ++i) buf[size_t(r)][size_t(i)] = float_to_bf16_bits(v[size_t(i)]);
  }
  const auto in = buf;
  on_group(size, [&](int r, Communicator& c) { c.all_reduce_sum(buf[size_t(r)].data(), n, DType::kBF16); });
  for (int i = 0; i < n; ++i) {
    const float sum = pairwise_sum<float>(0, size, [&](int r) {
      return bf16_bits_to_float(in[size_t(r)][size_t(i)]);
    });
    for (int r = 0; r < size; ++r) ASSERT_EQ(buf[size_t(r)][size_t(i)], float_to_bf16_bits(sum));
  }
}

TEST(LocalCommunicator, AllGatherInRankOrderAndBackToBack) {
  const int size = 3, n = 5;
  std::vector<std::vector<int32_t>> recv(static_cast<size_t>(size), std::vector<int32_t>(static_cast<size_t>(size * n), -1));
  on_group(size, [&](int r, Communicator& c) {
    for (int round = 0; round < 200; ++round) {  // the same buffers reused at once, each round
      std::vector<int32_t> send(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) send[size_t(i)] = round * 1000 + r * 10 + i;
      c.all_gather(send.data(), recv[size_t(r)].data(), n, DType::kI32);
      for (int k = 0; k < size; ++k)
        for (int i = 0; i < n; ++i)
          ASSERT_EQ(recv[size_t(r)][size_t(k * n + i)], round * 1000 + k * 10 + i);
      float one = 1.f;
      c.all_reduce_sum(&one, 1, DType::kF32);
      ASSERT_EQ(one, float(size));
      if (round % 50 == 0) c.barrier();
    }
  });
}

TEST(LocalCommunicator, RejectsOtherDtypesForSums) {
  auto group = make_local_group(1);
  int32_t x = 1;
  EXPECT_THROW(group[0]->all_reduce_sum(&x, 1, DType::kI32), Error);
}

// Rank 1 fails before its collective; rank 0, already waiting in it, must wake with an error
// instead of waiting forever, and the error that comes back is rank 1's.
TEST(LocalCommunicator, AbortWakesARankWaitingForAFailedOne) {
  auto group = make_local_group(2);
  std::atomic<int> aborts{0};
  RankWorkers workers(2, [&] {
    ++aborts;
    for (auto& c : group) c->abort();
  });
  std::atomic<bool> rank0_threw{false};
  try {
    workers.run([&](int r) {
      if (r == 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // rank 0 is waiting by now
        FS_THROW("rank 1 ran out of memory");
      }
      float x = 1.f;
      try {
        group[0]->all_reduce_sum(&x, 1, DType::kF32);
      } catch (const Error&) {
        rank0_threw = true;
        throw;
      }
    });
    FAIL() << "run() should rethrow";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 ran out of memory"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(rank0_threw.load());
  EXPECT_EQ(aborts.load(), 1);
  float x = 1.f;  // the group stays aborted
  EXPECT_THROW(group[0]->all_reduce_sum(&x, 1, DType::kF32), Error);
}

TEST(RankWorkers, EveryRankOnItsOwnThreadEveryRun) {
  RankWorkers w(4, nullptr);
  EXPECT_EQ(w.size(), 4);
  std::vector<std::thread::id> first(4), again(4);
  w.run([&](int r) { first[size_t(r)] = std::this_thread::get_id(); });
  w.run([&](int r) { again[size_t(r)] = std::this_thread::get_id(); });
  EXPECT_EQ(first, again) << "a rank keeps its thread (its CUDA device stays current)";
  for (int a = 0; a < 4; ++a)
    for (int b = a + 1; b < 4; ++b) EXPECT_NE(first[size_t(a)], first[size_t(b)]);
  EXPECT_NE(first[0], std::this_thread::get_id());
  w.run([](int) {});  // and it goes on after a run that threw
  EXPECT_THROW(w.run([](int r) { FS_CHECK(r != 2, "rank 2 failed"); }), Error);
  std::atomic<int> ran{0};
  w.run([&](int) { ++ran; });
  EXPECT_EQ(ran.load(), 4);
}

// More than one rank: CUDA modules load eagerly (docs/TENSOR_PARALLEL.md), unless the user chose.
TEST(PrepareCuda, EagerModuleLoadingForMoreThanOneRankOnly) {
  unsetenv("CUDA_MODULE_LOADING");
  prepare_cuda_for_tensor_parallelism(1);
  EXPECT_EQ(std::getenv("CUDA_MODULE_LOADING"), nullptr) << "one rank: CUDA's default";
  prepare_cuda_for_tensor_parallelism(2);
  ASSERT_NE(std::getenv("CUDA_MODULE_LOADING"), nullptr);
  EXPECT_STREQ(std::getenv("CUDA_MODULE_LOADING"), "EAGER");
  setenv("CUDA_MODULE_LOADING", "LAZY", 1);
  prepare_cuda_for_tensor_parallelism(4);
  EXPECT_STREQ(std::getenv("CUDA_MODULE_LOADING"), "LAZY") << "the user's choice stays";
  unsetenv("CUDA_MODULE_LOADING");
}

}  // namespace
}  // namespace flashserve
