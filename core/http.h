// HTTP requests over libcurl, for the rollout engines rlid talks to (a vLLM
// server it owns, or any OpenAI-compatible server the user runs). Requests of
// one call run concurrently; every request has a deadline, and a stop signal
// (core/interrupt.h) ends the wait within 100 ms. Nothing here throws for a
// server's answer: the caller reads the status and the body.
#pragma once

#include <string>
#include <vector>

namespace rlid {

struct HttpRequest {
  std::string method = "POST";  // GET | POST | DELETE
  std::string url;
  std::string body;  // sent as application/json when not empty
  // Extra "Name: value" headers (an API key's "Authorization: Bearer ...").
  std::vector<std::string> headers;
  double timeout_s = 60;  // the whole request, connection included
};

struct HttpResponse {
  long status = 0;     // HTTP status; 0 when no response came
  std::string body;
  std::string error;   // why no response came (refused, timed out, ...); empty otherwise
  bool ok() const { return error.empty() && status >= 200 && status < 300; }
  // "HTTP 404: <body start>" or the transport error, for messages.
  std::string Describe() const;
};

// Performs every request, at most `max_parallel` at once, and returns one
// response per request in order. Throws Interrupted when a stop signal arrives
// (the requests in flight are abandoned).
std::vector<HttpResponse> HttpPerform(const std::vector<HttpRequest>& requests, int max_parallel = 64);
HttpResponse HttpPerform(const HttpRequest& request);

}  // namespace rlid
