#!/bin/sh
# Init container of the warmpool DaemonSet: installs the CNI plugin and its
# .conflist on the node. Safe to repeat: every file is written to a temporary
# name and renamed into place, so the container runtime never sees half a file.
set -eu

: "${HOST_CNI_BIN_DIR:=/host/opt/cni/bin}"
: "${HOST_CNI_NET_DIR:=/host/etc/cni/net.d}"
: "${HOST_WARMPOOL_DIR:=/host/opt/warmpool}"
: "${CNI_CONFIG_DIR:=/etc/warmpool-cni}"
: "${IMAGE_WARMPOOL_DIR:=/opt/warmpool}"

# 1. The Python runtime and packages, under the same path as in the image.
for part in python venv; do
  rm -rf "${HOST_WARMPOOL_DIR}/.${part}.new"
  cp -a "${IMAGE_WARMPOOL_DIR}/${part}" "${HOST_WARMPOOL_DIR}/.${part}.new"
  rm -rf "${HOST_WARMPOOL_DIR}/.${part}.old"
  if [ -e "${HOST_WARMPOOL_DIR}/${part}" ]; then
    mv "${HOST_WARMPOOL_DIR}/${part}" "${HOST_WARMPOOL_DIR}/.${part}.old"
  fi
  mv "${HOST_WARMPOOL_DIR}/.${part}.new" "${HOST_WARMPOOL_DIR}/${part}"
  rm -rf "${HOST_WARMPOOL_DIR}/.${part}.old"
done

# 2. The plugin the runtime execs: a shim into the copied runtime.
shim="${HOST_CNI_BIN_DIR}/.warmpool-cni.tmp"
cat > "${shim}" <<'SHIM'
#!/bin/sh
exec /opt/warmpool/venv/bin/warmpool-cni "$@"
SHIM
chmod 0755 "${shim}"
mv -f "${shim}" "${HOST_CNI_BIN_DIR}/warmpool-cni"

# 3. The network configuration.
for conf in "${CNI_CONFIG_DIR}"/*.conflist; do
  name=$(basename "${conf}")
  cp "${conf}" "${HOST_CNI_NET_DIR}/.${name}.tmp"
  mv -f "${HOST_CNI_NET_DIR}/.${name}.tmp" "${HOST_CNI_NET_DIR}/${name}"
done
echo "warmpool CNI installed: ${HOST_CNI_BIN_DIR}/warmpool-cni, $(ls "${CNI_CONFIG_DIR}")"

# 4. Kernel settings the node needs (docs/agent.md, "Host networking"): forwarding,
#    and loose reverse-path filtering on the primary interface for the NodePort
#    return path. Written here, by the privileged init container, because the
#    agent's /proc/sys is read-only (it is not privileged); the agent checks them
#    and reports any difference on /readyz. Skipped with
#    AWS_VPC_K8S_CNI_CONFIGURE_RPFILTER=false or AWS_VPC_CNI_NODE_PORT_SUPPORT=false.
echo 1 > /proc/sys/net/ipv4/ip_forward
primary=$(awk '$2 == "00000000" { print $1; exit }' /proc/net/route)
if [ -n "${primary}" ] && [ "${AWS_VPC_K8S_CNI_CONFIGURE_RPFILTER:-true}" != "false" ] \
   && [ "${AWS_VPC_CNI_NODE_PORT_SUPPORT:-true}" != "false" ]; then
  echo 2 > "/proc/sys/net/ipv4/conf/${primary}/rp_filter"
fi
echo "warmpool node settings: ip_forward=1${primary:+, ${primary} rp_filter loose}"
