// Random soak requests and their classification (see soak_client.h).
#include "tests/soak/soak_client.h"

#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/common/http_client.h"

namespace flashserve::soak {

using json = nlohmann::json;

void Tally::fail(const std::string& what) {
  ++lost;
  std::lock_guard<std::mutex> lock(mu);
  if (failures.size() < 20) failures.push_back(what.substr(0, 600));
}

namespace {

const std::vector<std::string> kWords = {
    "Once", "upon", "a", "time", "there", "was", "little", "girl", "named", "Lily", "she",
    "loved", "to", "play", "in", "the", "park", "with", "her", "dog", "Max", ".", ",", "!",
    "\n", "h\u00e9llo", "\u65e5\u672c", "\U0001F600", "big", "red", "ball", "sun"};

struct Rng {
  std::mt19937_64 g;
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g); }
  double real(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(g); }
  bool chance(double p) { return real(0, 1) < p; }
  std::string words(int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += (i ? " " : "") + kWords[size_t(uniform(0, int(kWords.size()) - 1))];
    return s;
  }
};

// A valid completion request with random parameters; *choices gets prompts x n.
json random_completion(Rng& r, int* choices) {
  json b;
  int num_prompts = 1;
  switch (r.uniform(0, 3)) {
    case 0: b["prompt"] = r.words(r.uniform(0, 40)); break;
    case 1: {
      num_prompts = r.uniform(1, 2);
      json p = json::array();
      for (int i = 0; i < num_prompts; ++i) p.push_back(r.words(r.uniform(1, 20)));
      b["prompt"] = p;
      break;
    }
    case 2: {
      json p = json::array({1});
      for (int i = r.uniform(0, 80); i > 0; --i) p.push_back(r.uniform(3, 511));
      b["prompt"] = p;
      break;
    }
    default: {
      num_prompts = r.uniform(1, 2);
      json p = json::array();
      for (int i = 0; i < num_prompts; ++i) {
        json ids = json::array();
        for (int k = r.uniform(1, 40); k > 0; --k) ids.push_back(r.uniform(0, 511));
        p.push_back(ids);
      }
      b["prompt"] = p;
    }
  }
  const int n = r.chance(0.8) ? 1 : r.uniform(2, 4 / num_prompts);
  if (n > 1 || r.chance(0.3)) b["n"] = n;
  *choices = num_prompts * n;
  b["max_tokens"] = r.uniform(1, 160);
  if (r.chance(0.3)) b["temperature"] = 0;
  else if (r.chance(0.7)) b["temperature"] = r.real(0.1, 1.5);
  if (r.chance(0.3)) b["top_p"] = r.real(0.5, 1.0);
  if (r.chance(0.3)) b["top_k"] = r.uniform(-1, 50);
  if (r.chance(0.2)) b["min_p"] = r.real(0, 0.2);
  if (r.chance(0.5)) b["seed"] = r.uniform(0, 1 << 30);
  if (r.chance(0.2)) b["presence_penalty"] = r.real(-1, 1);
  if (r.chance(0.2)) b["frequency_penalty"] = r.real(-1, 1);
  if (r.chance(0.2)) b["repetition_penalty"] = r.real(0.8, 1.3);
  if (r.chance(0.1)) b["logit_bias"] = {{std::to_string(r.uniform(0, 511)), r.real(-100, 100)}};
  if (r.chance(0.2)) b["logprobs"] = r.uniform(0, 5);
  if (r.chance(0.15)) b["echo"] = true;
  if (r.chance(0.3)) {
    json stops = json::array();
    for (int i = r.uniform(1, 3); i > 0; --i) stops.push_back(r.words(r.uniform(1, 2)));
    b["stop"] = stops;
  }
  if (r.chance(0.3)) b["ignore_eos"] = true;
  if (r.chance(0.5)) {
    b["stream"] = true;
    if (r.chance(0.5)) b["stream_options"] = {{"include_usage", true}};
  }
  return b;
}

