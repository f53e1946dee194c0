// run_queues: the kernel's counter protocol (wait, arrive, bump) on the host.
#include "megakernel/schedule.h"

#include <vector>

#include "core/error.h"

namespace flashserve {

void run_queues(const MegaProgram& p,
                const std::function<void(const MegaInstr& in, bool merges)>& run) {
  std::vector<int> counters(size_t(p.num_counters), 0);
  std::vector<size_t> next(p.queues.size(), 0);
  size_t left = 0;
  for (const auto& q : p.queues) left += q.size();
  while (left > 0) {
    bool progress = false;
    for (size_t sm = 0; sm < p.queues.size(); ++sm) {
      if (next[sm] == p.queues[sm].size()) continue;
      const MegaInstr& in = p.instrs[size_t(p.queues[sm][next[sm]])];
      if (in.wait_counter >= 0 && counters[size_t(in.wait_counter)] < in.wait_count) continue;
      bool merges = true;
      if (in.arrive_counter >= 0) {
        int& arrived = counters[size_t(in.arrive_counter)];
        merges = ++arrived == in.arrive_count;
        FS_CHECK(arrived <= in.arrive_count, "megakernel: arrival counter ", in.arrive_counter,
                 " overshoots");
      }
      run(in, merges);
      if (merges && in.bump_counter >= 0) ++counters[size_t(in.bump_counter)];
      ++next[sm], --left, progress = true;
    }
    FS_CHECK(progress, "megakernel: deadlock with ", left, " instructions left");
  }
}

}  // namespace flashserve
