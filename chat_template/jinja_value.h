// The values a chat template computes with: a small dynamic type mirroring the Python objects
// jinja2 sees (None, bool, int, float, str, list, dict, namespace, callables, Undefined), with
// Python's semantics for truthiness, str(), repr(), == and ordering.
//
// Every string carries its "literal" byte ranges: the bytes copied from message contents. The
// operations that only move bytes around (concatenation, slicing, strip) keep the ranges exactly;
// anything else that reads a literal byte marks its whole result literal (see Text::taint_all).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace flashserve::jinja {

// A runtime error while rendering (a type error, undefined attribute, a limit): the renderer adds
// the template line and turns it into ChatTemplateError.
class RenderError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// [begin, end) byte ranges, sorted and disjoint, adjacent ranges merged.
using Ranges = std::vector<std::pair<size_t, size_t>>;

// A string and which of its bytes are literal.
struct Text {
  std::string s;
  Ranges literal;

  Text() = default;
  Text(std::string str) : s(std::move(str)) {}  // template-written: nothing literal
  static Text all_literal(std::string str);

  void append(const Text& other);
  void append(std::string_view plain);
  // Bytes [begin, end) with their ranges shifted to start at 0.
  Text substr(size_t begin, size_t end) const;
  // The conservative rule for transformations that do not just move bytes: if any input byte
  // was literal, all of `result` is.
  static Text derived(std::string result, bool any_literal);
  bool any_literal() const { return !literal.empty(); }
};

class Value;
using List = std::vector<Value>;
// Insertion-ordered like a Python dict; keys compared with ==. Chat dicts are small.
struct Dict {
  std::vector<std::pair<Value, Value>> items;
  const Value* find(const Value& key) const;
  void set(Value key, Value value);
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};
using Function = std::function<Value(CallArgs&)>;

class Value {
 public:
  enum class Type { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Callable };

  Value() = default;  // Undefined
  static Value undefined(std::string hint) {
    Value v;
    v.hint_ = std::move(hint);
    return v;
  }
  static Value none() { return of(Type::None); }
  static Value boolean(bool b) { return of(Type::Bool, &Value::int_, int64_t(b)); }
  static Value integer(int64_t i) { return of(Type::Int, &Value::int_, i); }
  static Value number(double f) { return of(Type::Float, &Value::float_, f); }
  static Value string(Text t) {
    return of(Type::String, &Value::text_, std::make_shared<const Text>(std::move(t)));
  }
  static Value string(std::string s) { return string(Text(std::move(s))); }
  static Value list(List items) {
    return of(Type::List, &Value::list_, std::make_shared<const List>(std::move(items)));
  }
  // A Python tuple: a list that prints as (a, b) and never equals a list.
  static Value tuple(List items) {
    Value v = list(std::move(items));
    v.tuple_ = true;
    return v;
  }
  static Value dict(Dict d) { return of(Type::Dict, &Value::dict_, std::make_shared<Dict>(std::move(d))); }
  // A namespace() object: the one mutable value ({% set ns.x = ... %}), shared by reference.
  static Value namespace_(Dict d) {
    Value v = dict(std::move(d));
    v.type_ = Type::Namespace;
    return v;
  }
  static Value callable(std::string name, Function fn) {
    Value v = of(Type::Callable, &Value::fn_, std::make_shared<const Function>(std::move(fn)));
    v.hint_ = std::move(name);
    return v;
  }

  Type type() const { return type_; }
  bool is(Type t) const { return type_ == t; }
  bool is_undefined() const { return type_ == Type::Undefined; }
  bool is_number() const { return type_ == Type::Int || type_ == Type::Float; }
  bool is_mapping() const { return type_ == Type::Dict || type_ == Type::Namespace; }
  bool is_tuple() const { return tuple_; }

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return int_; }
  double as_double() const { return type_ == Type::Float ? float_ : static_cast<double>(int_); }
  const Text& text() const { return *text_; }
  const std::string& str() const { return text_->s; }
  const List& items() const { return *list_; }
  const Dict& mapping() const { return *dict_; }
  Dict& namespace_dict() const { return *dict_; }  // only for Type::Namespace
  Value call(CallArgs& args) const { return (*fn_)(args); }
  // Undefined: why ("'x' is undefined"); Callable: its name.
  const std::string& hint() const { return hint_; }

 private:
  static Value of(Type t) {
    Value v;
    v.type_ = t;
    return v;
  }
  // A value of type t whose payload is the member `field`.
  template <class Field, class Payload>
  static Value of(Type t, Field Value::*field, Payload payload) {
    Value v = of(t);
    v.*field = std::move(payload);
    return v;
  }
  Type type_ = Type::Undefined;
  bool tuple_ = false;
  int64_t int_ = 0;  // Bool and Int
  double float_ = 0;
  std::shared_ptr<const Text> text_;
  std::shared_ptr<const List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<const Function> fn_;
  std::string hint_;
};

// Python's type names, for error messages ("'int' object has no attribute 'x'").
const char* type_name(const Value& v);
bool truthy(const Value& v);
// str(v) as jinja2 prints it: Undefined -> "", None -> "None", lists/dicts as Python repr.
Text to_text(const Value& v);
std::string repr(const Value& v);
std::string repr_float(double f);  // Python's repr of a float: "1.0", "1e+20", "inf"
bool equals(const Value& a, const Value& b);
// Python's ordering (numbers, strings by code point, lists lexicographically); RenderError for
// types Python would refuse to compare.
int compare(const Value& a, const Value& b);
// The most items one list may hold (a list, the characters of an iterated string, split
// pieces): bounds the memory a template can take, far above any real conversation.
constexpr size_t kMaxListItems = 200'000;
// RenderError when a list of `n` items would pass kMaxListItems.
void check_list_size(size_t n);

// What `for x in v` visits: list items, dict keys, string characters (each keeping its literal
// range); nothing for Undefined; RenderError for the rest.
List iterate(const Value& v);
// ASCII case mapping: templates change the case of roles and keywords; other bytes are kept.
std::string ascii_case(std::string s, bool upper);
// Throws RenderError when v is Undefined (using it in arithmetic, attribute access, calls).
void require_defined(const Value& v);

// UTF-8 helpers: Python indexes strings by code point, we store bytes.
std::vector<size_t> code_point_starts(std::string_view s);  // byte offset of each code point
size_t code_point_count(std::string_view s);
uint32_t decode_code_point(std::string_view s, size_t& i);  // advances i; invalid byte -> U+FFFD
void append_code_point(std::string& out, uint32_t cp);
bool is_python_space(uint32_t cp);  // str.isspace()

}  // namespace flashserve::jinja
