"""The ETL tasks that follow a crawl: transform (with how inputs merge), validate against a
JSON Schema, and load into S3 or DynamoDB."""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import ConfigDict, Field, JsonValue, field_validator, model_validator

from stepcrawl.pipeline.strict import Strict
from stepcrawl.pipeline.task_base import TaskBase
from stepcrawl.pipeline.transforms import TransformOp
from stepcrawl.pipeline.types import config_error

__all__ = [
    "DynamoDBTarget",
    "LoadTask",
    "MergeSpec",
    "S3Target",
    "TransformTask",
    "ValidateTask",
]


class MergeSpec(Strict):
    """How items of several inputs become one stream."""

    mode: Literal["union", "join"] = Field(
        "union", description="union: all items in turn; join: items sharing `key` merged."
    )
    key: list[str] = Field(default_factory=list, description="Join key fields (mode join).")

    @model_validator(mode="after")
    def _key_for_join(self) -> Self:
        if self.mode == "join" and not self.key:
            raise config_error(
                "key", "merge mode join needs the fields to join on", "add key: [FIELD, ...]"
            )
        return self


class TransformTask(TaskBase):
    """Rewrite items with a list of declared operations, applied in order."""

    type: Literal["transform"] = "transform"
    merge: MergeSpec = MergeSpec()
    operations: list[TransformOp] = Field(..., min_length=1)


class ValidateTask(TaskBase):
    """Check items against a JSON Schema; invalid items are quarantined with the reasons."""

    type: Literal["validate"] = "validate"
    json_schema: dict[str, JsonValue] = Field(..., alias="schema")
    max_invalid_ratio: float = Field(
        0.0, ge=0, le=1, description="The task fails if more than this share is invalid."
    )

    model_config = ConfigDict(populate_by_name=True)

    @field_validator("json_schema")
    @classmethod
    def _schema_valid(cls, value: dict[str, JsonValue]) -> dict[str, JsonValue]:
        # Lazy: jsonschema (via rfc3987_syntax) costs ~750 ms at import, which every Lambda
        # handler would pay at cold start; only a validate stage needs it.
        from jsonschema import Draft202012Validator, SchemaError  # noqa: PLC0415

        try:
            Draft202012Validator.check_schema(value)
        except SchemaError as exc:
            path = "/".join(str(p) for p in exc.absolute_path) or "(root)"
            raise config_error(
                "json_schema",
                f"not a valid JSON Schema (draft 2020-12) at {path}: {exc.message}",
                "see https://json-schema.org/understanding-json-schema/ for the keywords",
            ) from None
        return value


class S3Target(Strict):
    """Write items as objects under the stack's bucket (or another one)."""

    kind: Literal["s3"] = "s3"
    format: Literal["jsonl", "csv", "parquet"] = "jsonl"
    bucket: str | None = Field(None, description="Default: the stepcrawl bucket.")
    prefix: str = Field("exports/{pipeline}/{run}/{task}/", description="Object key prefix.")


class DynamoDBTarget(Strict):
    """Upsert items into a DynamoDB table; the key fields make re-runs idempotent."""

    kind: Literal["dynamodb"] = "dynamodb"
    table: str = Field(..., pattern=r"^[a-zA-Z0-9_.-]{3,255}$")
    key: list[str] = Field(..., min_length=1, max_length=2)


class LoadTask(TaskBase):
    """Deliver items to their destination."""

    type: Literal["load"] = "load"
    target: Annotated[S3Target | DynamoDBTarget, Field(discriminator="kind")]
