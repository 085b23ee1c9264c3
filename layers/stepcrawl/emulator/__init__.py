"""The emulator: an AWS of our own for local mode, built on moto and made as strict as AWS.

moto serves the services (on 127.0.0.1, or in-process for the emulator's own calls); this
package holds what moto lacks or gets wrong, each in one place: its patches (Step Functions'
interpreter, DynamoDB's speed, SQS's atomicity), the Lambda service that runs the functions
for their event-source mappings, EventBridge Scheduler, DynamoDB TTL, CloudWatch's metric
extraction and alarms, and the secrets a local stack reads. It knows AWS, not stepcrawl: it
never imports the crawl engine, and what it plays is the synthesized template's resources.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stepcrawl.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from stepcrawl.emulator.lambda_runtime import FunctionSpec, LambdaRuntime, MappingSpec
    from stepcrawl.emulator.moto_patches import apply_moto_patches

__all__ = ["FunctionSpec", "LambdaRuntime", "MappingSpec", "apply_moto_patches"]

#: Where each public name lives. Imported on first use: a container process imports
#: ``stepcrawl.emulator.lambda_runtime.sandbox``, and must not pay for moto on its way.
__getattr__ = lazy_exports(
    __name__,
    {
        "FunctionSpec": "lambda_runtime",
        "LambdaRuntime": "lambda_runtime",
        "MappingSpec": "lambda_runtime",
        "apply_moto_patches": "moto_patches",
    },
)
