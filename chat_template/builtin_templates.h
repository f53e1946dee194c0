// Chat templates built into the server, chosen with --chat-template NAME for models that ship
// without one. Written for this project in the style of the templates their model families
// publish (same prompt format, same role checks).
#pragma once

#include <string>
#include <vector>

namespace flashserve {

// The Jinja source of built-in template `name`, or nullptr.
const char* builtin_template_source(const std::string& name);
std::vector<std::string> builtin_template_names();

}  // namespace flashserve
