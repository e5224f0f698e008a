#!/usr/bin/env python3
"""Checks deploy/'s manifests: `make deploy-check` runs it after the NATS configuration test.

Every YAML file must parse (PyYAML: Debian's python3-yaml), and the files must agree with
the repository and with each other: every service under services/ has a compose service
and a Kubernetes Deployment that runs its binary, connects as its own NATS user with its own
password, and (on Kubernetes) has a readiness probe; the busy steps run two instances; every
user of nats/accounts.conf has a password in .env and every password variable the files use
is there; the files kustomization.yaml names exist. PostgreSQL as NATS: no service but the
init steps connects as the owner of the tables; every other DSN names a role of
postgres/roles/roles.sql, with its own password variable, on a database that role may
connect to; a service whose role may connect to a database has that database's DSN and no
other; the init's role step sets every role's password. A service that opens no NATS
connection (NO_NATS) has no NATS user, URL or password. The ledger over HTTP (ledger-api)
is reachable only by its callers (LEDGER_CALLERS): on compose, its one network is shared
by them, NATS and PostgreSQL alone; on Kubernetes, a NetworkPolicy lets only them reach
its API port. On compose each service mounts its own signing seed and no other (ledger-api
none); only the init mounts the volume of seeds whole.
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
NO_NATS = set()
LEDGER_CALLERS = {"post-ledger", "compensator"}
SEED_TARGET = "/var/lib/cairn/keys"

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


def pg_password_var(role):
    return "POSTGRES_PASSWORD_" + role.upper()


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
    if s in NO_NATS:
        if s in users:
            fail(f"nats/accounts.conf: a user for {s}, which opens no NATS connection")
    elif s not in users:
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
        if s in NO_NATS:
            if url:
                fail(f"docker-compose.yml: {s} has a CAIRN_NATS_URL, but it opens no NATS connection")
        elif url_users(url) != {s} or "${" + password_var(s) + "}" not in url:
            fail(f"docker-compose.yml: {s} connects as {sorted(url_users(url))}, not as {s} with ${{{password_var(s)}}}")
        want = 2 if s in BUSY else 1
        got = c.get("deploy", {}).get("replicas", 1)
        if got != want:
            fail(f"docker-compose.yml: {s} runs {got} instances, want {want}")
    def networks(c):
        n = c.get("networks", ["default"])
        return set(n if isinstance(n, list) else n.keys())

    def seeds(c):
        out = []
        for v in c.get("volumes", []):
            if isinstance(v, dict) and v.get("source") == "keys":
                out.append((v.get("volume", {}) or {}).get("subpath") or "the whole volume")
            elif isinstance(v, str) and v.split(":")[0] == "keys":
                out.append("the whole volume")
        return out

    api = svcs.get("ledger-api", {})
    if networks(api) != {"ledger"}:
        fail(f"docker-compose.yml: ledger-api is on networks {sorted(networks(api))}, want only ledger")
    on_ledger = {n for n, c in svcs.items() if "ledger" in networks(c)}
    want_on = LEDGER_CALLERS | {"ledger-api", "postgres", "nats-1", "nats-2", "nats-3"}
    if on_ledger != want_on:
        fail(f"docker-compose.yml: network ledger holds {sorted(on_ledger)}, want {sorted(want_on)}")
    for name, c in svcs.items():
        got = seeds(c)
        if name == "init":
            if got != ["the whole volume"]:
                fail(f"docker-compose.yml: init mounts {got} of keys, want the whole volume (it makes the seeds)")
        elif name in services and name not in {"ledger-api"}:
            if got != [f"{name}.seed"]:
                fail(f"docker-compose.yml: {name} mounts {got} of keys, want its own seed {name}.seed alone")
        elif got:
            fail(f"docker-compose.yml: {name} mounts {got} of keys, want no seed")
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
    if s in NO_NATS:
        if "CAIRN_NATS_URL" in e or "NATS_PASSWORD" in e:
            fail(f"k8s: Deployment {s} has a NATS URL or password, but it opens no NATS connection")
        continue
    if url_users(e.get("CAIRN_NATS_URL", {}).get("value", "")) != {s}:
        fail(f"k8s: Deployment {s} does not connect to NATS as {s}")
    key = e.get("NATS_PASSWORD", {}).get("valueFrom", {}).get("secretKeyRef", {}).get("key")
    if key != password_var(s):
        fail(f"k8s: Deployment {s} takes its password from {key}, not {password_var(s)}")

pol = by_kind.get("NetworkPolicy", {}).get("ledger-api")
if not pol:
    fail("k8s: no NetworkPolicy ledger-api")
else:
    spec = pol["spec"]
    if spec.get("podSelector", {}).get("matchLabels", {}).get("app.kubernetes.io/name") != "ledger-api" or "Ingress" not in spec.get("policyTypes", []):
        fail("k8s: NetworkPolicy ledger-api does not select ledger-api's pods for ingress")
    for rule in spec.get("ingress", []):
        ports = {p.get("port") for p in rule.get("ports", [])}
        if 8080 in ports or not ports:
            callers = {f.get("podSelector", {}).get("matchLabels", {}).get("app.kubernetes.io/name") for f in rule.get("from", [])}
            if not rule.get("from") or callers != LEDGER_CALLERS:
                fail(f"k8s: NetworkPolicy ledger-api lets {sorted(c or 'anyone' for c in callers) or ['anyone']} reach its API port, want only {sorted(LEDGER_CALLERS)}")

# PostgreSQL: the roles, the databases each may connect to, and who uses the owner.
ROLES_DIR = os.path.join(HERE, "postgres", "roles")
DSN_DB = {"CAIRN_LEDGER_DSN": "ledger", "CAIRN_ERP_DSN": "erp"}
with open(os.path.join(ROLES_DIR, "roles.sql")) as f:
    m = re.search(r"FOREACH r IN ARRAY ARRAY\[([^\]]*)\]", f.read())
roles = re.findall(r"'([a-z_]+)'", m.group(1)) if m else []
if not roles:
    fail("postgres/roles/roles.sql: no list of roles (FOREACH r IN ARRAY ARRAY[...])")
connect = {}  # database -> the roles that may connect to it
for db in DSN_DB.values():
    with open(os.path.join(ROLES_DIR, db + ".sql")) as f:
        m = re.search(r"GRANT CONNECT ON DATABASE %I TO ([a-z_, ]+)'", f.read())
    connect[db] = {r.strip() for r in m.group(1).split(",")} if m else set()
    for r in sorted(connect[db] - set(roles)):
        fail(f"postgres/roles/{db}.sql: grants {r}, which roles.sql does not create")
with open(os.path.join(ROLES_DIR, "passwords.sql")) as f:
    pw_sql = f.read()
for r in roles:
    if f"\\getenv {r} {pg_password_var(r)}" not in pw_sql or f"ALTER ROLE {r} PASSWORD :'{r}';" not in pw_sql:
        fail(f"postgres/roles/passwords.sql: role {r} gets no password from {pg_password_var(r)}")
    if pg_password_var(r) not in env:
        fail(f".env: no {pg_password_var(r)} for the database role {r}")


def want_dbs(name):
    """The databases a service's role may connect to: the DSNs it must have, and no other."""
    role = name.replace("-", "_")
    return role, {db for db, rs in connect.items() if role in rs}


