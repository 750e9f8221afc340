"""The open-model fixes as stages on semantic parts, without any upstream dialect."""

from __future__ import annotations

from collections import Counter

from codexgate.errors import ModelOutputLoop
from codexgate.translate.catalogue import catalogue_of
from codexgate.translate.stages import (
    Failure,
    Finish,
    Reasoning,
    Text,
    TextCall,
    ToolCall,
    build_pipeline,
)

SHELL = {
    "type": "function",
    "name": "shell",
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
}


def test_think_text_becomes_reasoning_and_the_rest_stays_text() -> None:
    stages = build_pipeline(catalogue_of([]), think_tags="auto", text_tool_calls="auto")
    parts = stages.feed(Text("<think>hmm</think>answer")) + stages.flush()
    assert [type(p) for p in parts if not (isinstance(p, Text) and not p.text)][:1] == [Reasoning]
    assert "".join(p.text for p in parts if isinstance(p, Reasoning)) == "hmm"
    assert "".join(p.text for p in parts if isinstance(p, Text)) == "answer"


def test_a_tool_call_written_as_text_becomes_a_text_call() -> None:
    stages = build_pipeline(catalogue_of([SHELL]), think_tags="off", text_tool_calls="hermes")
    text = '<tool_call>{"name": "shell", "arguments": {"cmd": "ls"}}</tool_call>'
    parts = stages.feed(Text(text)) + stages.flush()
    calls = [p for p in parts if isinstance(p, TextCall)]
    assert [(c.name, c.arguments) for c in calls] == [("shell", '{"cmd":"ls"}')]


def test_verbatim_text_is_never_parsed() -> None:
    stages = build_pipeline(catalogue_of([]), think_tags="auto")
    assert stages.feed(Text("<think>x", verbatim=True)) == [Text("<think>x", verbatim=True)]


def test_the_loop_guard_turns_a_repeating_model_into_one_failure() -> None:
    counts: Counter[str] = Counter()
    stages = build_pipeline(catalogue_of([]), loop_guard=True, counts=counts)
    failures = []
    for _ in range(2000):
        failures += [p for p in stages.feed(Text("again and again. ")) if isinstance(p, Failure)]
    assert len(failures) == 1 and isinstance(failures[0].error, ModelOutputLoop)
    assert counts["loops.stopped"] == 1


def test_finished_function_arguments_are_repaired_and_text_calls_left_alone() -> None:
    counts: Counter[str] = Counter()
    catalogue = catalogue_of([SHELL])
    stages = build_pipeline(catalogue, counts=counts)
    broken = '{"cmd": "ls",}'
    (repaired,) = stages.feed(ToolCall(catalogue.resolve("shell"), broken))
    assert isinstance(repaired, ToolCall) and repaired.arguments == '{"cmd":"ls"}'
    (kept,) = stages.feed(ToolCall(catalogue.resolve("shell"), broken, checked=True))
    assert isinstance(kept, ToolCall) and kept.arguments == broken


def test_usage_is_estimated_only_when_the_upstream_sent_none() -> None:
    stages = build_pipeline(catalogue_of([]), input_token_estimate=100)
    (estimated,) = stages.feed(Finish(None, output_chars=300))
    assert isinstance(estimated, Finish) and estimated.usage is not None
    assert estimated.usage["input_tokens"] == 100 and estimated.usage["output_tokens"] > 0
    given = {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}
    (kept,) = stages.feed(Finish(given, output_chars=300))
    assert isinstance(kept, Finish) and kept.usage is given
