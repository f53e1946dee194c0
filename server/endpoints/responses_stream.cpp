// ResponsesEventWriter (see responses_stream.h): one output item is open at a time. A chat delta
// of another kind (reasoning_content, content, a new tool call) closes it and opens the next; the
// finish reason closes the last. The end writes the final response object, whose output holds the
// items as their .done events gave them.
#include "server/endpoints/responses_stream.h"

#include "server/endpoints/responses_output.h"

namespace flashserve {

using json = nlohmann::json;

bool ResponsesEventWriter::emit(const char* type, json fields) {
  fields["type"] = type;
  fields["sequence_number"] = sequence_++;
  return out_.write(std::string("event: ") + type + "\ndata: " + dump_json(fields) + "\n\n");
}

json ResponsesEventWriter::item_ids() const {
  return json{{"item_id", item_id_}, {"output_index", output_.size()}};
}

bool ResponsesEventWriter::start() {
  if (started_) return true;
  started_ = true;
  const json r = response_object(turn_, "in_progress", json::array(), nullptr);
  return emit("response.created", {{"response", r}}) &&
         emit("response.in_progress", {{"response", r}});
}

bool ResponsesEventWriter::open(Kind kind, const std::string& call_id, const std::string& name) {
  if (!close()) return false;
  kind_ = kind;
  text_.clear();
  json item, part;
  if (kind == Kind::kReasoning) {
    item_id_ = random_id("rs_");
    item = reasoning_item(item_id_, "", "in_progress");
    part = reasoning_text_part("");
  } else if (kind == Kind::kMessage) {
    item_id_ = random_id("msg_");
    item = message_item(item_id_, "", "in_progress");
    part = output_text_part("");
    has_message_ = true;
  } else {
    item_id_ = random_id("fc_");
    call_id_ = call_id;
    name_ = name;
    item = function_call_item(item_id_, call_id, name, "", "in_progress");
    has_call_ = true;
  }
  if (!part.is_null()) item["content"] = json::array();  // the part is added next
  if (!emit("response.output_item.added", {{"output_index", output_.size()}, {"item", item}})) {
    return false;
  }
  if (part.is_null()) return true;
  json f = item_ids();
  f["content_index"] = 0;
  f["part"] = std::move(part);
  return emit("response.content_part.added", std::move(f));
}

bool ResponsesEventWriter::close() {
  if (kind_ == Kind::kNone) return true;
  const Kind kind = kind_;
  kind_ = Kind::kNone;
  json f = item_ids();
  json item;
  bool ok = true;
  if (kind == Kind::kCall) {
    f["name"] = name_;
    f["arguments"] = text_;
    ok = emit("response.function_call_arguments.done", f);
    item = function_call_item(item_id_, call_id_, name_, text_, "completed");
  } else {
    const bool message = kind == Kind::kMessage;
    f["content_index"] = 0;
    json done = f;
    done["text"] = text_;
    if (message) done["logprobs"] = json::array();
    ok = emit(message ? "response.output_text.done" : "response.reasoning_text.done",
              std::move(done));
    f["part"] = message ? output_text_part(text_) : reasoning_text_part(text_);
    ok = ok && emit("response.content_part.done", f);
    const char* status = message && finish_reason_ == "length" ? "incomplete" : "completed";
    item = message ? message_item(item_id_, text_, status)
                   : reasoning_item(item_id_, text_, "completed");
  }
  ok = ok && emit("response.output_item.done", {{"output_index", output_.size()}, {"item", item}});
  output_.push_back(std::move(item));
  return ok;
}

bool ResponsesEventWriter::append(Kind kind, const std::string& delta) {
  if (delta.empty()) return true;
  if (kind_ != kind && !open(kind)) return false;
  text_ += delta;
  json f = item_ids();
  f["content_index"] = 0;
  f["delta"] = delta;
  if (kind == Kind::kReasoning) {
    reasoning_ += delta;
    return emit("response.reasoning_text.delta", std::move(f));
  }
  f["logprobs"] = json::array();
  return emit("response.output_text.delta", std::move(f));
}

// A chat tool-call delta: the first for a call carries its id and name, later ones arguments.
bool ResponsesEventWriter::tool_call_delta(const json& call) {
  const json function = call.value("function", json::object());
  const std::string arguments = function.value("arguments", "");
  if (call.contains("id")) {
    if (!open(Kind::kCall, call["id"].get<std::string>(), function.value("name", ""))) return false;
  } else if (kind_ != Kind::kCall) {
    return true;  // the chat stream always names a call before its arguments
  }
  if (arguments.empty()) return true;
  text_ += arguments;
  json f = item_ids();
  f["delta"] = arguments;
  return emit("response.function_call_arguments.delta", std::move(f));
}

bool ResponsesEventWriter::send_event(const json& chunk) {
  if (!start()) return false;
  if (chunk.contains("error")) {
    error_ = chunk["error"];
    return true;
  }
  if (chunk.contains("usage")) usage_ = chunk["usage"];
  for (const json& choice : chunk.value("choices", json::array())) {
    const json delta = choice.value("delta", json::object());
    if (delta.contains("reasoning_content") && delta["reasoning_content"].is_string() &&
        !append(Kind::kReasoning, delta["reasoning_content"].get<std::string>())) {
      return false;
    }
    if (delta.contains("content") && delta["content"].is_string() &&
        !append(Kind::kMessage, delta["content"].get<std::string>())) {
      return false;
    }
    for (const json& call : delta.value("tool_calls", json::array())) {
      if (!tool_call_delta(call)) return false;
    }
    if (choice.contains("finish_reason") && choice["finish_reason"].is_string()) {
      finish_reason_ = choice["finish_reason"].get<std::string>();
      if (!close()) return false;
    }
  }
  return true;
}

bool ResponsesEventWriter::send_done() {
  if (!start() || !close()) return false;
  // As the whole response has it: a message item whenever nothing was called.
  if (error_.is_null() && !has_message_ && !has_call_ && !(open(Kind::kMessage) && close())) {
    return false;
  }
  json error = nullptr;
  std::string status = finish_reason_ == "length" ? "incomplete" : "completed";
  if (!error_.is_null()) {
    status = "failed";
    const json code = error_.value("code", json());
    error = {{"code", code.is_null() ? json("server_error") : code},
             {"message", error_.value("message", "")}};
  }
  final_ = response_object(turn_, status, output_, responses_usage(usage_, reasoning_, tokenizer_),
                           std::move(error));
  const char* type = status == "failed"       ? "response.failed"
                     : status == "incomplete" ? "response.incomplete"
                                              : "response.completed";
  return emit(type, {{"response", final_}});
}

}  // namespace flashserve
