package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cairnhq/cairn/internal/books"
	"github.com/cairnhq/cairn/internal/pgtest"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// Item 6 and the databases' half of item 7 of issue 15: a service prints ready only once
// its databases are open, a wrong DSN stops it naming the variable and never its password,
// and each service connects to PostgreSQL as a role of its own with only its tables.

// A service whose DSN is wrong never says ready: a DSN that cannot be read, or one whose
// password PostgreSQL refuses, exits 2 (a wrong setting); one whose server cannot be
// reached exits 1; the variable is named, the password shown nowhere.
func TestServiceWithABadDSNIsNeverReady(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	const pw = "Tr0ub4dor-and-3"
	h := newProcsNight(t)
	refused, err := url.Parse(pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	refused.User = url.UserPassword(refused.User.Username(), pw)
	cases := map[string]struct {
		service, variable, dsn string
		exit                   int
	}{
		"unreadable DSN":   {"post-ledger", "CAIRN_LEDGER_DSN", "postgres://post_ledger:" + pw + "@127.0.0.1:port/ledger", 2},
		"refused password": {"update-stock", "CAIRN_ERP_DSN", refused.String(), 2},
		"no server":        {"post-ledger", "CAIRN_LEDGER_DSN", "postgres://post_ledger:" + pw + "@127.0.0.1:1/ledger?connect_timeout=5", 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			bin, args := serviceCmd(tc.service)
			cmd := exec.CommandContext(ctx, bin, args...)
			cmd.Env = h.env(tc.variable + "=" + tc.dsn)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != tc.exit {
				t.Fatalf("%s with %s: %v, want exit %d\nstderr: %s", tc.service, tc.variable, err, tc.exit, stderr.String())
			}
			if strings.Contains(stdout.String(), "ready") {
				t.Errorf("%s printed ready with %s unopened: %q", tc.service, tc.variable, stdout.String())
			}
			if !strings.Contains(stderr.String(), tc.variable) {
				t.Errorf("the error does not name %s: %s", tc.variable, stderr.String())
			}
			for _, shown := range []string{pw, url.QueryEscape(pw)} {
				if strings.Contains(stderr.String()+stdout.String(), shown) {
					t.Errorf("the password shows: %s", stderr.String())
				}
			}
		})
	}
}

// The roles of deploy/postgres/roles, each service with a DSN of its own role.
var serviceRoles = map[string][]string{
	"post-ledger":  {"ledger:post_ledger"},
	"update-stock": {"erp:update_stock"},
	"match":        {"erp:match"},
	"compare":      {"erp:compare"},
	"compensator":  {"ledger:compensator", "erp:compensator"},
}

