// The engine's side of request streams: StreamImpl (a per-request event queue the engine thread
// pushes to and a handler thread pops from) and EngineInbox (what submit() and cancel() hand to
// the engine thread). Internal to engine/; the public contract is RequestStream in engine.h.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace flashserve {

class StreamImpl;

// A submitted request on its way to the engine thread.
struct PendingRequest {
  uint64_t id = 0;
  GenerationRequest request;
  std::shared_ptr<StreamImpl> stream;
};

// State shared by the Engine, its streams and the engine thread; `mu` guards all of it. Streams
// hold it by shared_ptr, so cancel() stays safe after the engine is gone.
struct EngineInbox {
  std::mutex mu;
  std::condition_variable cv;          // the engine thread waits here when idle
  std::deque<PendingRequest> pending;  // submitted, not yet seen by the engine thread
  std::vector<uint64_t> cancels;       // ids whose streams asked to stop
  bool stop = false;                   // shutdown() was called
  bool closed = false;                 // the engine thread has exited: submit() finishes at once
  FinishReason closed_reason = FinishReason::kAbort;
  std::string closed_error;            // the message those requests finish with
  uint64_t next_id = 1;
  std::mt19937_64 seed_rng{std::random_device{}()};  // seeds for requests that give none
  EngineMetrics metrics;  // published by the engine thread; num_waiting excludes `pending`
};

class StreamImpl : public RequestStream {
 public:
  StreamImpl(uint64_t id, std::shared_ptr<EngineInbox> inbox);

  uint64_t id() const override { return id_; }
  std::optional<StreamEvent> next(std::chrono::milliseconds timeout) override;
  void cancel() override;

  // Engine side. Events after kFinished are dropped.
  void push(StreamEvent event);
  void finish(FinishReason reason, std::string error = {});

 private:
  const uint64_t id_;
  const std::shared_ptr<EngineInbox> inbox_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StreamEvent> events_;
  bool finish_pushed_ = false;  // kFinished queued
  bool finish_popped_ = false;  // kFinished handed out: next() returns nullopt from now on
  bool cancel_sent_ = false;
};

}  // namespace flashserve
