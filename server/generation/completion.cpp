// Completion (see completion.h): the one pipeline behind /v1/completions and
// /v1/chat/completions (the request's format only picks the JSON shapes): submit one engine
// request per choice, pump their events into the choices (completion_choice.h), and write the
// JSON response or the SSE events from what the choices built (chat: <think> split into
// reasoning_content by output_parsers/reasoning_parser.h, then tool calls parsed from the
// content by tool_call_output.h; a harmony model's output split by channel in one parse).
#include "server/generation/completion.h"

#include <algorithm>
#include <functional>

#include "parallel/node_group.h"
#include "server/generation/completion_choice.h"
#include "tokenizer/tokenizer.h"

namespace flashserve {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

std::string new_completion_id(ResponseFormat format) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%s-%016llx%08llx",
                format == ResponseFormat::kChat ? "chatcmpl" : "cmpl",
                static_cast<unsigned long long>(random_u64()),
                static_cast<unsigned long long>(random_u64() & 0xffffffffu));
  return buf;
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// A finished choice's JSON with its schema_violation extension field, when it has one.
json with_violation(const CompletionChoice& c, json choice) {
  if (!c.schema_violation.is_null()) choice["schema_violation"] = c.schema_violation;
  return choice;
}

}  // namespace

Completion::Completion(const CompletionContext& ctx, CompletionRequest request)
    : ctx_(ctx), req_(std::move(request)), id_(new_completion_id(req_.format)),
      created_(std::chrono::duration_cast<std::chrono::seconds>(
                   std::chrono::system_clock::now().time_since_epoch()).count()),
      start_(Clock::now()) {}

Completion::~Completion() { cancel_all(); }

void Completion::cancel_all() {
  for (auto& c : choices_) {
    if (!c->done && c->stream) c->stream->cancel();
    c->done = true;
  }
}

std::optional<ApiError> Completion::start() {
  const bool want_prompt_lp = req_.echo && req_.logprobs >= 0;
  // Every choice waits in the engine's queue at first, so a request with more of them than the
  // queue holds could never be admitted: that is the request's fault (400), not a 503 to retry.
  const bool needs_engine = req_.max_tokens > 0 || want_prompt_lp;
  const int64_t engine_choices = int64_t(req_.prompts.size()) * req_.n;
  if (needs_engine && engine_choices > ctx_.engine->max_queue()) {
    return bad_request("this request has " + std::to_string(engine_choices) +
                           " choices (prompts x n), more than this server's queue of " +
                           std::to_string(ctx_.engine->max_queue()) +
                           " requests (--max-queue) can ever hold; send fewer prompts or a "
                           "smaller n",
                       "n");
  }
  int index = 0;
  for (size_t p = 0; p < req_.prompts.size(); ++p) {
    for (int j = 0; j < req_.n; ++j) {
      auto c = std::make_unique<CompletionChoice>();
      c->index = index++;
      c->prompt_idx = p;
      c->detok = std::make_unique<IncrementalDetokenizer>(*ctx_.tokenizer, req_.prompts[p]);
      c->stop = std::make_unique<StopMatcher>(req_.stop);
      c->echo_pending = req_.echo;
      c->logprobs.format = req_.format;
      GenerationRequest g;
      g.prompt = req_.prompts[p];
      g.max_tokens = req_.max_tokens;
      g.sampling = req_.sampling;
      // Choice j of a seeded request uses seed + j: reproducible, yet the n choices differ.
      g.sampling.seed = req_.has_seed ? req_.sampling.seed + static_cast<uint64_t>(j) : random_u64();
      g.has_seed = true;  // the seed above is always the one to use
      g.ignore_eos = req_.ignore_eos;
      g.speculative = req_.speculative;
      g.prompt_logprobs = want_prompt_lp;
      g.cache_salt = req_.cache_salt;
      g.constraint = req_.constraint;
      if (req_.tool_call_format != output_parsers::ToolCallFormat::kNone) {
        c->call_id_seed = random_u64();
        c->tool_deltas = std::make_unique<ToolCallDeltas>(req_.tool_call_format,
                                                          req_.parallel_tool_calls, c->call_id_seed);
      }
      if (req_.reasoning) {
        c->reasoning = std::make_unique<output_parsers::ReasoningStream>(req_.starts_in_reasoning);
      }
      if (req_.harmony) {
        c->call_id_seed = random_u64();
        c->harmony = std::make_unique<HarmonyDeltas>(req_.harmony_functions,
                                                     req_.parallel_tool_calls, c->call_id_seed);
      }
      if (!needs_engine) {  // nothing to generate: answer without the engine
        c->done = true;
        c->finish_reason = "length";
        if (req_.echo) {
          c->text = req_.echo_texts[p];
          c->echo_pending = false;
        }
      } else {
        c->stream = ctx_.engine->submit(std::move(g));
        if (!c->stream) {
          cancel_all();
          return server_error(503, "server_overloaded",
                              "The server is overloaded (admission queue full); retry later");
        }
      }
      choices_.push_back(std::move(c));
    }
  }
  return std::nullopt;
}