// Bad requests and the status each must get.
struct BadCase {
  std::string body;
  int status;
};
const std::vector<BadCase>& bad_cases() {
  static const std::vector<BadCase> k = {
      {"{\"prompt\": \"hi\"", 400},
      {R"({"prompt":"hi","max_tokens":"5"})", 400},
      {R"({"prompt":"hi","temperature":9})", 400},
      {R"({"prompt":"hi","max_tokens":100000})", 400},
      {R"({"prompt":"hi","model":"../../etc/passwd"})", 404},
      {R"({"prompt":"hi","foo":1})", 400},
      {R"({"prompt":[1,99999]})", 400},
      {R"({"prompt":"hi","n":129})", 400},
      {json{{"prompt", "hi"}, {"stop", {std::string(300, 'x')}}}.dump(), 400},
      {"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[", 400},
  };
  return k;
}

std::string describe(const std::string& what, const http::Response& resp, const std::string& body) {
  return what + ": status " + std::to_string(resp.status) + " request " + body.substr(0, 200) +
         " answer " + resp.body.substr(0, 300);
}

// Checks a 200 answer; adds to the tally and returns true when well formed.
bool check_completion(const json& req, int choices, const http::Response& resp, Tally* t,
                      std::string* text0) {
  const bool stream = req.value("stream", false);
  std::vector<int> finishes(size_t(choices), 0);
  std::vector<std::string> texts(static_cast<size_t>(choices));
  int64_t prompt_tokens = -1, completion_tokens = -1;
  auto take_choices = [&](const json& arr) {
    for (const auto& c : arr) {
      int i = c.at("index").get<int>();
      if (i < 0 || i >= choices) return false;
      texts[size_t(i)] += c.at("text").get<std::string>();
      if (!c.at("finish_reason").is_null()) {
        std::string f = c["finish_reason"];
        if (f != "stop" && f != "length") return false;
        ++finishes[size_t(i)];
      }
    }
    return true;
  };
  try {
    if (!stream) {
      json j = json::parse(resp.body);
      if (!take_choices(j.at("choices")) || j["choices"].size() != size_t(choices)) return false;
      prompt_tokens = j.at("usage").at("prompt_tokens");
      completion_tokens = j["usage"].at("completion_tokens");
    } else {
      auto events = http::sse_data(resp.body);
      if (events.empty() || events.back() != "[DONE]") return false;
      for (size_t e = 0; e + 1 < events.size(); ++e) {
        json j = json::parse(events[e]);
        if (j.contains("error")) return false;
        if (j.contains("usage") && !j["usage"].is_null()) {
          prompt_tokens = j["usage"].at("prompt_tokens");
          completion_tokens = j["usage"].at("completion_tokens");
        }
        if (!take_choices(j.at("choices"))) return false;
      }
      const bool want_usage = req.contains("stream_options");
      if (want_usage != (prompt_tokens >= 0)) return false;
    }
  } catch (const std::exception&) {
    return false;
  }
  for (int f : finishes) {
    if (f != 1) return false;  // every choice finishes exactly once
  }
  if (prompt_tokens >= 0) {
    t->usage_prompt += prompt_tokens;
    t->usage_completion += completion_tokens;
  }
  if (text0) *text0 = texts[0];
  return true;
}

// A rejected client waits before its next request, as Retry-After asks (shortened: the test
// wants load, not idle time).
void back_off(Rng& r) { std::this_thread::sleep_for(std::chrono::milliseconds(r.uniform(20, 200))); }

void hang_up_mid_request(int port, Rng& r, const std::string& body) {
  http::Connection c;
  if (!c.connect("127.0.0.1", port)) return;
  const std::string full = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                           "Content-Type: application/json\r\nContent-Length: " +
                           std::to_string(body.size()) + "\r\n\r\n" + body;
  c.send_all(std::string_view(full).substr(0, size_t(r.uniform(0, int(full.size()) - 1))));
  std::this_thread::sleep_for(std::chrono::milliseconds(r.uniform(0, 20)));
  c.close();
}

