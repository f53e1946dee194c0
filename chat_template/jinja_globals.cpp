// The globals every template gets besides the caller's variables: range(), namespace() and
// dict(), with jinja2's sandbox bound on range.
#include "chat_template/jinja_builtins.h"
#include "core/error.h"

namespace flashserve::jinja {
namespace {

Value range(CallArgs& a) {
  int64_t v[3] = {0, 0, 1};
  const size_t n = a.positional.size();
  if (n < 1 || n > 3) throw RenderError("range expected 1 to 3 arguments");
  for (size_t k = 0; k < n; ++k) {
    if (!a.positional[k].is(Value::Type::Int)) throw RenderError("range() takes integers");
  }
  if (n == 1) {
    v[1] = a.positional[0].as_int();
  } else {
    v[0] = a.positional[0].as_int();
    v[1] = a.positional[1].as_int();
    if (n == 3) v[2] = a.positional[2].as_int();
  }
  if (v[2] == 0) throw RenderError("range() arg 3 must not be zero");
  List out;
  for (int64_t i = v[0]; v[2] > 0 ? i < v[1] : i > v[1]; i += v[2]) {
    if (out.size() >= 100000) throw RenderError("range too big (the sandbox limit is 100000)");
    out.push_back(Value::integer(i));
  }
  return Value::list(std::move(out));
}

// namespace(...) and dict(...) arguments: mappings and keywords, merged in order.
Dict from_kwargs(CallArgs& a, const char* what) {
  Dict d;
  for (const Value& p : a.positional) {
    if (!p.is_mapping()) throw RenderError(str_cat(what, "() takes a mapping or keywords"));
    for (const auto& [k, v] : p.mapping().items) d.set(k, v);
  }
  for (auto& [k, v] : a.keyword) d.set(Value::string(k), v);
  return d;
}

}  // namespace

std::vector<std::pair<std::string, Value>> builtin_globals() {
  return {
      {"range", Value::callable("range", range)},
      {"namespace", Value::callable("namespace",
                                    [](CallArgs& a) -> Value {
                                      return Value::namespace_(from_kwargs(a, "namespace"));
                                    })},
      {"dict", Value::callable("dict",
                               [](CallArgs& a) { return Value::dict(from_kwargs(a, "dict")); })},
  };
}

}  // namespace flashserve::jinja