bool Completion::pump(std::chrono::milliseconds wait, std::vector<Delta>* deltas) {
  bool any = false;
  auto take = [&](size_t i, std::chrono::milliseconds timeout) {
    CompletionChoice& c = *choices_[i];
    auto ev = c.stream->next(timeout);
    if (!ev) return false;
    const bool was_done = c.done;
    Delta d;
    d.choice = i;
    d.text = c.apply(*ev, req_, *ctx_.tokenizer, ctx_.engine->config().eos_token_ids);
    d.logprobs_end = c.logprobs.size();
    d.finished = c.done && !was_done;
    deltas->push_back(std::move(d));
    return true;
  };
  for (size_t i = 0; i < choices_.size(); ++i) {
    while (!choices_[i]->done && take(i, std::chrono::milliseconds(0))) any = true;
  }
  if (!any) {
    size_t waiting = 0, first = choices_.size();
    for (size_t i = 0; i < choices_.size(); ++i) {
      if (!choices_[i]->done) {
        ++waiting;
        first = std::min(first, i);
      }
    }
    if (waiting == 0) return false;
    // With several choices, wait briefly on one so the others' events are not held up long.
    take(first, waiting == 1 ? wait : std::min(wait, std::chrono::milliseconds(5)));
  }
  return std::any_of(choices_.begin(), choices_.end(), [](const auto& c) { return !c->done; });
}

std::optional<ApiError> Completion::failure() const {
  for (const auto& c : choices_) {
    // A lost node of a multi-host group is not this server's fault and a restart heals it: 503.
    if (c->error.find(NodeGroup::kNodeGroupLost) != std::string::npos) {
      return server_error(503, "node_group_lost",
                          "The server lost a node of its group and is restarting: " + c->error);
    }
    if (!c->error.empty()) {
      return server_error(500, "engine_error", "The engine failed this request: " + c->error);
    }
  }
  for (const auto& c : choices_) {
    if (c->aborted) {
      return server_error(503, "request_aborted",
                          "The request was aborted (the server is shutting down)");
    }
  }
  return std::nullopt;
}