void one_request(int port, Rng& r, const std::vector<Probe>& probes, Tally* t) {
  const int kind = r.uniform(0, 99);
  if (kind < 5) {  // hang up before the request is complete
    int choices = 0;
    hang_up_mid_request(port, r, random_completion(r, &choices).dump());
    ++t->hung_up_request;
    return;
  }
  if (kind < 10) {  // hang up while the answer is being produced
    int choices = 0;
    json body = random_completion(r, &choices);
    body["max_tokens"] = r.uniform(40, 200);
    body["ignore_eos"] = true;
    http::Connection c;
    if (!c.connect("127.0.0.1", port) || !c.send_request("POST", "/v1/completions", body.dump())) {
      t->fail("connect/send failed (hang-up case)");
      return;
    }
    if (body.value("stream", false)) {
      int pieces = 0;
      const int stop_after = r.uniform(1, 6);
      c.read_response([&](std::string_view) { return ++pieces < stop_after; });
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(r.uniform(0, 60)));
    }
    c.close();
    ++t->hung_up_response;
    return;
  }
  if (kind < 18) {
    const BadCase& b = bad_cases()[size_t(r.uniform(0, int(bad_cases().size()) - 1))];
    http::Response resp = http::request(port, "POST", "/v1/completions", b.body);
    json j = json::parse(resp.body, nullptr, false);
    if (resp.status == b.status && j.is_object() && j.contains("error")) {
      ++t->bad_expected;
      ++(b.status == 400 ? t->status_400 : t->status_404);
    } else {
      t->fail(describe("bad request", resp, b.body));
    }
    return;
  }
  if (kind < 22) {
    static const char* kPaths[] = {"/health", "/v1/models", "/metrics"};
    const char* path = kPaths[r.uniform(0, 2)];
    http::Response resp = http::request(port, "GET", path);
    if (resp.status == 200 && !resp.body.empty()) ++t->other_ok;
    else t->fail(describe(std::string("GET ") + path, resp, ""));
    return;
  }
  if (kind < 27 && !probes.empty()) {  // same text as when the server was idle
    const Probe& p = probes[size_t(r.uniform(0, int(probes.size()) - 1))];
    http::Response resp = http::request(port, "POST", "/v1/completions", p.body);
    std::string text;
    const bool rejected = resp.status == 503 && resp.headers.count("retry-after");
    const bool good = !rejected && resp.status == 200 &&
                      check_completion(json::parse(p.body), 1, resp, t, &text);
    if (rejected) {
      ++t->rejected;
      back_off(r);
    } else if (good && (text == p.expected || !t->probes_exact)) {
      ++t->ok;
      ++t->ok_choices;
      ++(text == p.expected ? t->probes_ok : t->probes_differ);
    } else {
      t->fail(describe("probe (expected '" + p.expected.substr(0, 80) + "')", resp, p.body));
    }
    return;
  }
  int choices = 0;
  json body = random_completion(r, &choices);
  http::Response resp = http::request(port, "POST", "/v1/completions", body.dump());
  if (resp.status == 503 && resp.headers.count("retry-after")) {
    ++t->rejected;
    back_off(r);
  } else if (resp.status == 200 && check_completion(body, choices, resp, t, nullptr)) {
    ++t->ok;
    t->ok_choices += choices;
  } else {
    t->fail(describe("completion", resp, body.dump()));
  }
}

}  // namespace

void run_client(int port, uint64_t seed, std::atomic<int64_t>* next, int64_t total,
                const std::vector<Probe>& probes, Tally* tally) {
  for (;;) {
    const int64_t i = (*next)++;
    if (i >= total) return;
    Rng r{std::mt19937_64(seed * 1000003u + uint64_t(i))};
    ++tally->sent;
    one_request(port, r, probes, tally);
  }
}

bool completion_text(int port, const std::string& body, std::string* text) {
  http::Response resp = http::request(port, "POST", "/v1/completions", body);
  if (resp.status != 200) return false;
  json j = json::parse(resp.body, nullptr, false);
  if (!j.is_object() || !j.contains("choices")) return false;
  *text = j["choices"][0]["text"];
  return true;
}

}  // namespace flashserve::soak
