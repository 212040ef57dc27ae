"""Translate a SAM template to plain CloudFormation JSON, offline.

cfn-lint (1.x) does not expand AWS::Serverless resources into what CloudFormation will
actually deploy, so references inside them (e.g. a dangling `!GetAtt Missing.Arn` in a
function policy) go unchecked. This runs aws-sam-translator locally, without AWS
credentials or network: the managed-policy map (normally fetched from IAM) is a fixed
stub, because the template uses inline policies only; a managed policy name would
fail translation here on purpose.

Usage: python sam_translate.py TEMPLATE.yaml OUTPUT.json
"""

import json
import os
import sys

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_REGION", "us-east-1")

from samtranslator.model.exceptions import InvalidDocumentException  # noqa: E402
from samtranslator.translator.transform import transform  # noqa: E402
from samtranslator.yaml_helper import yaml_parse  # noqa: E402


class OfflinePolicyLoader:
    """Stands in for ManagedPolicyLoader: the one managed policy SAM attaches itself."""

    def load(self):
        return {
            "AWSLambdaBasicExecutionRole": "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
        }


def _packaged(uri, name):
    """What `sam package` would put in place of a local CodeUri: an S3 location."""
    if isinstance(uri, str) and not uri.startswith("s3://"):
        return f"s3://flotilla-lint-placeholder/{name}.zip"
    return uri


def stand_in_for_package(template):
    """Replaces local code paths by S3 URIs, as `sam package` does before deployment: the
    translator only accepts the packaged form."""
    globals_fn = template.get("Globals", {}).get("Function", {})
    if "CodeUri" in globals_fn:
        globals_fn["CodeUri"] = _packaged(globals_fn["CodeUri"], "globals")
    for name, resource in template.get("Resources", {}).items():
        if resource.get("Type") == "AWS::Serverless::Function":
            props = resource.setdefault("Properties", {})
            if "CodeUri" in props:
                props["CodeUri"] = _packaged(props["CodeUri"], name)


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    source, target = argv[1], argv[2]
    with open(source, encoding="utf-8") as f:
        template = yaml_parse(f.read())
    stand_in_for_package(template)
    try:
        translated = transform(template, {}, OfflinePolicyLoader())
    except InvalidDocumentException as e:
        for cause in e.causes:
            print(f"{source}: SAM translation error: {cause.message}", file=sys.stderr)
        return 1
    with open(target, "w", encoding="utf-8") as f:
        json.dump(translated, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
