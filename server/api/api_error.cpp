// ApiError (see api_error.h): the constructors of the two kinds and the envelope.
#include "server/api/api_error.h"

namespace flashserve {

using json = nlohmann::json;

ApiError bad_request(std::string message, std::string param, std::string code) {
  ApiError e;
  e.status = 400;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

ApiError server_error(int status, std::string code, std::string message) {
  ApiError e;
  e.status = status;
  e.type = "server_error";
  e.code = std::move(code);
  e.message = std::move(message);
  e.retry_after_s = status == 503 ? 1 : 0;
  return e;
}

json error_json(const ApiError& e) {
  json err = {{"message", e.message}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param.empty()) err["param"] = e.param;
  if (!e.code.empty()) err["code"] = e.code;
  return json{{"error", err}};
}

}  // namespace flashserve
