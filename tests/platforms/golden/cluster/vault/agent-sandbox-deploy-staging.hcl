# agent-sandbox: mint a Kubernetes credential for the 'deploy-staging' action only
# (namespaces: staging). Rendered; do not edit.
path "kubernetes/creds/deploy-staging" {
  capabilities = ["update"]
}
