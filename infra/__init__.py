"""stepcrawl's CDK app: ``python -m infra.app`` (see cdk.json and docs/deploy.md)."""