CompletionResult Completion::run(ClientConnection& conn) {
  std::vector<Delta> deltas;
  while (std::any_of(choices_.begin(), choices_.end(), [](const auto& c) { return !c->done; })) {
    if (conn.gone()) {
      cancel_all();
      if (ctx_.metrics) ctx_.metrics->count_disconnect();
      record_metrics();
      return CompletionResult{499, json(), 0, true};
    }
    deltas.clear();
    pump(ctx_.poll, &deltas);
  }
  record_metrics();
  if (auto e = failure()) return CompletionResult{e->status, error_json(*e), e->retry_after_s};
  json choices = json::array();
  const bool chat = req_.format == ResponseFormat::kChat;
  for (const auto& c : choices_) {
    json lp = req_.logprobs >= 0 ? c->logprobs.to_json() : json(nullptr);
    if (!chat) {
      choices.push_back(with_violation(*c, choice_json(c->index, c->text, lp, c->finish_reason)));
      continue;
    }
    if (c->harmony) {  // channels: reasoning, calls and content in one parse
      std::string reason = c->finish_reason;
      json choice = chat_choice_json(c->index, "", lp, reason);
      choice["message"] = harmony_message(req_.harmony_prefill + c->text, req_.harmony_functions,
                                          req_.parallel_tool_calls, c->call_id_seed, &reason);
      choice["finish_reason"] = reason.empty() ? json(nullptr) : json(reason);
      choices.push_back(with_violation(*c, std::move(choice)));
      continue;
    }
    // Reasoning first: the tool-call parser and the client see only what follows </think>.
    output_parsers::ReasoningOutput parts{"", c->text};
    if (req_.reasoning) parts = output_parsers::split_reasoning(c->text, req_.starts_in_reasoning);
    json choice = chat_choice_json(c->index, parts.content, lp, c->finish_reason);
    if (c->tool_deltas) {  // tools: the content parsed into content and tool_calls
      std::string reason = c->finish_reason;
      choice["message"] = tool_call_message(req_.tool_call_format, parts.content,
                                            req_.parallel_tool_calls, c->call_id_seed, &reason);
      choice["finish_reason"] = reason.empty() ? json(nullptr) : json(reason);
    }
    if (req_.reasoning) {
      choice["message"]["reasoning_content"] =
          parts.reasoning_content.empty() ? json(nullptr) : json(parts.reasoning_content);
    }
    choices.push_back(with_violation(*c, std::move(choice)));
  }
  Usage u{prompt_tokens(), completion_tokens(), cached_tokens()};
  return CompletionResult{200, response_json(req_.format, false, id_, created_, ctx_.model->id,
                                             choices, usage_json(u))};
}

