# shellcheck shell=bash
# Certificates and kubeconfigs of the local clusters (sourced by stack.sh).
#
# One CA signs the apiservers' serving certificate (127.0.0.1 / localhost) and one admin client certificate
# in group system:masters, which the tests, kube-controller-manager and KWOK present. A separate RSA key signs
# service-account tokens. All clusters share them; they differ by port and etcd prefix.

_openssl() { openssl "$@" >>"$LOGS_DIR/pki.log" 2>&1 || die "openssl $1 failed (log: $LOGS_DIR/pki.log)"; }

# _sign NAME SUBJECT EXTENSIONS: a 2048-bit key and a certificate signed by the CA, valid one year.
_sign() {
  local name=$1 subject=$2 extensions=$3
  _openssl req -new -newkey rsa:2048 -nodes -keyout "$PKI_DIR/$name.key" -out "$PKI_DIR/$name.csr" -subj "$subject"
  printf '%b' "$extensions" >"$PKI_DIR/$name.ext"
  _openssl x509 -req -in "$PKI_DIR/$name.csr" -CA "$PKI_DIR/ca.crt" -CAkey "$PKI_DIR/ca.key" -CAcreateserial \
    -days 365 -sha256 -extfile "$PKI_DIR/$name.ext" -out "$PKI_DIR/$name.crt"
  rm -f "$PKI_DIR/$name.csr" "$PKI_DIR/$name.ext"
}

ensure_pki() {
  [[ -f $PKI_DIR/.complete ]] && return
  command -v openssl >/dev/null || die "openssl not found (run deploy/local/install-deps.sh)"
  rm -rf "$PKI_DIR"
  mkdir -p "$PKI_DIR"
  chmod 700 "$PKI_DIR"
  _openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -sha256 -subj "/CN=gpuplace-local-ca" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -keyout "$PKI_DIR/ca.key" -out "$PKI_DIR/ca.crt"
  _sign apiserver "/CN=kube-apiserver" \
    "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature,keyEncipherment"
  _sign admin "/O=system:masters/CN=gpuplace-admin" \
    "extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature,keyEncipherment"
  _openssl genrsa -out "$PKI_DIR/sa.key" 2048
  _openssl rsa -in "$PKI_DIR/sa.key" -pubout -out "$PKI_DIR/sa.pub"
  touch "$PKI_DIR/.complete"
}

# write_kubeconfig CLUSTER [PORT]: a self-contained kubeconfig (certificates embedded) for the admin user; PORT
# defaults to the cluster's (an extra apiserver started by `stack.sh apiserver` names its own).
write_kubeconfig() {
  local cluster=$1 file port
  file=$(kubeconfig_of "$cluster")
  port=${2:-$(apiserver_port "$cluster")}
  mkdir -p "$(dirname "$file")"
  cat >"$file.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: $cluster
  cluster:
    server: https://127.0.0.1:$port
    certificate-authority-data: $(base64 -w0 "$PKI_DIR/ca.crt")
users:
- name: gpuplace-admin
  user:
    client-certificate-data: $(base64 -w0 "$PKI_DIR/admin.crt")
    client-key-data: $(base64 -w0 "$PKI_DIR/admin.key")
contexts:
- name: $cluster
  context:
    cluster: $cluster
    user: gpuplace-admin
current-context: $cluster
EOF
  chmod 600 "$file.tmp"
  mv "$file.tmp" "$file"
}

# kube_get CLUSTER PATH: GET an apiserver path as admin (used for health checks).
kube_get() {
  curl -fsS --max-time 5 --cacert "$PKI_DIR/ca.crt" --cert "$PKI_DIR/admin.crt" --key "$PKI_DIR/admin.key" \
    "https://127.0.0.1:$(apiserver_port "$1")$2"
}

# ensure_namespace CLUSTER NAME: create the namespace unless it exists.
ensure_namespace() {
  kube_get "$1" "/api/v1/namespaces/$2" >/dev/null 2>&1 && return
  curl -fsS --max-time 5 --cacert "$PKI_DIR/ca.crt" --cert "$PKI_DIR/admin.crt" --key "$PKI_DIR/admin.key" \
    -X POST -H 'Content-Type: application/json' \
    -d "{\"apiVersion\": \"v1\", \"kind\": \"Namespace\", \"metadata\": {\"name\": \"$2\"}}" \
    "https://127.0.0.1:$(apiserver_port "$1")/api/v1/namespaces" >/dev/null ||
    die "$1: cannot create namespace $2"
}
