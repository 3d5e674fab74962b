#include "core/http.h"

#include <curl/curl.h>
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <mutex>

#include "core/error.h"
#include "core/interrupt.h"

namespace rlid {

namespace {

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
      throw InternalError("libcurl's global initialisation failed");
  });
}

size_t Append(char* data, size_t size, size_t count, void* to) {
  static_cast<std::string*>(to)->append(data, size * count);
  return size * count;
}

// One easy handle with its buffers; freed with the transfer.
struct Transfer {
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  char error[CURL_ERROR_SIZE] = {};
  HttpResponse* out = nullptr;
  ~Transfer() {
    if (headers) curl_slist_free_all(headers);
    if (easy) curl_easy_cleanup(easy);
  }
};

std::unique_ptr<Transfer> Start(const HttpRequest& r, HttpResponse* out) {
  auto t = std::make_unique<Transfer>();
  t->out = out;
  t->easy = curl_easy_init();
  if (!t->easy) throw InternalError("curl_easy_init failed");
  CURL* e = t->easy;
  curl_easy_setopt(e, CURLOPT_URL, r.url.c_str());
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(r.timeout_s * 1000));
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, Append);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, &out->body);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t->error);
  // Loopback servers must not go through a proxy the environment names.
  curl_easy_setopt(e, CURLOPT_NOPROXY, "127.0.0.1,localhost,::1");
  if (!r.body.empty()) t->headers = curl_slist_append(t->headers, "Content-Type: application/json");
  for (const auto& h : r.headers) t->headers = curl_slist_append(t->headers, h.c_str());
  if (t->headers) curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->headers);
  if (r.method == "POST") {
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, r.body.c_str());
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
  } else if (r.method != "GET") {
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, r.method.c_str());
    if (!r.body.empty()) {
      curl_easy_setopt(e, CURLOPT_POSTFIELDS, r.body.c_str());
      curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
    }
  }
  return t;
}

void Finish(Transfer& t, CURLcode code) {
  if (code != CURLE_OK) {
    t.out->error = t.error[0] ? t.error : curl_easy_strerror(code);
    return;
  }
  curl_easy_getinfo(t.easy, CURLINFO_RESPONSE_CODE, &t.out->status);
}

struct Multi {
  CURLM* m = curl_multi_init();
  ~Multi() { curl_multi_cleanup(m); }
};

}  // namespace

std::string HttpResponse::Describe() const {
  if (!error.empty()) return error;
  std::string start = body.size() > 400 ? body.substr(0, 400) + "..." : body;
  return fmt::format("HTTP {}: {}", status, start);
}

std::vector<HttpResponse> HttpPerform(const std::vector<HttpRequest>& requests, int max_parallel) {
  GlobalInit();
  std::vector<HttpResponse> out(requests.size());
  Multi multi;
  if (!multi.m) throw InternalError("curl_multi_init failed");
  std::vector<std::unique_ptr<Transfer>> running;  // owned until done
  size_t next = 0, done = 0;
  const size_t parallel = static_cast<size_t>(std::max(1, max_parallel));
  auto detach = [&](CURL* e) {
    curl_multi_remove_handle(multi.m, e);
    running.erase(std::remove_if(running.begin(), running.end(),
                                 [e](const auto& t) { return t->easy == e; }),
                  running.end());
  };
  try {
    while (done < requests.size()) {
      while (next < requests.size() && running.size() < parallel) {
        running.push_back(Start(requests[next], &out[next]));
        curl_multi_add_handle(multi.m, running.back()->easy);
        ++next;
      }
      int still = 0;
      curl_multi_perform(multi.m, &still);
      int queued = 0;
      while (CURLMsg* msg = curl_multi_info_read(multi.m, &queued)) {
        if (msg->msg != CURLMSG_DONE) continue;
        for (auto& t : running)
          if (t->easy == msg->easy_handle) Finish(*t, msg->data.result);
        detach(msg->easy_handle);
        ++done;
      }
      if (done < requests.size()) {
        ThrowIfInterrupted();
        curl_multi_poll(multi.m, nullptr, 0, 100, nullptr);
      }
    }
  } catch (...) {
    for (auto& t : running) curl_multi_remove_handle(multi.m, t->easy);
    throw;
  }
  return out;
}

HttpResponse HttpPerform(const HttpRequest& request) { return HttpPerform(std::vector{request}).front(); }

}  // namespace rlid
