#!/usr/bin/env python3
"""Checks deploy/'s manifests: `make deploy-check` runs it after the NATS configuration test.

Every YAML file must parse (PyYAML: Debian's python3-yaml), and the files must agree with
the repository and with each other: every service under services/ has a compose service
and a Kubernetes Deployment that runs its binary, connects as its own NATS user with its own
password, and (on Kubernetes) has a readiness probe; the busy steps run two instances; every
user of nats/accounts.conf has a password in .env and every password variable the files use
is there; the files kustomization.yaml names exist.
"""
import glob
import os
import re
import sys

try:
    import yaml
except ImportError:
    sys.exit("deploy/check.py: no YAML parser for python3: install Debian's python3-yaml (apt-get install python3-yaml)")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUSY = {"extract", "post-ledger", "update-stock"}

errors = []


def fail(msg):
    errors.append(msg)


def load(path):
    try:
        with open(path) as f:
            return [d for d in yaml.safe_load_all(f) if d is not None]
    except yaml.YAMLError as e:
        fail(f"{os.path.relpath(path, ROOT)}: not valid YAML: {e}")
        return []


def password_var(user):
    return "NATS_PASSWORD_" + user.upper().replace("-", "_")


def url_users(url):
    return {m.group(1) for m in re.finditer(r"tls://([^:@/]+):", url)}


services = sorted(d for d in os.listdir(os.path.join(ROOT, "services")) if os.path.isdir(os.path.join(ROOT, "services", d)))

env = {}
with open(os.path.join(HERE, ".env")) as f:
    for line in f:
        line = line.strip()
        if line and not line.startswith("#"):
            k, _, v = line.partition("=")
            env[k] = v
with open(os.path.join(HERE, "nats", "accounts.conf")) as f:
    users = re.findall(r"\buser:\s*([A-Za-z0-9_-]+)", f.read())
for u in users:
    if password_var(u) not in env:
        fail(f".env: no {password_var(u)} for user {u} of nats/accounts.conf")
for s in services:
    if s not in users:
        fail(f"nats/accounts.conf: no user for service {s}")

# docker-compose.yml
compose = load(os.path.join(HERE, "docker-compose.yml"))
if compose:
    svcs = compose[0].get("services", {})
    for name in ["nats-1", "nats-2", "nats-3", "postgres", "mail", "init"] + services:
        if name not in svcs:
            fail(f"docker-compose.yml: no service {name}")
    for s in services:
        c = svcs.get(s)
        if not c:
            continue
        if c.get("command") != [f"/usr/local/bin/{s}"]:
            fail(f"docker-compose.yml: {s} runs {c.get('command')}, not /usr/local/bin/{s}")
        url = c.get("environment", {}).get("CAIRN_NATS_URL", "")
        if url_users(url) != {s} or "${" + password_var(s) + "}" not in url:
            fail(f"docker-compose.yml: {s} connects as {sorted(url_users(url))}, not as {s} with ${{{password_var(s)}}}")
        want = 2 if s in BUSY else 1
        got = c.get("deploy", {}).get("replicas", 1)
        if got != want:
            fail(f"docker-compose.yml: {s} runs {got} instances, want {want}")
    with open(os.path.join(HERE, "docker-compose.yml")) as f:
        for var in re.findall(r"\$\{([A-Z0-9_]+)\}", f.read()):
            if var not in env:
                fail(f"docker-compose.yml: ${{{var}}} is not set in .env")

# Kubernetes: kustomization.yaml and k8s/*.yaml
kust = load(os.path.join(HERE, "kustomization.yaml"))
if kust:
    k = kust[0]
    named = list(k.get("resources", []))
    for g in k.get("configMapGenerator", []) + k.get("secretGenerator", []):
        named += g.get("files", []) + g.get("envs", [])
    for path in named:
        if not os.path.exists(os.path.join(HERE, path)):
            fail(f"kustomization.yaml: {path} does not exist")
    for path in glob.glob(os.path.join(HERE, "k8s", "*.yaml")):
        rel = os.path.relpath(path, HERE)
        if rel not in k.get("resources", []):
            fail(f"kustomization.yaml: {rel} is not among the resources")

objects = []
for path in sorted(glob.glob(os.path.join(HERE, "k8s", "*.yaml"))):
    for d in load(path):
        if not isinstance(d, dict) or not d.get("apiVersion") or not d.get("kind") or not d.get("metadata", {}).get("name"):
            fail(f"{os.path.relpath(path, ROOT)}: a document without apiVersion, kind or metadata.name")
            continue
        objects.append(d)
by_kind = {}
for o in objects:
    by_kind.setdefault(o["kind"], {})[o["metadata"]["name"]] = o

nats = by_kind.get("StatefulSet", {}).get("nats")
if not nats or nats["spec"].get("replicas") != 3:
    fail("k8s: no StatefulSet nats with 3 replicas")
if "cairn-init" not in by_kind.get("Job", {}):
    fail("k8s: no Job cairn-init")
for s in services:
    d = by_kind.get("Deployment", {}).get(s)
    if not d:
        fail(f"k8s: no Deployment {s}")
        continue
    want = 2 if s in BUSY else 1
    if d["spec"].get("replicas") != want:
        fail(f"k8s: Deployment {s} has {d['spec'].get('replicas')} replicas, want {want}")
    c = d["spec"]["template"]["spec"]["containers"][0]
    if c.get("command") != [f"/usr/local/bin/{s}"]:
        fail(f"k8s: Deployment {s} runs {c.get('command')}, not /usr/local/bin/{s}")
    if not c.get("readinessProbe"):
        fail(f"k8s: Deployment {s} has no readiness probe")
    e = {v["name"]: v for v in c.get("env", [])}
    if url_users(e.get("CAIRN_NATS_URL", {}).get("value", "")) != {s}:
        fail(f"k8s: Deployment {s} does not connect to NATS as {s}")
    key = e.get("NATS_PASSWORD", {}).get("valueFrom", {}).get("secretKeyRef", {}).get("key")
    if key != password_var(s):
        fail(f"k8s: Deployment {s} takes its password from {key}, not {password_var(s)}")

if errors:
    print("\n".join("deploy check: " + e for e in errors), file=sys.stderr)
    sys.exit(1)
print(f"deploy check: docker-compose.yml, kustomization.yaml and {len(objects)} Kubernetes objects agree with {len(services)} services and {len(users)} NATS users")
