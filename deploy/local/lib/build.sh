# shellcheck shell=bash
# Builds of the local stack (sourced by stack.sh): Go binaries from the wrapper modules in deploy/local/{etcd,
# kube,kwok,helm} and the Kafka jars from deploy/local/kafka/pom.xml. helm is no component of the stack: the
# chart tests (tests/integration/test_helm_chart.py) render deploy/helm/gpuplace with it.
#
# Each result lands in $CACHE_DIR/<name>-<version>-<hash>/, the hash covering the pinning files (go.mod, go.sum,
# pom.xml), the Go version and the build flags, so a bump rebuilds and nothing else does. A build is written to a
# temporary folder and renamed when complete: an interrupted build leaves no half-cached result.

GO_BUILD_FLAGS=(-trimpath -pgo=off)

# module_version GOMOD MODULE: the version GOMOD requires of MODULE.
module_version() {
  awk -v m="$2" '($1 == m || $1 == "require" && $2 == m) && $NF != "=>" {
    for (i = 1; i <= NF; i++) if ($i ~ /^v[0-9]/) {print $i; exit}
  }' "$1"
}

# cache_key FILE... -- EXTRA...: short hash of the files' contents and extra strings.
cache_key() {
  local files=() extra=()
  while (($#)) && [[ $1 != -- ]]; do files+=("$1"); shift; done
  shift || true
  extra=("$@")
  { cat "${files[@]}"; printf '%s\n' "${extra[@]}"; } | sha256sum | cut -c1-12
}

# go_build NAME MODULE_DIR VERSION LDFLAGS BIN=PACKAGE...: build (or reuse) the binaries; prints the bin folder.
go_build() {
  local name=$1 dir=$2 version=$3 ldflags=$4
  shift 4
  local key out tmp spec bin pkg log=$CACHE_DIR/build-$name.log
  key=$(cache_key "$dir/go.mod" "$dir/go.sum" -- "$(go version)" "${GO_BUILD_FLAGS[*]}" "$ldflags" "$*")
  out=$CACHE_DIR/$name-$version-$key
  if [[ -f $out/.complete ]]; then
    echo "$out"
    return
  fi
  mkdir -p "$CACHE_DIR"
  say "$name $version: building into ${out#"$REPO_DIR"/} (a cold build takes minutes; log: $log)" >&2
  if ! (cd "$dir" && go mod download) >"$log" 2>&1; then
    cat "$log" >&2
    die "$name: a module pinned in ${dir#"$REPO_DIR"/}/go.mod is not available from the module proxy" \
      "($(go env GOPROXY)); for kube, pick a release whose staging modules are all published (kube/bump.sh)"
  fi
  tmp=$out.tmp.$$
  rm -rf "$tmp"
  mkdir -p "$tmp"
  for spec in "$@"; do
    bin=${spec%%=*}
    pkg=${spec#*=}
    if ! (cd "$dir" && CGO_ENABLED=0 go build "${GO_BUILD_FLAGS[@]}" -ldflags "$ldflags" -o "$tmp/$bin" "$pkg") \
      >>"$log" 2>&1; then
      tail -n 40 "$log" >&2
      rm -rf "$tmp"
      die "$name: go build $pkg failed (log: $log)"
    fi
  done
  touch "$tmp/.complete"
  rm -rf "$out"
  mv "$tmp" "$out"
  say "$name $version: built" >&2
  echo "$out"
}

build_etcd() {
  local dir=$LOCAL_DIR/etcd version
  version=$(module_version "$dir/go.mod" go.etcd.io/etcd/server/v3)
  ETCD_VERSION=$version
  ETCD_BIN=$(go_build etcd "$dir" "$version" "-s -w" etcd=go.etcd.io/etcd/server/v3)/etcd || exit 1
}

build_kube() {
  local dir=$LOCAL_DIR/kube version minor ldflags
  version=$(module_version "$dir/go.mod" k8s.io/kubernetes)
  [[ $version =~ ^v1\.([0-9]+)\. ]] || die "kube: cannot read the k8s.io/kubernetes version from $dir/go.mod"
  minor=${BASH_REMATCH[1]}
  ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1"
  ldflags+=" -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
  KUBE_VERSION=$version
  KUBE_BIN=$(go_build kube "$dir" "$version" "$ldflags" \
    kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver \
    kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager \
    kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler) || exit 1
}

build_kwok() {
  local dir=$LOCAL_DIR/kwok version
  version=$(module_version "$dir/go.mod" sigs.k8s.io/kwok)
  KWOK_VERSION=$version
  KWOK_BIN=$(go_build kwok "$dir" "$version" "-s -w" kwok=sigs.k8s.io/kwok/cmd/kwok)/kwok || exit 1
}

# helm's own Makefile stamps its version and the Kubernetes version `helm template` and `helm lint` assume (the
# client-go minor it was built with; unstamped, v1.20, which fails charts asking for a newer kubeVersion).
build_helm() {
  local dir=$LOCAL_DIR/helm version client_go ldflags
  version=$(module_version "$dir/go.mod" helm.sh/helm/v3)
  client_go=$(module_version "$dir/go.mod" k8s.io/client-go)
  [[ $client_go =~ ^v0\.([0-9]+)\. ]] || die "helm: cannot read the k8s.io/client-go version from $dir/go.mod"
  ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$version"
  for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=${BASH_REMATCH[1]}"
  done
  HELM_VERSION=$version
  HELM_BIN=$(go_build helm "$dir" "$version" "$ldflags" helm=helm.sh/helm/v3/cmd/helm)/helm || exit 1
}

# fetch_kafka: the broker's jars (with their log4j2 backend), copied from Maven Central by the pom.
fetch_kafka() {
  local pom=$LOCAL_DIR/kafka/pom.xml version key out tmp log=$CACHE_DIR/build-kafka.log
  version=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$pom")
  [[ -n $version ]] || die "kafka: no <kafka.version> in $pom"
  key=$(cache_key "$pom" --)
  out=$CACHE_DIR/kafka-$version-$key
  KAFKA_VERSION=$version
  KAFKA_LIB=$out/lib
  [[ -f $out/.complete ]] && return
  mkdir -p "$CACHE_DIR"
  say "kafka $version: resolving jars from Maven Central into ${out#"$REPO_DIR"/}"
  tmp=$out.tmp.$$
  rm -rf "$tmp"
  if ! mvn -q -B -f "$pom" dependency:copy-dependencies -DoutputDirectory="$tmp/lib" >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    rm -rf "$tmp"
    die "kafka: mvn could not resolve org.apache.kafka:kafka_2.13:$version (log: $log)"
  fi
  touch "$tmp/.complete"
  rm -rf "$out"
  mv "$tmp" "$out"
}

build_all() {
  fetch_kafka
  build_etcd
  build_kwok
  build_kube
  build_helm
}
