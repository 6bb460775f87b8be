"""Function calling in the model's format: tool schemas through the chat template when it renders them, tool
results as ``tool`` messages when it has that role, else the schemas in the system prompt and user turns."""

import copy

import pytest

from selfevolve.agent.prompt import PromptBuilder, template_has_tool_role, template_renders_tools
from selfevolve.envs.tools import ShopEnv
from selfevolve.models.loading import load_tokenizer

# A minimal ChatML template with Qwen/Hermes-style tool support (written for this test): the schemas go into
# the system turn, tool results into a user turn wrapped in <tool_response>.
TOOL_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}<|im_start|>system\n{{ message['content'] }}"
    "{% if tools %}\n<tools>\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}</tools>{% endif %}<|im_end|>\n"
    "{% elif message['role'] == 'tool' %}<|im_start|>user\n<tool_response>\n{{ message['content'] }}\n"
    "</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def smollm_tok():
    return load_tokenizer("tiny")  # the SmolLM2 tokenizer and chat template


@pytest.fixture(scope="module")
def tool_tok(smollm_tok):
    tok = copy.deepcopy(smollm_tok)
    tok.chat_template = TOOL_TEMPLATE
    return tok


def shop_builder(tok):
    return PromptBuilder(tok, ShopEnv.instructions, list(ShopEnv.examples), tools=ShopEnv.tools,
                         tool_instructions=ShopEnv.tool_instructions)


def test_smollm2_template_has_no_tool_support(smollm_tok):
    assert not template_renders_tools(smollm_tok) and not template_has_tool_role(smollm_tok)
    b = shop_builder(smollm_tok)
    text = smollm_tok.decode(b.prompt_ids(["Cancel my order W1", '{"status": "pending"}'], ["<tool_call>x</tool_call>"]))
    # the schemas stay in the system prompt as text; the tool result is a user turn
    assert text.count('"function": {"name": "get_order"') == 1 and "<tools>" in text
    assert text.endswith('<|im_start|>user\n{"status": "pending"}<|im_end|>\n<|im_start|>assistant\n')


def test_tool_template_renders_schemas_and_tool_messages(tool_tok):
    assert template_renders_tools(tool_tok) and template_has_tool_role(tool_tok)
    b = shop_builder(tool_tok)
    assert b.template_tools and b.observation_role == "tool"
    text = tool_tok.decode(b.prompt_ids(["Cancel my order W1", '{"status": "pending"}'], ["<tool_call>x</tool_call>"]))
    system = text.split("<|im_end|>")[0]
    assert ShopEnv.tool_instructions in system and ShopEnv.instructions not in system  # no listing twice
    assert system.count('"function": {"name": "get_order"') == 1  # the template's own listing
    assert '<|im_start|>user\nCancel my order W1<|im_end|>' in text  # the request stays a user turn
    assert text.endswith('<tool_response>\n{"status": "pending"}\n</tool_response><|im_end|>\n'
                         '<|im_start|>assistant\n')
    # the few-shot demonstration's tool results are tool messages too
    assert text.count("<tool_response>") == len(ShopEnv.examples) - 1 + 1


def test_incremental_prompt_is_exact_with_tool_messages(tool_tok):
    b = shop_builder(tool_tok)
    p0 = b.prompt_ids(["Cancel my order W1"], [])
    reply = "<tool_call>\n{\"name\": \"get_order\", \"arguments\": {\"order_id\": \"W1\"}}\n</tool_call>"
    ids = tool_tok.encode(reply, add_special_tokens=False) + [b.eot_id()]
    p1 = b.next_prompt_ids(p0, ids, ["Cancel my order W1", "Error: no order 'W1'"], [reply])
    assert p1 == b.prompt_ids(["Cancel my order W1", "Error: no order 'W1'"], [reply])


def test_games_are_unchanged_by_tool_support(tool_tok):
    b = PromptBuilder(tool_tok, "rules", [("board", "Left")])
    assert not b.template_tools and b.observation_role == "user"  # no tools: every observation a user turn
    text = tool_tok.decode(b.prompt_ids(["b0", "b1"], ["Up"]))
    assert "<tool_response>" not in text and text.endswith("<|im_start|>user\nb1<|im_end|>\n<|im_start|>assistant\n")