// The reference night with every service as its own process and, on PostgreSQL, as its
// own database role (deploy/postgres/roles, as a deployment runs them): the night equals
// the truth, and PostgreSQL itself refuses a role what it was not granted.
func TestPostgresRolesNight(t *testing.T) {
	t.Parallel()
	takeNightSlot(t)
	ledgerDSN, ledger := pgDatabase(t)
	erpDSN, erp := pgDatabase(t)
	h := newProcsNight(t)
	sqliteERP, _ := filepath.Glob(filepath.Join(h.dir, "erp.db*"))
	for _, f := range sqliteERP {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	owner := []string{"CAIRN_LEDGER_DSN=" + ledgerDSN, "CAIRN_ERP_DSN=" + erpDSN}
	// The owner makes the tables and fills the ERP; then the roles get their grants.
	for _, args := range [][]string{{"init", "--tables"}, {"gen", "--warehouse", warehouse, "--date", date, "--invoices", "312", "--mismatches", "40", "--seed", "1"}} {
		cmd := exec.Command(cairnBin, args...)
		cmd.Env = h.env(owner...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("cairn %v as the owner: %v\n%s", args, err, out)
		}
	}
	dsns := grantRoles(t, map[string]string{"ledger": ledgerDSN, "erp": erpDSN}, map[string]*sql.DB{"ledger": ledger, "erp": erp})

	for _, name := range []string{"fetch", "extract", "match", "compare", "post-ledger", "update-stock", "debit-notes", "report", "outbox-sender", "supervisor", "compensator"} {
		// A service without a database gets DSNs no server answers: it must not open them.
		env := []string{"CAIRN_LEDGER_DSN=postgres://nobody@127.0.0.1:1/ledger", "CAIRN_ERP_DSN=postgres://nobody@127.0.0.1:1/erp"}
		for _, r := range serviceRoles[name] {
			db, _, _ := strings.Cut(r, ":")
			env = append(env, map[string]string{"ledger": "CAIRN_LEDGER_DSN=", "erp": "CAIRN_ERP_DSN="}[db]+dsns[r])
		}
		h.svc(name, env...)
	}
	h.startRun()
	rec := h.waitStatus(runLimit, kc.Done)
	h.assertPostgresNight(rec, ledger, erp, 0)

	// PostgreSQL refuses each role what it was not given: a real permission error.
	refusals := []struct{ role, db, stmt string }{
		{"ledger:post_ledger", "ledger", `INSERT INTO stock_adjustments(key, run_id, warehouse, sku, supplier_id, qty_delta, value_delta_paise, reason, created_at) VALUES ('forged', 'r', 'w', 's', 'x', 1, 1, 'forged', 'now')`},
		{"ledger:post_ledger", "ledger", `DELETE FROM ledger_entries`},
		{"ledger:post_ledger", "ledger", `UPDATE ledger_entries SET amount_paise = 0`},
		{"ledger:post_ledger", "ledger", `CREATE TABLE forged(x int)`},
		{"erp:update_stock", "erp", `INSERT INTO ledger_entries(key, run_id, invoice_no, line, kind, supplier_id, amount_paise, created_at) VALUES ('forged', 'r', 'i', 1, 'k', 'x', 1, 'now')`},
		{"erp:update_stock", "erp", `UPDATE purchase_orders SET qty = 0`},
		{"erp:match", "erp", `UPDATE stock_levels SET qty = 0`},
		{"erp:compare", "erp", `INSERT INTO stock_adjustments(key, run_id, warehouse, sku, supplier_id, qty_delta, value_delta_paise, reason, created_at) VALUES ('forged', 'r', 'w', 's', 'x', 1, 1, 'forged', 'now')`},
		{"erp:reader", "erp", `DELETE FROM stock_adjustments`},
	}
	for _, r := range refusals {
		db, err := sql.Open("pgx", dsns[r.role])
		if err != nil {
			t.Fatal(err)
		}
		_, err = db.Exec(r.stmt)
		db.Close()
		var pg *pgconn.PgError
		if !errors.As(err, &pg) || pg.Code != "42501" {
			t.Errorf("as %s: %s: %v, want PostgreSQL's permission denied (42501)", r.role, r.stmt, err)
		}
	}
	// And post_ledger may not even connect to the ERP database.
	if db, err := books.Open(context.Background(), withUser(t, erpDSN, dsns["ledger:post_ledger"])); err == nil {
		db.Close()
		t.Error("post_ledger opened the ERP database")
	} else if !errors.Is(err, books.ErrRefused) {
		t.Errorf("post_ledger opening the ERP database: %v, want it refused", err)
	}
}

// grantRoles runs deploy/postgres/roles (the roles, then each database's grants, as the
// owner), gives each role a password of this test and returns each "db:role"'s DSN.
func grantRoles(t *testing.T, dsns map[string]string, dbs map[string]*sql.DB) map[string]string {
	t.Helper()
	dir := filepath.Join(deployDir, "postgres", "roles")
	run := func(db *sql.DB, file string) {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(string(b)); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
	run(dbs["ledger"], "roles.sql")
	run(dbs["ledger"], "ledger.sql")
	run(dbs["erp"], "erp.sql")
	out := map[string]string{}
	for _, role := range []string{"post_ledger", "update_stock", "match", "compare", "compensator", "reader"} {
		pw := "e2e-" + strings.ReplaceAll(role, "_", "-") + "-" + filepath.Base(t.TempDir())
		if _, err := dbs["ledger"].Exec(`ALTER ROLE "` + role + `" PASSWORD '` + pw + `'`); err != nil {
			t.Fatal(err)
		}
		for db, dsn := range dsns {
			u, err := url.Parse(dsn)
			if err != nil {
				t.Fatal(err)
			}
			u.User = url.UserPassword(role, pw)
			out[db+":"+role] = u.String()
		}
	}
	return out
}

// withUser is dsn with the user and password of other.
func withUser(t *testing.T, dsn, other string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	o, err := url.Parse(other)
	if err != nil {
		t.Fatal(err)
	}
	u.User = o.User
	return u.String()
}
