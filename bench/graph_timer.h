// Times device work the way a decode step runs it: `op(i)` for i in [0, reps) is recorded once in
// a graph (CUDA graphs on the CUDA backend), replayed, and the median replay time over `trials`
// divided by reps is returned (seconds per op, launch gaps inside the graph included). op(0) runs
// once eagerly first, so plans, heuristics and workspaces are settled outside the recording.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

#include "backends/backend.h"

namespace flashserve::bench {

inline double time_in_graph(Backend& be, const std::function<void(int)>& op, int reps,
                            int trials = 15) {
  op(0);
  be.synchronize();
  be.begin_capture();
  for (int i = 0; i < reps; ++i) op(i);
  auto graph = be.end_capture();
  be.replay(graph);  // warm-up
  be.synchronize();
  std::vector<double> t;
  for (int i = 0; i < trials; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    be.replay(graph);
    be.synchronize();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2] / reps;
}

}  // namespace flashserve::bench
