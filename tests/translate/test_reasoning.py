"""The gateway's reasoning blobs: what a chat upstream's reasoning and an Anthropic thinking
block become in `encrypted_content`, and back."""

from __future__ import annotations

from codexgate.translate.reasoning import decode_reasoning, decode_thinking, encode_reasoning, encode_thinking


def test_a_thinking_block_comes_back_whole_signature_included() -> None:
    block = {"type": "thinking", "thinking": 'Let me look: ä "quoted"\n', "signature": "EqQBCkYIBxgCKkA=="}
    blob = encode_thinking(block)
    assert decode_thinking(blob) == block
    assert decode_reasoning(blob) == block["thinking"]  # a chat upstream reads its text


def test_a_redacted_thinking_block_comes_back_with_its_data_and_no_text() -> None:
    block = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}
    blob = encode_thinking(block)
    assert decode_thinking(blob) == block
    assert decode_reasoning(blob) is None


def test_other_blobs_are_not_thinking_blocks() -> None:
    assert decode_thinking(encode_reasoning("text")) is None
    assert decode_thinking("gAAAAB-openai-blob") is None
    assert decode_thinking("cgt1:not json") is None
    assert decode_thinking('cgt1:["thinking", "only text"]') is None
    assert decode_thinking(None) is None
    assert decode_reasoning(encode_reasoning("plain")) == "plain"
