// CompletionChoice (see completion_choice.h): per engine event, the echo goes out first, then
// token pieces pass through the incremental detokenizer (prompt as context, so leading spaces
// and multi-byte characters come out right) and then the stop matcher.
#include "server/generation/completion_choice.h"

#include <algorithm>
#include <cmath>

#include "engine/stop_rules.h"
#include "server/api/response_format.h"

namespace flashserve {

std::string CompletionChoice::apply(const StreamEvent& ev, const CompletionRequest& req,
                                   const Tokenizer& tokenizer, std::span<const int32_t> eos_ids) {
  if (done) return "";
  std::string out;
  // Echo goes out with the first event: the prompt logprobs when asked for (the engine sends
  // them before any token), else whatever comes first.
  if (echo_pending) {
    echo_pending = false;
    if (ev.kind == StreamEvent::Kind::kPromptLogprobs && req.logprobs >= 0) {
      // The echo is spelled token by token: each prompt token is the text it adds (BOS adds
      // "", the first piece has no leading space), so the tokens join to the echoed text and
      // text_offset indexes it. Only a byte piece that ends inside a character keeps its
      // "bytes:\xNN" spelling, as generated tokens do. For a text prompt this is the text as
      // given whenever the tokenizer reads it back unchanged (it does for plain text).
      const auto& prompt = req.prompts[prompt_idx];
      IncrementalDetokenizer d(tokenizer);
      std::string echo;
      for (size_t i = 0; i < prompt.size(); ++i) {
        SampledToken t = i < ev.prompt_logprobs.size() ? ev.prompt_logprobs[i] : SampledToken{};
        t.token = prompt[i];
        if (i == 0) t.logprob = std::nanf("");  // nothing precedes the first prompt token
        logprobs.add(tokenizer, t, echo.size(), /*has_top=*/true);
        const std::string piece = d.push(prompt[i]);
        auto& spelled = logprobs.tokens.back();
        if (!piece.empty() || spelled.get<std::string>().rfind("bytes:", 0) != 0) spelled = piece;
        echo += piece;
      }
      out += echo + d.flush();
    } else {
      out += req.echo_texts[prompt_idx];
    }
    decoded_bytes = out.size();
  }
  if (ev.kind == StreamEvent::Kind::kToken) {
    const auto now = Clock::now();
    if (!has_first) first_token = now;
    has_first = true;
    last_token = now;
    ++completion_tokens;
    const bool eos = !req.ignore_eos && is_eos(ev.token.token, eos_ids);
    std::string piece = eos ? "" : detok->push(ev.token.token);
    // A tool-call marker that is a special token decodes to nothing; the parser needs its text.
    if (!eos && std::find(req.marker_ids.begin(), req.marker_ids.end(), ev.token.token) !=
                    req.marker_ids.end()) {
      piece += tokenizer.piece(ev.token.token);
    }
    if (req.logprobs >= 0 && !eos) {
      logprobs.add(tokenizer, ev.token, decoded_bytes, /*has_top=*/true);
    }
    decoded_bytes += piece.size();
    out += stop->push(piece);
    if (stop->matched()) {
      stream->cancel();  // the engine frees its blocks at the next step
      finish("stop");
    }
  } else if (ev.kind == StreamEvent::Kind::kFinished) {
    cached_tokens = ev.num_cached_tokens;
    std::string tail = detok->flush();
    decoded_bytes += tail.size();
    out += stop->push(tail);
    if (stop->matched()) {
      finish("stop");
    } else {
      out += stop->flush();
      switch (ev.finish) {
        case FinishReason::kStop: finish("stop"); break;
        case FinishReason::kLength: finish("length"); break;
        case FinishReason::kAbort: aborted = true; finish(""); break;
        default:
          error = ev.error.empty() ? "engine error" : ev.error;
          finish("");
      }
    }
  }
  text += out;
  if (ev.kind == StreamEvent::Kind::kFinished && finish_reason == "stop") {
    const size_t echo = req.echo ? std::min(req.echo_texts[prompt_idx].size(), text.size()) : 0;
    if (auto v = request::schema_mismatch(req, std::string_view(text).substr(echo))) {
      schema_violation = std::move(*v);
      finish_reason = "schema_mismatch";
    }
  }
  return out;
}

void CompletionChoice::finish(const std::string& reason) {
  done = true;
  finish_reason = reason;
  end = Clock::now();
}

}  // namespace flashserve
