#!/usr/bin/env bash
# Validate every Kubernetes manifest under deploy/k8s/ offline: each resource against the
# schemas of the pinned Kubernetes versions (strict: unknown fields are errors), with
# kubernetes-validate 1.37.0, which carries the schemas. Installs it from PyPI into
# .tools/kubernetes-validate at the repository root unless that holds the pinned version
# already. Then checks what the schemas cannot: the server's TOML in the ConfigMap parses and
# the DaemonSet agrees with it (ports, the probes' port, the grace period covering the drain).
#
# Usage: scripts/check-manifests.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
want="1.37.0"
# 1.34: the oldest with DRA's resource.k8s.io/v1 (deploy/k8s/optional/); 1.37: the newest the
# pinned kubernetes-validate knows.
versions=(1.34.0 1.37.0)
tool="$root/.tools/kubernetes-validate"
kv() { PYTHONPATH="$tool" python3 -m kubernetes_validate "$@"; }

if [[ "$(kv --version 2>/dev/null || true)" != "$want" ]]; then
  rm -rf "$tool"
  if ! python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --target "$tool" \
    "kubernetes-validate==$want" >&2; then
    echo "check-manifests: could not install kubernetes-validate $want from PyPI into $tool;" \
      "the manifests were NOT validated" >&2
    exit 1
  fi
fi
got="$(kv --version)"
if [[ "$got" != "$want" ]]; then
  echo "check-manifests: $tool holds kubernetes-validate $got, need $want" >&2
  exit 1
fi

mapfile -t files < <(cd "$root" && find deploy/k8s -type f \( -name '*.yaml' -o -name '*.yml' \) | sort)
if [[ ${#files[@]} -eq 0 ]]; then
  echo "check-manifests: no manifests under deploy/k8s" >&2
  exit 1
fi
status=0
for f in "${files[@]}"; do
  args=()
  for v in "${versions[@]}"; do args+=(-k "$v"); done
  # kubernetes-validate exits 0 on a kind or apiVersion it has no schema for (a WARN line) and
  # on a file with no resource: both are failures here.
  if ! out="$(cd "$root" && kv --strict "${args[@]}" "$f" 2>&1)"; then
    status=1
  fi
  printf '%s\n' "$out"
  if grep -qvE '^INFO .* passed for resource ' <<<"$out" || ! grep -q '^INFO' <<<"$out"; then
    echo "check-manifests: $f: not every resource validated" >&2
    status=1
  fi
done

# What the schemas do not see. PyYAML came with kubernetes-validate; tomllib is Python 3.11's.
if ! (cd "$root" && PYTHONPATH="$tool" python3 - <<'PY'); then
import sys, tomllib, yaml

def load(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]

cm = load("deploy/k8s/10-configmap.yaml")[0]
cfg = tomllib.loads(cm["data"]["gpuless.toml"])
ds = load("deploy/k8s/30-daemonset.yaml")[0]
pod = ds["spec"]["template"]
spec = pod["spec"]
c = spec["containers"][0]
ports = {p["name"]: p["containerPort"] for p in c["ports"]}
errors = []

def port_of(addr):
    return int(addr.rsplit(":", 1)[1])

if port_of(cfg["listen"]) != ports["gpuless"]:
    errors.append(f"listen {cfg['listen']} is not containerPort gpuless {ports['gpuless']}")
if port_of(cfg["metrics"]) != ports["metrics"]:
    errors.append(f"metrics {cfg['metrics']} is not containerPort metrics {ports['metrics']}")
if pod["metadata"]["annotations"]["prometheus.io/port"] != str(ports["metrics"]):
    errors.append("the prometheus.io/port annotation is not the metrics port")
for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
    get = c[probe]["httpGet"]
    if get["path"] != path or get["port"] not in ("metrics", ports["metrics"]):
        errors.append(f"{probe} does not GET {path} on the metrics port")
# The server's SIGTERM path: drain_timeout_s, then at most 5 s for its executors to exit.
pre = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
pre_s = float(pre[-1]) if pre and pre[0].endswith("sleep") else 0.0
need = pre_s + float(cfg.get("drain_timeout_s", 30.0)) + 5
grace = spec.get("terminationGracePeriodSeconds", 30)  # Kubernetes' default
if grace < need:
    errors.append(f"terminationGracePeriodSeconds {grace} < preStop {pre_s} + drain_timeout_s + 5 = {need}")
svc = load("deploy/k8s/40-service.yaml")[0]
if svc["spec"]["ports"][0]["targetPort"] not in ("gpuless", ports["gpuless"]):
    errors.append("the Service does not target the gpuless port")
for e in errors:
    print(f"check-manifests: {e}", file=sys.stderr)
sys.exit(1 if errors else 0)
PY
  status=1
fi
if [[ $status -eq 0 ]]; then
  echo "check-manifests: ${#files[@]} files valid against Kubernetes ${versions[*]}"
fi
exit $status
