// tools, tool_choice, parallel_tool_calls and the tool fields of messages (see tools_request.h).
#include "server/tool_calls/tools_request.h"

#include <set>

#include "server/api/request_fields.h"
#include "server/api/response_format.h"
#include "structured/compiled_grammar.h"
#include "structured/schema_error.h"

namespace flashserve::request {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

namespace {

constexpr size_t kMaxTools = 128;

// OpenAI's rule for function names: letters, digits, '_' and '-', at most 64.
bool valid_function_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  }
  return true;
}

void check_keys(const json& o, const std::string& where, const std::set<std::string>& keys) {
  for (const auto& [key, value] : o.items()) {
    if (!keys.count(key)) {
      throw bad_request("unknown parameter '" + where + "." + key + "'", where + "." + key,
                        "unknown_parameter");
    }
  }
}

std::string string_field(const json& o, const char* key, const std::string& where) {
  if (!has(o, key) || !o[key].is_string()) {
    throw bad_request("'" + where + "." + key + "' is required (a string)", where + "." + key);
  }
  return o[key].get<std::string>();
}

// One tool: its shape, and its parameters compiled as a schema (the compiler caches it for a
// forced call later).
void check_tool(const json& t, const ordered_json& ot, const std::string& where,
                const ServedModel& model) {
  if (!t.is_object()) throw bad_request("'" + where + "' must be an object", where);
  check_keys(t, where, {"type", "function"});
  if (!has(t, "type") || t["type"] != "function") {
    throw bad_request("'" + where + ".type' must be 'function' (the only tool type)", where + ".type");
  }
  const std::string fw = where + ".function";
  if (!has(t, "function") || !t["function"].is_object()) {
    throw bad_request("'" + fw + "' is required (an object)", fw);
  }
  const json& f = t["function"];
  check_keys(f, fw, {"name", "description", "parameters", "strict"});
  if (!valid_function_name(string_field(f, "name", fw))) {
    throw bad_request("'" + fw + ".name' must be 1 to 64 letters, digits, '_' or '-'", fw + ".name");
  }
  if (has(f, "description") && !f["description"].is_string()) {
    throw bad_request("'" + fw + ".description' must be a string", fw + ".description");
  }
  if (has(f, "strict")) get_bool(f["strict"], fw + ".strict");
  if (has(f, "parameters")) {
    const std::string pw = fw + ".parameters";
    if (!f["parameters"].is_object()) throw bad_request("'" + pw + "' must be a JSON Schema object", pw);
    try {
      if (model.grammar_compiler) {
        model.grammar_compiler->json_schema(ot["function"]["parameters"].dump());
      } else {
        structured::compile_json_schema(ot["function"]["parameters"].dump());
      }
    } catch (const structured::SchemaError& e) {
      throw schema_error(pw, e);
    }
  }
}

void read_tool_choice(const json& v, ToolsRequest* r) {
  const std::string p = "tool_choice";
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "none") r->choice = ToolsRequest::Choice::kNone;
    else if (s == "auto") r->choice = ToolsRequest::Choice::kAuto;
    else if (s == "required") r->choice = ToolsRequest::Choice::kRequired;
    else throw bad_request("'tool_choice' must be 'none', 'auto', 'required' or {\"type\": "
                           "\"function\", \"function\": {\"name\": ...}}, got '" + s + "'", p);
    return;
  }
  if (!v.is_object() || !has(v, "type") || v["type"] != "function" || !has(v, "function") ||
      !v["function"].is_object()) {
    throw bad_request("'tool_choice' must be 'none', 'auto', 'required' or {\"type\": "
                      "\"function\", \"function\": {\"name\": ...}}", p);
  }
  check_keys(v, p, {"type", "function"});
  check_keys(v["function"], p + ".function", {"name"});
  r->named = string_field(v["function"], "name", p + ".function");
  r->choice = ToolsRequest::Choice::kNamed;
}

}  // namespace

std::string ToolsRequest::parameters(const std::string& name) const {
  for (const auto& t : tools) {
    if (t["function"]["name"] == name) {
      return t["function"].contains("parameters") && !t["function"]["parameters"].is_null()
                 ? t["function"]["parameters"].dump()
                 : std::string(R"({"type":"object"})");
    }
  }
  return "";
}

