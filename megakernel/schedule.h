// Running a MegaProgram's queues on the host as the kernel runs them on SMs: each SM's next
// instruction goes once the counter it waits on is high enough. The CPU interpreter executes
// through it, and the lowering tests use it to prove that no SM count deadlocks.
#pragma once

#include <functional>

#include "megakernel/instructions.h"

namespace flashserve {

// Calls run(instr, merges) for every instruction, SM by SM in turn, one ready instruction per SM
// per round; `merges` is true for the kAttention split that completes its group (it merges the
// splits and bumps). Throws flashserve::Error when no SM can go on (a deadlock) or a counter
// overshoots its waiters' count.
void run_queues(const MegaProgram& p,
                const std::function<void(const MegaInstr& in, bool merges)>& run);

}  // namespace flashserve