def check_dsns(where, name, dsns, owner, init_step, password_of):
    """dsns: variable -> value; password_of(value) is the password reference the DSN uses
    (a compose ${VAR} or a Kubernetes secret key), None when it has none."""
    for var, value in sorted(dsns.items()):
        m = re.match(r"postgres(?:ql)?://([^:@/]+)(?::[^@]*)?@[^/]+/([A-Za-z0-9_]+)", value or "")
        if not m:
            fail(f"{where}: {name} {var} is not a postgres:// DSN with a user and a database: {value!r}")
            continue
        user, db = m.group(1), m.group(2)
        if db != DSN_DB[var]:
            fail(f"{where}: {name} {var} names the database {db}, not {DSN_DB[var]}")
        if user == owner:
            if not init_step:
                fail(f"{where}: {name} connects to {db} as the owner {owner}: only the init steps may")
            continue
        if user not in roles:
            fail(f"{where}: {name} connects to {db} as {user}, not a role of postgres/roles/roles.sql")
            continue
        if user not in connect.get(db, set()):
            fail(f"{where}: {name} connects to {db} as {user}, which postgres/roles/{db}.sql does not let connect")
        if password_of(value) != pg_password_var(user):
            fail(f"{where}: {name} connects as {user} with the password {password_of(value)}, not {pg_password_var(user)}")
    if name in services:
        role, dbs = want_dbs(name)
        got = {DSN_DB[v] for v in dsns}
        if got != dbs:
            fail(f"{where}: {name} has DSNs for {sorted(got)}, want {sorted(dbs)} (the databases role {role} may connect to)")


