#!/usr/bin/env bash
# Move one node between aws-node (the AWS VPC CNI) and warmpool, in the order
# docs/deploy.md section 4 gives: cordon, drain, switch the label (back to aws-node: after
# warmpool's last pass for the instance and the node's own uninstall pod), wait for the new
# CNI's pod on the node to be Ready, uncordon. Pods are evicted, never moved live:
# the drain is what keeps two CNIs from holding one pod's address.
#
# Usage: scripts/move-node.sh to-warmpool NODE
#        scripts/move-node.sh to-aws-node NODE
# Env:   CLUSTER (to-aws-node: the stack's Cluster output), UNINSTALL (default
#        .venv/bin/python -m infra.uninstall), KUBECTL (default kubectl), NAMESPACE (default kube-system), DRAIN_TIMEOUT (default 600s),
#        READY_TIMEOUT (default 300s).
set -euo pipefail

KUBECTL="${KUBECTL:-kubectl}"
NAMESPACE="${NAMESPACE:-kube-system}"
DRAIN_TIMEOUT="${DRAIN_TIMEOUT:-600s}"
READY_TIMEOUT="${READY_TIMEOUT:-300s}"
LABEL=warmpool.io/enabled

usage() { echo "usage: $0 to-warmpool|to-aws-node NODE" >&2; exit 2; }
[ $# -eq 2 ] || usage
direction=$1 node=$2
case "$direction" in
  to-warmpool) selector=app.kubernetes.io/name=warmpool-agent ;;
  to-aws-node) selector=k8s-app=aws-node ;;
  *) usage ;;
esac
"$KUBECTL" get node "$node" >/dev/null || { echo "move-node: no node $node" >&2; exit 2; }

# Once per cluster: aws-node keeps off every node labelled for warmpool (true or false).
if [ "$direction" = to-warmpool ] && "$KUBECTL" -n "$NAMESPACE" get daemonset aws-node >/dev/null 2>&1 \
    && ! "$KUBECTL" -n "$NAMESPACE" get daemonset aws-node -o jsonpath='{.spec.template.spec.affinity}' | grep -q "$LABEL"; then
  echo "move-node: keeping aws-node off nodes labelled $LABEL" >&2
  # Added to the existing term (EKS's aws-node has one: os, arch, not Fargate), so those stay;
  # a DaemonSet without node affinity gets a term of its own.
  terms=/spec/template/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms
  "$KUBECTL" -n "$NAMESPACE" patch daemonset aws-node --type json -p \
    '[{"op":"add","path":"'"$terms"'/0/matchExpressions/-","value":{"key":"'"$LABEL"'","operator":"DoesNotExist"}}]' \
  || "$KUBECTL" -n "$NAMESPACE" patch daemonset aws-node --type merge -p \
    '{"spec":{"template":{"spec":{"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"'"$LABEL"'","operator":"DoesNotExist"}]}]}}}}}}}'
fi

echo "move-node: cordon and drain $node" >&2
"$KUBECTL" cordon "$node"
"$KUBECTL" drain "$node" --ignore-daemonsets --delete-emptydir-data --timeout="$DRAIN_TIMEOUT"

if [ "$direction" = to-warmpool ]; then
  "$KUBECTL" label node "$node" "$LABEL=true" --overwrite
else
  # Step 1: label false: warmpool's agent leaves (its nodeSelector wants "true") and aws-node
  # still stays away (its affinity wants no label at all).
  "$KUBECTL" label node "$node" "$LABEL=false" --overwrite
  "$KUBECTL" -n "$NAMESPACE" wait --for=delete pod -l app.kubernetes.io/name=warmpool-agent \
    --field-selector "spec.nodeName=$node" --timeout="$READY_TIMEOUT"
  # Step 2: the node's own last pass: warmpool's ENIs detached and deleted, the primary ENI's
  # secondary addresses unassigned and its tag removed, the node's result queue deleted.
  # Nothing on the node holds them (drained, no CNI running), so aws-node starts clean.
  provider=$("$KUBECTL" get node "$node" -o jsonpath='{.spec.providerID}')
  instance_id=${provider##*/}
  [[ "$instance_id" == i-* ]] || { echo "move-node: no instance id in providerID $provider" >&2; exit 1; }
  for attempt in 1 2 3 4 5; do
    if ${UNINSTALL:-.venv/bin/python -m infra.uninstall} --cluster "${CLUSTER:?set CLUSTER to the Cluster output of the stack}" \
        --instance-id "$instance_id" --apply; then break; fi
    [ "$attempt" -lt 5 ] || { echo "move-node: the last pass for $instance_id did not finish; $node left cordoned" >&2; exit 1; }
    sleep 10   # reports still in flight: the allocator answers them within seconds
  done
  # Step 3: the node's own files and rules (docs/deploy.md section 7, step 4): a one-off pod of
  # the agent's image removes the nftables table, the fwmark rule, 05-warmpool.conflist and the
  # plugin. Left behind, the conflist would still sort before aws-node's 10-aws.conflist, and
  # every new pod's ADD would go to a plugin with no agent to answer it.
  image=$("$KUBECTL" -n "$NAMESPACE" get daemonset warmpool-agent -o jsonpath='{.spec.template.spec.containers[0].image}')
  [ -n "$image" ] || { echo "move-node: no warmpool-agent DaemonSet image in $NAMESPACE; $node left cordoned" >&2; exit 1; }
  "$KUBECTL" -n "$NAMESPACE" delete pod warmpool-uninstall --ignore-not-found --wait=true >/dev/null
  sed -e "s|\${NODE_NAME}|$node|g" -e "s|\${IMAGE}|$image|g" -e "s|\${NAMESPACE}|$NAMESPACE|g" \
    "$(dirname "$0")/../k8s/node-uninstall-pod.yaml" | "$KUBECTL" apply -f - >/dev/null
  phase=
  deadline=$(( $(date +%s) + ${READY_TIMEOUT%s} ))
  until phase=$("$KUBECTL" -n "$NAMESPACE" get pod warmpool-uninstall -o jsonpath='{.status.phase}') \
      && { [ "$phase" = Succeeded ] || [ "$phase" = Failed ]; }; do
    [ "$(date +%s)" -lt "$deadline" ] || break
    sleep 2
  done
  "$KUBECTL" -n "$NAMESPACE" logs warmpool-uninstall >&2 || true
  [ "$phase" = Succeeded ] || { echo "move-node: the node's uninstall pod ended ${phase:-unfinished}; $node left cordoned" >&2; exit 1; }
  "$KUBECTL" -n "$NAMESPACE" delete pod warmpool-uninstall --wait=true >/dev/null
  # Step 4: no label: aws-node starts on the node.
  "$KUBECTL" label node "$node" "$LABEL-"
fi

echo "move-node: waiting for the $selector pod on $node" >&2
deadline=$(( $(date +%s) + ${READY_TIMEOUT%s} ))
until pod=$("$KUBECTL" -n "$NAMESPACE" get pods -l "$selector" --field-selector "spec.nodeName=$node" \
    -o jsonpath='{.items[0].metadata.name}' 2>/dev/null) && [ -n "$pod" ]; do
  [ "$(date +%s)" -lt "$deadline" ] || { echo "move-node: no $selector pod on $node; left cordoned" >&2; exit 1; }
  sleep 2
done
"$KUBECTL" -n "$NAMESPACE" wait --for=condition=Ready "pod/$pod" --timeout="$READY_TIMEOUT" \
  || { echo "move-node: $pod not Ready; $node left cordoned" >&2; exit 1; }
"$KUBECTL" uncordon "$node"
echo "move-node: $node is on ${direction#to-}" >&2
