// The in-memory store behind /v1/responses' `store`, `previous_response_id` and
// GET/DELETE /v1/responses/{id}: each stored response with the conversation input that produced
// it. Bounded three ways (entries, bytes, age): the least recently used entry goes first when a
// bound is passed, and an entry older than the lifetime is gone. Thread-safe. Nothing persists
// across a restart.
#pragma once

#include <chrono>
#include <cstddef>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

namespace flashserve {

struct StoredResponse {
  nlohmann::json response;     // the response object, as GET /v1/responses/{id} returns it
  nlohmann::json input_items;  // the whole conversation's input items (history included)
};

struct ResponsesStoreLimits {
  size_t max_entries = 1000;
  size_t max_bytes = size_t(256) << 20;  // of the entries' JSON text
  std::chrono::seconds lifetime{3600};   // from when the response was stored
};

class ResponsesStore {
 public:
  using Clock = std::chrono::steady_clock;
  explicit ResponsesStore(ResponsesStoreLimits limits = {}) : limits_(limits) {}

  // Stores (or replaces) `id`, evicting the least recently used entries past the bounds. An entry
  // larger than max_bytes on its own is not stored.
  void put(const std::string& id, StoredResponse r, Clock::time_point now = Clock::now());
  // The entry, which becomes the most recently used; nullopt when absent or expired.
  std::optional<StoredResponse> get(const std::string& id, Clock::time_point now = Clock::now());
  // Whether `id` was there (and not expired) before it was removed.
  bool erase(const std::string& id, Clock::time_point now = Clock::now());
  size_t size() const;
  size_t bytes() const;

 private:
  struct Entry {
    std::string id;
    StoredResponse value;
    size_t bytes = 0;
    Clock::time_point stored;
  };
  using List = std::list<Entry>;  // most recently used first

  void remove(List::iterator it);  // mu_ held
  void drop_expired(Clock::time_point now);  // mu_ held

  ResponsesStoreLimits limits_;
  mutable std::mutex mu_;
  List lru_;
  std::unordered_map<std::string, List::iterator> index_;
  size_t bytes_ = 0;
};

}  // namespace flashserve
