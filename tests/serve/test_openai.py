"""`pocket serve` through the official `openai` Python client (a real, independent client).

Usage: python tests/serve/test_openai.py BASE_URL   (e.g. http://127.0.0.1:8080)
Run by tests/serve_openai.rs, which starts the server. Exits non-zero on the first failure.
"""

import sys

import openai


def main(base: str) -> None:
    client = openai.OpenAI(base_url=base + "/v1", api_key="sekret")
    models = client.models.list()
    assert models.data[0].id == "smol", models

    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Name the capital of France."},  # (wide first-token margin)
    ]
    whole = client.chat.completions.create(model="smol", messages=messages, max_tokens=32, temperature=0)
    answer = whole.choices[0].message.content
    assert "Paris" in answer, answer
    assert whole.choices[0].finish_reason == "stop", whole
    assert whole.usage.completion_tokens > 0 and whole.usage.prompt_tokens > 10, whole.usage

    stream = client.chat.completions.create(
        model="smol", messages=messages, max_tokens=32, temperature=0, stream=True,
        stream_options={"include_usage": True},
    )
    pieces, usage, finish = [], None, None
    for chunk in stream:
        assert chunk.object == "chat.completion.chunk", chunk
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            if c.delta.content:
                pieces.append(c.delta.content)
            if c.finish_reason:
                finish = c.finish_reason
    assert "".join(pieces) == answer, (pieces, answer)
    assert finish == "stop", finish
    assert usage is not None and usage.completion_tokens == whole.usage.completion_tokens, usage
    assert usage.prompt_tokens_details.cached_tokens > 0, usage

    prompt = "The capital of France is"
    text = client.completions.create(model="smol", prompt=prompt, max_tokens=16, temperature=0)
    assert text.choices[0].finish_reason == "length", text
    streamed = "".join(
        c.choices[0].text
        for c in client.completions.create(model="smol", prompt=prompt, max_tokens=16, temperature=0, stream=True)
        if c.choices
    )
    assert streamed == text.choices[0].text, (streamed, text.choices[0].text)

    # Errors come back as the client's typed exceptions.
    try:
        client.completions.create(model="smol", prompt="word " * 5000, max_tokens=4)
        raise AssertionError("an over-long prompt was accepted")
    except openai.BadRequestError as e:
        assert "exceeds the available context size" in str(e), e
    try:
        openai.OpenAI(base_url=base + "/v1", api_key="wrong").models.list()
        raise AssertionError("a wrong API key was accepted")
    except openai.AuthenticationError:
        pass
    print("ok: openai", openai.__version__)


if __name__ == "__main__":
    main(sys.argv[1])
