// Unit tests of ChatTemplate: loading (tokenizer_config.json forms, chat_template.jinja, built-in
// names, files), literal ranges, refusal of unsupported constructs at load time, runtime errors
// and the limits that bound hostile templates.
#include <gtest/gtest.h>

#include "chat/chat_template.h"

using namespace flashserve;

TEST(ChatTemplate, RendersChatml) {
  const ChatTemplate t = ChatTemplate::from_flag("chatml", "<s>", "</s>");
  const RenderedChat r = t.render({{"user", "hi", ""}}, true);
  EXPECT_EQ(r.text, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}