ToolsRequest read_tools(const json& j, std::string_view body, const ServedModel& model) {
  ToolsRequest r;
  if (has(j, "parallel_tool_calls")) r.parallel = get_bool(j["parallel_tool_calls"], "parallel_tool_calls");
  if (has(j, "tool_choice")) read_tool_choice(j["tool_choice"], &r);
  if (!has(j, "tools")) {
    if (r.choice == ToolsRequest::Choice::kRequired || r.choice == ToolsRequest::Choice::kNamed) {
      throw bad_request("'tool_choice' asks for a tool call but 'tools' is empty", "tool_choice");
    }
    return r;
  }
  const json& tools = j["tools"];
  if (!tools.is_array()) throw bad_request("'tools' must be a list of tools", "tools");
  if (tools.size() > kMaxTools) {
    throw bad_request("'tools' may hold at most " + std::to_string(kMaxTools) + " tools", "tools");
  }
  const ordered_json otools = ordered_json::parse(body)["tools"];
  std::set<std::string> names;
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string where = "tools[" + std::to_string(i) + "]";
    check_tool(tools[i], otools[i], where, model);
    const std::string name = tools[i]["function"]["name"].get<std::string>();
    if (!names.insert(name).second) {
      throw bad_request("'" + where + ".function.name': the name '" + name + "' is used twice",
                        where + ".function.name");
    }
  }
  if (r.choice == ToolsRequest::Choice::kNamed && !names.count(r.named)) {
    throw bad_request("'tool_choice' names the function '" + r.named + "', which is not in 'tools'",
                      "tool_choice");
  }
  r.tools = otools;
  if (tools.empty() &&
      (r.choice == ToolsRequest::Choice::kRequired || r.choice == ToolsRequest::Choice::kNamed)) {
    throw bad_request("'tool_choice' asks for a tool call but 'tools' is empty", "tool_choice");
  }
  return r;
}

void read_message_tool_fields(const json& m, const std::string& where, ChatMessage* msg) {
  if (msg->role == "tool") {
    if (!has(m, "tool_call_id") || !m["tool_call_id"].is_string()) {
      throw bad_request("'" + where + ".tool_call_id' is required in a tool message (a string)",
                        where + ".tool_call_id");
    }
    msg->tool_call_id = m["tool_call_id"].get<std::string>();
  } else if (has(m, "tool_call_id")) {
    throw bad_request("'" + where + ".tool_call_id' belongs only in a message of role 'tool'",
                      where + ".tool_call_id");
  }
  if (!has(m, "tool_calls")) return;
  const std::string tw = where + ".tool_calls";
  if (msg->role != "assistant") {
    throw bad_request("'" + tw + "' belongs only in an assistant message", tw);
  }
  if (!m["tool_calls"].is_array()) throw bad_request("'" + tw + "' must be a list", tw);
  for (size_t k = 0; k < m["tool_calls"].size(); ++k) {
    const std::string cw = tw + "[" + std::to_string(k) + "]";
    const json& c = m["tool_calls"][k];
    if (!c.is_object()) throw bad_request("'" + cw + "' must be an object", cw);
    check_keys(c, cw, {"id", "type", "function"});
    if (has(c, "type") && c["type"] != "function") {
      throw bad_request("'" + cw + ".type' must be 'function'", cw + ".type");
    }
    if (!has(c, "function") || !c["function"].is_object()) {
      throw bad_request("'" + cw + ".function' is required (an object)", cw + ".function");
    }
    const json& f = c["function"];
    check_keys(f, cw + ".function", {"name", "arguments"});
    ChatToolCall call;
    call.id = has(c, "id") && c["id"].is_string() ? c["id"].get<std::string>() : "";
    call.name = string_field(f, "name", cw + ".function");
    call.arguments = string_field(f, "arguments", cw + ".function");
    if (json::parse(call.arguments, nullptr, false).is_discarded()) {
      throw bad_request("'" + cw + ".function.arguments' must be JSON text", cw + ".function.arguments");
    }
    msg->tool_calls.push_back(std::move(call));
  }
}

}  // namespace flashserve::request
