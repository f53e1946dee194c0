// ApiError: a refused request or a failure on our side, in OpenAI's error envelope, with the
// HTTP status and Retry-After it is sent with. Every endpoint answers its errors with these.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace flashserve {

// An error in the OpenAI envelope: {"error":{"message","type","param","code"}}.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;        // "" -> null
  std::string code;         // "" -> null
  int retry_after_s = 0;    // > 0: send a Retry-After header
};

ApiError bad_request(std::string message, std::string param = "", std::string code = "");
// A failure on our side (type "server_error"); a 503 also asks the client to retry in a second.
ApiError server_error(int status, std::string code, std::string message);
nlohmann::json error_json(const ApiError& e);

}  // namespace flashserve
