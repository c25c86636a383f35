"""The shape of the ``agent`` workload's synthetic coding-agent sessions.

A session is what a coding agent sends a server: one shared system prompt with tool
definitions, the session's own repository context, then turns that each append the previous
answer and a tool result. Sizes are in tokens as a tokenizer would roughly count them (four
characters a token); the server's ``usage`` says what each turn really was, and that is what
the warehouse keeps.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

# A turn's prompt is the whole session so far: past this many tokens no model of this fleet
# holds it (and the sizes would not fit the int32 token columns anyway)
MAX_SESSION_TOKENS = 2_000_000


class SessionShape(BaseModel):
    """How every session of an ``agent`` level is built (deterministic from ``seed``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    turns: int = Field(4, ge=1, le=64, description="turns (requests) each session sends")
    system_tokens: int = Field(
        600, ge=1, le=100_000, description="shared system prompt and tool definitions"
    )
    repo_context_tokens: int = Field(
        1500, ge=0, le=1_000_000, description="the session's own repository files, in turn 1"
    )
    tool_result_tokens: int = Field(
        300, ge=0, le=1_000_000, description="tool output appended before every later turn"
    )
    answer_tokens: int = Field(200, ge=2, le=100_000, description="max_tokens of every turn")
    think_s: float = Field(
        1.0, ge=0, le=600, description="the agent's pause between an answer and its next turn"
    )
    seed: int = Field(0, ge=0, description="the same seed builds the same sessions")
    reset_cache: bool = Field(
        True,
        description="ask the server to drop its prefix cache before every wave, so each "
        "session starts cold (vLLM /reset_prefix_cache, SGLang /flush_cache)",
    )

    @model_validator(mode="after")
    def _fits(self) -> SessionShape:
        total = self.final_prompt_tokens + self.answer_tokens
        if total > MAX_SESSION_TOKENS:
            raise ValueError(
                f"a session would reach {total} tokens; at most {MAX_SESSION_TOKENS} are allowed"
            )
        return self

    @property
    def final_prompt_tokens(self) -> int:
        """The last turn's prompt: everything the session appended before it."""
        later = self.turns - 1
        return (
            self.system_tokens
            + self.repo_context_tokens
            + later * (self.answer_tokens + self.tool_result_tokens)
        )