bool Completion::stream(ClientConnection& conn) {
  std::vector<Delta> deltas;
  const bool chat = req_.format == ResponseFormat::kChat;
  auto chunk = [&](json choice) {
    return response_json(req_.format, true, id_, created_, ctx_.model->id,
                         json::array({std::move(choice)}), nullptr);
  };
  auto logprobs_delta = [&](CompletionChoice& c, size_t end) -> json {
    if (req_.logprobs < 0 || end <= c.logprobs_sent) return nullptr;
    json out = c.logprobs.part(c.logprobs_sent, end);
    c.logprobs_sent = end;
    return out;
  };
  // Chat with tools: the text goes through the tool-call parser; its deltas carry the logprobs
  // of the text that produced them (the first of them, or an empty content delta).
  // A harmony choice the same way, its reasoning in {"reasoning_content"} deltas.
  auto send_parsed_deltas = [&](CompletionChoice& c, const std::string& delta, json lp,
                                bool finishing, auto& parser) {
    std::vector<json> out = parser.push(delta);
    if (finishing) {
      for (json& d : parser.finish()) out.push_back(std::move(d));
    }
    if (out.empty() && !lp.is_null()) out.push_back({{"content", ""}});
    for (json& d : out) {
      if (!conn.send_event(chunk(chat_delta_json(c.index, d, lp, "")))) return false;
      lp = nullptr;
    }
    const std::string reason = tool_finish_reason(c.finish_reason, parser.called());
    return !finishing ||
           conn.send_event(chunk(chat_delta_json(c.index, json::object(), nullptr, reason)));
  };
  // Completions: one chunk with the text and, at the end, the finish reason. Chat: the text in a
  // {"content"} delta (reasoning first in {"reasoning_content"} deltas), then the finish reason in
  // a chunk of its own with an empty delta.
  auto send_choice = [&](CompletionChoice& c, std::string delta, size_t logprobs_end,
                         bool finished) {
    bool finishing = finished && !c.finish_reason.empty();
    json lp = logprobs_delta(c, logprobs_end);
    if (!chat) {
      if (delta.empty() && lp.is_null() && !finishing) return true;
      json choice = choice_json(c.index, delta, lp, finishing ? c.finish_reason : "");
      return conn.send_event(chunk(finishing ? with_violation(c, std::move(choice)) : std::move(choice)));
    }
    if (c.harmony) {
      if (!c.harmony_prefill_sent) delta.insert(0, req_.harmony_prefill);
      c.harmony_prefill_sent = true;
      return send_parsed_deltas(c, delta, std::move(lp), finishing, *c.harmony);
    }
    if (c.reasoning) {
      output_parsers::ReasoningOutput parts = c.reasoning->push(delta);
      if (finishing) {
        output_parsers::ReasoningOutput tail = c.reasoning->finish();
        parts.reasoning_content += tail.reasoning_content;
        parts.content += tail.content;
      }
      if (!parts.reasoning_content.empty()) {
        json d = {{"reasoning_content", parts.reasoning_content}};
        if (!conn.send_event(chunk(chat_delta_json(c.index, d, lp, "")))) return false;
        lp = nullptr;
      }
      delta = std::move(parts.content);
    }
    if (c.tool_deltas) return send_parsed_deltas(c, delta, std::move(lp), finishing, *c.tool_deltas);
    if ((!delta.empty() || !lp.is_null()) &&
        !conn.send_event(chunk(chat_delta_json(c.index, {{"content", delta}}, lp, "")))) {
      return false;
    }
    return !finishing || conn.send_event(chunk(with_violation(
                             c, chat_delta_json(c.index, json::object(), nullptr, c.finish_reason))));
  };
  auto gone = [&] {
    cancel_all();
    if (ctx_.metrics) ctx_.metrics->count_disconnect();
    record_metrics();
    return false;
  };
  // Chat: every choice's first delta carries the role.
  for (auto& c : choices_) {
    json role = {{"role", "assistant"}, {"content", ""}};
    if (chat && !conn.send_event(chunk(chat_delta_json(c->index, role, nullptr, "")))) {
      return gone();
    }
  }
  // Choices answered without the engine (max_tokens 0) go first.
  for (auto& c : choices_) {
    if (c->done && !send_choice(*c, c->text, c->logprobs.size(), true)) return gone();
  }
  bool more = std::any_of(choices_.begin(), choices_.end(), [](const auto& c) { return !c->done; });
  while (more) {
    if (conn.gone()) return gone();
    deltas.clear();
    more = pump(ctx_.poll, &deltas);
    if (auto e = failure()) {
      cancel_all();
      record_metrics();
      conn.send_event(error_json(*e));
      conn.send_done();
      return true;
    }
    for (const Delta& d : deltas) {
      if (!send_choice(*choices_[d.choice], d.text, d.logprobs_end, d.finished)) return gone();
    }
  }
  record_metrics();
  if (req_.include_usage) {
    Usage u{prompt_tokens(), completion_tokens(), cached_tokens()};
    if (!conn.send_event(response_json(req_.format, true, id_, created_, ctx_.model->id,
                                       json::array(), usage_json(u)))) {
      return false;
    }
  }
  return conn.send_done();
}

// Each prompt counts once, however many choices it has (as OpenAI and vLLM count usage).
int Completion::prompt_tokens() const {
  int n = 0;
  for (const auto& p : req_.prompts) n += static_cast<int>(p.size());
  return n;
}

int Completion::completion_tokens() const {
  int n = 0;
  for (const auto& c : choices_) n += c->completion_tokens;
  return n;
}

int Completion::cached_tokens() const {
  int n = 0;
  for (const auto& c : choices_) {
    if (c->index % req_.n == 0) n += c->cached_tokens;  // choice 0 of each prompt
  }
  return n;
}

double Completion::ttft_s() const {
  double best = -1;
  for (const auto& c : choices_) {
    if (c->has_first) {
      double t = seconds(c->first_token - start_);
      if (best < 0 || t < best) best = t;
    }
  }
  return best;
}

void Completion::record_metrics() {
  if (recorded_ || !ctx_.metrics) return;
  recorded_ = true;
  for (const auto& c : choices_) {
    if (!c->has_first) continue;
    ctx_.metrics->observe_ttft(seconds(c->first_token - start_));
    if (c->completion_tokens > 1) {
      ctx_.metrics->observe_tpot(seconds(c->last_token - c->first_token) /
                                 (c->completion_tokens - 1));
    }
  }
  ctx_.metrics->observe_e2e(seconds(Clock::now() - start_));
}

}  // namespace flashserve
