"""`lakectl`: the operator's one command for a deployed pipeline stack, on AWS or the local AWS (README,
"Operating the pipeline"; docs/DEPLOY.md, "Operate")."""
