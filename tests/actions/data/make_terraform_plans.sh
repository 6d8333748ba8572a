#!/usr/bin/env bash
# Makes the Terraform plan documents the gate's tests read (tf-*.json), with the
# real terraform and only its built-in provider (terraform_data): no registry,
# no network (CHECKPOINT_DISABLE). Run it again to refresh them:
#   bash tests/actions/data/make_terraform_plans.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export CHECKPOINT_DISABLE=1 TF_IN_AUTOMATION=1 TF_CLI_CONFIG_FILE=/dev/null
cd "$work"
tf() { terraform "$@" -no-color >/dev/null; }
show() { terraform show -json plan.out | python3 -m json.tool --indent 1 > "$here/$1"; }

cat > main.tf <<'TF'
resource "terraform_data" "keep" { input = "same" }
resource "terraform_data" "update" { input = "before" }
resource "terraform_data" "gone" { input = "x" }
resource "terraform_data" "swap" { triggers_replace = ["1"] }
resource "terraform_data" "cbd" {
  triggers_replace = ["1"]
  lifecycle { create_before_destroy = true }
}
resource "terraform_data" "forget" { input = "kept outside" }
resource "terraform_data" "old_name" { input = "moves" }
output "greeting" { value = "hello" }
TF
tf init -input=false
tf apply -input=false -auto-approve

# an update in place, a create and an output change: nothing destructive
sed -i 's/"before"/"after"/' main.tf
echo 'resource "terraform_data" "fresh" { input = "new" }' >> main.tf
echo 'output "extra" { value = "more" }' >> main.tf
tf plan -input=false -out=plan.out
show tf-update.json

# nothing to do
sed -i 's/"after"/"before"/' main.tf
head -n -2 main.tf > main.tf.new && mv main.tf.new main.tf
tf plan -input=false -out=plan.out
show tf-noop.json

# every kind of change at once: delete, replace both ways, forget, move
sed -i '/terraform_data" "gone"/d' main.tf
sed -i 's/triggers_replace = \["1"\]/triggers_replace = ["2"]/' main.tf
sed -i '/terraform_data" "forget"/d' main.tf
sed -i 's/"old_name"/"new_name"/' main.tf
sed -i 's/value = "hello"/value = "goodbye"/' main.tf
cat >> main.tf <<'TF'
removed {
  from = terraform_data.forget
  lifecycle { destroy = false }
}
moved {
  from = terraform_data.old_name
  to   = terraform_data.new_name
}
TF
tf plan -input=false -out=plan.out
show tf-mixed.json

# the same, everything destroyed
tf plan -destroy -input=false -out=plan.out
show tf-destroy.json
