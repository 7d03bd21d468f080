#!/usr/bin/env bash
# deploy/compose/check-compose.sh — validate compose.yaml without pulling
# anything: `docker compose config` when the compose plugin is installed;
# otherwise parse the YAML with Python and check what compose would refuse
# (unknown services in depends_on, undeclared volumes and networks,
# required variables that env.example does not name) and the hardening this
# file promises. It does not start the stack.
set -euo pipefail
cd "$(dirname "$0")"
if docker compose version >/dev/null 2>&1; then
  env_file=$(mktemp); trap 'rm -f "$env_file"' EXIT
  sed 's/^DOCKER_GID=$/DOCKER_GID=999/' env.example > "$env_file"
  docker compose --env-file "$env_file" -f compose.yaml config -q
  echo "compose.yaml: docker compose config ok"
  exit 0
fi
python3 - <<'PY'
import re, sys, yaml
doc = yaml.safe_load(open("compose.yaml"))
env = dict(l.split("=", 1) for l in open("env.example").read().splitlines() if l and not l.startswith("#"))
errs = []
allowed_top = {"name", "services", "networks", "volumes", "secrets", "configs"}
errs += [f"unknown top-level key {k}" for k in doc if k not in allowed_top and not k.startswith("x-")]
services, volumes, networks = doc["services"], doc.get("volumes", {}), doc.get("networks", {})
for name, s in services.items():
    if "image" not in s and "build" not in s:
        errs.append(f"{name}: no image")
    deps = s.get("depends_on", {})
    for d, cond in (deps.items() if isinstance(deps, dict) else ((d, {}) for d in deps)):
        if d not in services:
            errs.append(f"{name}: depends_on unknown service {d}")
        if cond.get("condition") not in (None, "service_started", "service_healthy", "service_completed_successfully"):
            errs.append(f"{name}: bad condition {cond}")
        if cond.get("condition") == "service_healthy" and "healthcheck" not in services.get(d, {}):
            errs.append(f"{name}: waits for {d} healthy, which has no healthcheck")
    for v in s.get("volumes", []):
        src = v.split(":")[0]
        if not src.startswith((".", "/")) and src not in volumes:
            errs.append(f"{name}: volume {src} not declared")
    for n in s.get("networks", []):
        if n not in networks:
            errs.append(f"{name}: network {n} not declared")
    if s.get("pull_policy") != "never":
        errs.append(f"{name}: pull_policy is not never (air-gapped)")
    if name != "postgres":
        for key, want in (("read_only", True), ("cap_drop", ["ALL"]), ("security_opt", ["no-new-privileges:true"])):
            if s.get(key) != want:
                errs.append(f"{name}: {key} is {s.get(key)!r}, want {want!r}")
gw = services["gateway"]
if "/var/run/docker.sock:/var/run/docker.sock" not in gw["volumes"]:
    errs.append("gateway: the Docker socket is not mounted")
if any(not p.startswith("127.0.0.1:") for p in gw.get("ports", [])):
    errs.append("gateway: a port is published beyond loopback")
if gw["environment"].get("SANDGATE_MIGRATE") != "false":
    errs.append("gateway: migrates itself; it should run as sandgate_gw with SANDGATE_MIGRATE=false")
text = open("compose.yaml").read()
for var in sorted(set(re.findall(r"\$\{([A-Z_]+)(?::?[-?])", text))):
    if var not in env:
        errs.append(f"variable {var} is not in env.example")
if errs:
    print("compose.yaml:", *errs, sep="\n  ")
    sys.exit(1)
print(f"compose.yaml: YAML parses; {len(services)} services, depends_on, volumes, networks, variables and hardening checked "
      "(no compose plugin here: not checked against the Compose schema)")
PY
