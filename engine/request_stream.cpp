// StreamImpl: the per-request event queue between the engine thread and a handler thread.
#include "engine/request_stream.h"

namespace flashserve {

StreamImpl::StreamImpl(uint64_t id, std::shared_ptr<EngineInbox> inbox)
    : id_(id), inbox_(std::move(inbox)) {}

std::optional<StreamEvent> StreamImpl::next(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (finish_popped_) return std::nullopt;
  if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return std::nullopt;
  StreamEvent event = std::move(events_.front());
  events_.pop_front();
  if (event.kind == StreamEvent::Kind::kFinished) finish_popped_ = true;
  return event;
}

void StreamImpl::cancel() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancel_sent_ || finish_pushed_) return;
    cancel_sent_ = true;
  }
  std::lock_guard<std::mutex> lock(inbox_->mu);
  inbox_->cancels.push_back(id_);
  inbox_->cv.notify_one();
}

void StreamImpl::push(StreamEvent event) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finish_pushed_) return;
    if (event.kind == StreamEvent::Kind::kFinished) finish_pushed_ = true;
    events_.push_back(std::move(event));
  }
  cv_.notify_all();
}

void StreamImpl::finish(FinishReason reason, std::string error) {
  StreamEvent event;
  event.kind = StreamEvent::Kind::kFinished;
  event.finish = reason;
  event.error = std::move(error);
  push(std::move(event));
}

}  // namespace flashserve
