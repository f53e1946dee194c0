// structured::SchemaError: a schema, pattern or choice list that the grammar compiler refuses,
// naming the keyword and its JSON-pointer path in the schema, so the API edge can answer a 400
// that points at the user's mistake. It is a flashserve::Error, so generic handlers catch it too.
#pragma once

#include <string>

#include "core/error.h"

namespace flashserve::structured {

class SchemaError : public Error {
 public:
  // path: a JSON pointer into the schema ("" is the root, "/properties/a/pattern").
  // unsatisfiable: the subschema admits no value at all (false, an empty type list or enum,
  // types that do not meet), so an anyOf may leave that alternative out.
  SchemaError(std::string keyword, std::string path, const std::string& problem, bool unsatisfiable = false)
      : Error(str_cat("schema ", path.empty() ? std::string("(root)") : path, ": '", keyword,
                      "': ", problem)),
        keyword_(std::move(keyword)),
        path_(std::move(path)),
        unsatisfiable_(unsatisfiable) {}
  const std::string& keyword() const { return keyword_; }
  const std::string& path() const { return path_; }
  bool unsatisfiable() const { return unsatisfiable_; }

 private:
  std::string keyword_;
  std::string path_;
  bool unsatisfiable_ = false;
};

// path + "/" + key as a JSON pointer (~ and / in the key escaped as ~0 and ~1).
inline std::string pointer_child(const std::string& path, const std::string& key) {
  std::string out = path + "/";
  for (char c : key) out += c == '~' ? std::string("~0") : c == '/' ? std::string("~1") : std::string(1, c);
  return out;
}

}  // namespace flashserve::structured