if compose:
    svcs = compose[0].get("services", {})
    owner = svcs.get("postgres", {}).get("environment", {}).get("POSTGRES_USER", "")
    if not owner:
        fail("docker-compose.yml: the postgres service sets no POSTGRES_USER (the owner)")
    # The init steps: cairn init --tables and the role step; gen plays the ERP in a trial.
    init_steps = {"init", "db-roles"}
    if "trial" in svcs.get("gen", {}).get("profiles", []):
        init_steps.add("gen")
    for name, c in sorted(svcs.items()):
        envs = c.get("environment", {}) or {}
        if name != "postgres" and name not in init_steps:
            for k, v in envs.items():
                if "${POSTGRES_PASSWORD}" in str(v):
                    fail(f"docker-compose.yml: {name} {k} carries the owner's password ${{POSTGRES_PASSWORD}}")
        dsns = {k: v for k, v in envs.items() if k in DSN_DB}

        def compose_password(value):
            m = re.search(r"\$\{(POSTGRES_PASSWORD[A-Z_]*)\}", value)
            return m.group(1) if m else None
        check_dsns("docker-compose.yml", name, dsns, owner, name in init_steps, compose_password)
    dbr = svcs.get("db-roles", {})
    if dbr.get("command") != ["sh", "/etc/cairn/roles/apply.sh"]:
        fail(f"docker-compose.yml: db-roles runs {dbr.get('command')}, not postgres/roles/apply.sh")
    for r in roles:
        if (dbr.get("environment") or {}).get(pg_password_var(r)) != "${" + pg_password_var(r) + "}":
            fail(f"docker-compose.yml: db-roles does not pass {pg_password_var(r)} for role {r}")
    for s in services:
        dep = (svcs.get(s) or {}).get("depends_on", {})
        if "db-roles" not in dep:
            fail(f"docker-compose.yml: {s} does not wait for db-roles")


def k8s_env(container):
    return {v["name"]: v for v in container.get("env", [])}


def secret_key(e, var):
    return e.get(var, {}).get("valueFrom", {}).get("secretKeyRef", {}).get("key")


def k8s_dsns(where, name, container, init_step):
    e = k8s_env(container)
    if not init_step:
        for k in e:
            if secret_key(e, k) == "POSTGRES_PASSWORD":
                fail(f"{where}: {name} {k} is the owner's password (POSTGRES_PASSWORD)")
    dsns = {k: v.get("value", "") for k, v in e.items() if k in DSN_DB}

    def password(value):
        m = re.search(r":\$\(([A-Z_]+)\)@", value)
        return secret_key(e, m.group(1)) if m else None
    check_dsns(where, name, dsns, "cairn", init_step, password)


for s in services:
    d = by_kind.get("Deployment", {}).get(s)
    if d:
        k8s_dsns("k8s", f"Deployment {s}", d["spec"]["template"]["spec"]["containers"][0], False)
job = by_kind.get("Job", {}).get("cairn-init")
if job:
    spec = job["spec"]["template"]["spec"]
    for c in spec.get("initContainers", []) + spec.get("containers", []):
        k8s_dsns("k8s", f"Job cairn-init container {c.get('name')}", c, True)
    roles_c = [c for c in spec.get("containers", []) if c.get("command") == ["sh", "/etc/cairn/roles/apply.sh"]]
    if not roles_c:
        fail("k8s: Job cairn-init has no container running postgres/roles/apply.sh")
    for c in roles_c:
        e = k8s_env(c)
        for r in roles:
            if secret_key(e, pg_password_var(r)) != pg_password_var(r):
                fail(f"k8s: Job cairn-init {c.get('name')} does not take {pg_password_var(r)} for role {r} from the Secret")
if kust:
    gen = [g for g in kust[0].get("configMapGenerator", []) if g.get("name") == "postgres-roles"]
    have = {os.path.basename(f) for g in gen for f in g.get("files", [])}
    for f in sorted(os.listdir(ROLES_DIR)):
        if f not in have:
            fail(f"kustomization.yaml: postgres/roles/{f} is not in the postgres-roles ConfigMap")

if errors:
    print("\n".join("deploy check: " + e for e in errors), file=sys.stderr)
    sys.exit(1)
print(f"deploy check: docker-compose.yml, kustomization.yaml and {len(objects)} Kubernetes objects agree with {len(services)} services, {len(users)} NATS users and {len(roles)} database roles")
